//! Lexing: PTX text into tokens with byte offsets and lines, comments left out.
//!
//! Every structural decision of the pass is made on these tokens, so a brace or a parameter
//! name inside a `//` or `/* */` comment or a string literal can never be mistaken for code.

use crate::error::PtxError;

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A run of identifier characters: directives (`.reg`), opcodes (`ld.param.u64`), registers
    /// (`%rd1`), names, numbers (`0f3F800000`, `8.4`).
    Word,
    /// One ASCII punctuation byte: `{ } ( ) [ ] , ; : < > + - @ ! = |` ...
    Punct,
    /// A string literal, quotes included.
    Str,
}

/// One token: `text[start..end]` on 1-based line `line`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token {
    pub start: usize,
    pub end: usize,
    pub line: usize,
    pub kind: Kind,
}

/// A lexed PTX module: the text, its tokens, and where its block comments lie.
pub(crate) struct Source<'a> {
    pub text: &'a str,
    pub tokens: Vec<Token>,
    /// `(start, end)` byte ranges of `/* */` comments, in order.
    block_comments: Vec<(usize, usize)>,
}

/// Bytes that continue a word. Non-ASCII bytes count as word bytes so that a token never ends
/// inside a multi-byte character.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.') || b >= 0x80
}

/// Checks that `bytes` is UTF-8, naming the first bad byte otherwise.
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, PtxError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let offset = e.valid_up_to();
        PtxError::NotUtf8 {
            offset,
            line: 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count(),
        }
    })
}

impl<'a> Source<'a> {
    /// Splits `text` into tokens. Fails on an unterminated `/*` comment or string.
    pub fn lex(text: &'a str) -> Result<Self, PtxError> {
        let b = text.as_bytes();
        let mut tokens = Vec::new();
        let mut block_comments = Vec::new();
        let mut line = 1;
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'\n' {
                line += 1;
                i += 1;
            } else if c.is_ascii_whitespace() {
                i += 1;
            } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
                let start = i;
                let start_line = line;
                i += 2;
                loop {
                    match b.get(i) {
                        None => return Err(PtxError::parse(start_line, "unterminated /* comment")),
                        Some(b'*') if b.get(i + 1) == Some(&b'/') => {
                            i += 2;
                            break;
                        }
                        Some(b'\n') => {
                            line += 1;
                            i += 1;
                        }
                        Some(_) => i += 1,
                    }
                }
                block_comments.push((start, i));
            } else if c == b'"' {
                let start = i;
                i += 1;
                loop {
                    match b.get(i) {
                        None | Some(b'\n') => {
                            return Err(PtxError::parse(line, "unterminated string literal"))
                        }
                        Some(b'\\') if b.get(i + 1) != Some(&b'\n') => i += 2,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                let end = i.min(b.len());
                tokens.push(Token {
                    start,
                    end,
                    line,
                    kind: Kind::Str,
                });
            } else if is_word_byte(c) {
                let start = i;
                while i < b.len() && is_word_byte(b[i]) {
                    i += 1;
                }
                tokens.push(Token {
                    start,
                    end: i,
                    line,
                    kind: Kind::Word,
                });
            } else {
                tokens.push(Token {
                    start: i,
                    end: i + 1,
                    line,
                    kind: Kind::Punct,
                });
                i += 1;
            }
        }
        Ok(Source {
            text,
            tokens,
            block_comments,
        })
    }

    /// The text of token `i` (empty past the end).
    pub fn text_of(&self, i: usize) -> &'a str {
        self.tokens
            .get(i)
            .and_then(|t| self.text.get(t.start..t.end))
            .unwrap_or("")
    }

    /// Whether token `i` is the punctuation `p`.
    pub fn is_punct(&self, i: usize, p: char) -> bool {
        self.tokens.get(i).is_some_and(|t| t.kind == Kind::Punct) && self.text_of(i).starts_with(p)
    }

    /// Whether token `i` is a word (directive, opcode, register, name or number).
    pub fn is_word(&self, i: usize) -> bool {
        self.tokens.get(i).is_some_and(|t| t.kind == Kind::Word)
    }

    /// Line of token `i`; the last line past the end.
    pub fn line_of(&self, i: usize) -> usize {
        match self.tokens.get(i).or(self.tokens.last()) {
            Some(t) => t.line,
            None => 1,
        }
    }

    /// Index of the brace or parenthesis closing the one at token `open`.
    pub fn matching(&self, open: usize) -> Option<usize> {
        let (o, c) = match self.text_of(open) {
            "{" => ('{', '}'),
            "(" => ('(', ')'),
            "[" => ('[', ']'),
            _ => return None,
        };
        let mut depth = 0usize;
        for i in open..self.tokens.len() {
            if self.is_punct(i, o) {
                depth += 1;
            } else if self.is_punct(i, c) {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Index of the first token after token `i` that sits on a later line.
    pub fn next_line_token(&self, i: usize) -> usize {
        let line = self.line_of(i);
        let mut j = i;
        while j < self.tokens.len() && self.tokens[j].line == line {
            j += 1;
        }
        j
    }

    /// Whether byte `offset` lies inside a `/* */` comment.
    pub fn in_block_comment(&self, offset: usize) -> bool {
        self.block_comments
            .iter()
            .any(|&(s, e)| s < offset && offset < e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(src: &str) -> Vec<&str> {
        let s = Source::lex(src).unwrap();
        (0..s.tokens.len()).map(|i| s.text_of(i)).collect()
    }

    #[test]
    fn comments_and_strings_hide_braces() {
        let src = "{ // } not code\n /* { */ .pragma \"}\"; }";
        assert_eq!(words(src), ["{", ".pragma", "\"}\"", ";", "}"]);
        let s = Source::lex(src).unwrap();
        assert_eq!(s.matching(0), Some(4));
        assert!(s.in_block_comment(src.find("{ */").unwrap()));
    }

    #[test]
    fn instructions_split_into_words_and_punctuation() {
        assert_eq!(
            words("@!%p1 ld.param.u64 \t%rd1, [k_param_0+8];"),
            [
                "@",
                "!",
                "%p1",
                "ld.param.u64",
                "%rd1",
                ",",
                "[",
                "k_param_0",
                "+",
                "8",
                "]",
                ";"
            ]
        );
    }

    #[test]
    fn lines_count_across_comments_and_crlf() {
        let s = Source::lex("a\r\n/* x\n y */ b\n\nc").unwrap();
        let lines: Vec<usize> = s.tokens.iter().map(|t| t.line).collect();
        assert_eq!(lines, [1, 3, 5]);
    }

    #[test]
    fn unterminated_comment_and_string_are_parse_errors() {
        assert!(matches!(
            Source::lex("a\n/* open"),
            Err(PtxError::Parse { line: 2, .. })
        ));
        assert!(matches!(
            Source::lex(".file 1 \"x\n\""),
            Err(PtxError::Parse { line: 1, .. })
        ));
        assert!(matches!(
            Source::lex("\"\\"),
            Err(PtxError::Parse { line: 1, .. })
        ));
    }

    #[test]
    fn invalid_utf8_names_the_byte() {
        assert_eq!(
            utf8(b"ab\ncd\xff"),
            Err(PtxError::NotUtf8 { offset: 5, line: 2 })
        );
    }
}
