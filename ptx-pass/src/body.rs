//! Kernel bodies: statements (instructions, labels, nested blocks, line directives) and the
//! registers they declare.

use crate::error::PtxError;
use crate::module::Kernel;
use crate::scan::Source;
use crate::types::reg_bits;

/// What a body statement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StmtKind {
    /// `{` of a nested block (inline asm, a call's parameter scope).
    Open,
    /// `}` of a nested block.
    Close,
    /// `name:`
    Label,
    /// `.loc`/`.file`: a directive that ends at the end of its line.
    LineDirective,
    /// Anything ending with `;`: instructions and declarations.
    Instr,
}

/// Tokens `first..=last` of a body.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stmt {
    pub first: usize,
    pub last: usize,
    pub kind: StmtKind,
}

/// A `.reg` declaration: `name` or `name<count>` of `bits` bits (`None` when not plain).
pub(crate) struct RegDecl {
    name: String,
    count: Option<u64>,
    bits: Option<u32>,
}

impl Kernel {
    /// The statement holding body token `tok`.
    pub fn stmt_at(&self, tok: usize) -> Option<&Stmt> {
        let k = tok.checked_sub(self.open + 1)?;
        self.stmts.get(*self.stmt_of.get(k)?)
    }

    /// Token after a statement's predicate guard (`@%p`, `@!%p`): where its opcode is.
    pub fn op_index(src: &Source<'_>, stmt: &Stmt) -> usize {
        let mut i = stmt.first;
        if src.is_punct(i, '@') {
            i += 1;
            if src.is_punct(i, '!') {
                i += 1;
            }
            i += 1;
        }
        i
    }

    /// The last token of the leading `.reg`/`.local`/`.shared` declarations (the `{` when
    /// there are none): new declarations and loads go right after it.
    pub fn leading_end(&self, src: &Source<'_>) -> usize {
        let mut end = self.open;
        for s in &self.stmts {
            let decl = s.kind == StmtKind::Instr
                && matches!(src.text_of(s.first), ".reg" | ".local" | ".shared");
            if !decl {
                break;
            }
            end = s.last;
        }
        end
    }

    /// The width in bits of register `name` as the kernel declares it; `None` when it is not
    /// declared, or declared twice with different widths.
    pub fn reg_bits(&self, name: &str) -> Option<u32> {
        let mut found = None;
        for d in &self.regs {
            let hit = match d.count {
                None => d.name == name,
                Some(n) => name
                    .strip_prefix(d.name.as_str())
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .is_some_and(|k| k < n),
            };
            if hit {
                match (found, d.bits) {
                    (None, Some(b)) => found = Some(b),
                    (Some(a), Some(b)) if a == b => {}
                    _ => return None,
                }
            }
        }
        found
    }
}

/// Splits the body between tokens `open` and `close` into statements; returns them and, for
/// every body token, the index of its statement.
pub(crate) fn statements(
    src: &Source<'_>,
    open: usize,
    close: usize,
) -> Result<(Vec<Stmt>, Vec<usize>), PtxError> {
    let mut stmts = Vec::new();
    let mut stmt_of = Vec::with_capacity(close - open);
    let mut i = open + 1;
    while i < close {
        let (last, kind) = if src.is_punct(i, '{') {
            (i, StmtKind::Open)
        } else if src.is_punct(i, '}') {
            (i, StmtKind::Close)
        } else if src.is_word(i) && src.is_punct(i + 1, ':') && i + 1 < close {
            (i + 1, StmtKind::Label)
        } else if matches!(src.text_of(i), ".loc" | ".file") {
            (
                src.next_line_token(i).min(close) - 1,
                StmtKind::LineDirective,
            )
        } else {
            let mut j = i;
            let mut depth = 0usize;
            loop {
                if j >= close {
                    return Err(PtxError::parse(
                        src.line_of(i),
                        "statement not terminated by `;`",
                    ));
                }
                if src.is_punct(j, '{') {
                    depth += 1;
                } else if src.is_punct(j, '}') {
                    if depth == 0 {
                        return Err(PtxError::parse(
                            src.line_of(i),
                            "statement not terminated by `;`",
                        ));
                    }
                    depth -= 1;
                } else if depth == 0 && src.is_punct(j, ';') {
                    break;
                }
                j += 1;
            }
            (j, StmtKind::Instr)
        };
        stmt_of.extend(std::iter::repeat_n(stmts.len(), last + 1 - i));
        stmts.push(Stmt {
            first: i,
            last,
            kind,
        });
        i = last + 1;
    }
    Ok((stmts, stmt_of))
}

/// The registers a `.reg` statement declares.
pub(crate) fn reg_decls(src: &Source<'_>, s: &Stmt) -> Vec<RegDecl> {
    let mut k = s.first + 1;
    let mut bits = None;
    let mut plain = true;
    while k < s.last && src.text_of(k).starts_with('.') {
        let t = src.text_of(k);
        if t.starts_with(".v") {
            plain = false;
        } else {
            bits = reg_bits(t);
        }
        k += 1;
    }
    let bits = bits.filter(|_| plain);
    let mut out = Vec::new();
    while k < s.last {
        if !src.is_word(k) {
            k += 1;
            continue;
        }
        let name = src.text_of(k).to_string();
        let mut count = None;
        if src.is_punct(k + 1, '<') && src.is_punct(k + 3, '>') {
            count = Some(src.text_of(k + 2).parse().unwrap_or(0));
            k += 3;
        }
        out.push(RegDecl { name, count, bits });
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::parse;

    #[test]
    fn statements_and_registers() {
        let text = ".entry k()\n{\n\t.reg .b32 \t%r<4>;\n\t// a comment\n\t.reg .b64 \t%rd<9>, %x;\n\
                    \t.reg .v2 .b32 %v;\n\t.reg .f32 %r3;\n\t.loc 1 2 3\n$L0:\n\
                    \t@!%p1 ld.global.v2.b32 { %r1, %r2 }, [ %rd1 + 0 ];\n\t{ .reg .pred p; }\n\tret;\n}\n";
        let m = parse(text).unwrap();
        let (src, k) = (&m.src, &m.kernels[0]);
        let kinds: Vec<StmtKind> = k.stmts.iter().map(|s| s.kind).collect();
        use StmtKind::*;
        assert_eq!(
            kinds,
            [
                Instr,
                Instr,
                Instr,
                Instr,
                LineDirective,
                Label,
                Instr,
                Open,
                Instr,
                Close,
                Instr
            ]
        );
        assert_eq!(src.text_of(k.leading_end(src)), ";");
        assert_eq!(src.line_of(k.leading_end(src)), 7);
        let load = &k.stmts[6];
        assert_eq!(src.text_of(Kernel::op_index(src, load)), "ld.global.v2.b32");
        assert_eq!(k.reg_bits("%r0"), Some(32));
        assert_eq!(k.reg_bits("%r4"), None, "out of range");
        assert_eq!(k.reg_bits("%r3"), Some(32), "same width twice");
        assert_eq!(k.reg_bits("%rd8"), Some(64));
        assert_eq!(k.reg_bits("%rd"), None);
        assert_eq!(k.reg_bits("%x"), Some(64));
        assert_eq!(k.reg_bits("%v"), None, "vector registers are not plain");
        assert_eq!(k.reg_bits("%q"), None);
    }

    #[test]
    fn conflicting_declarations_are_unknown() {
        let m = parse(".entry k()\n{\n\t.reg .b32 %r<4>;\n\t.reg .b64 %r2;\n}\n").unwrap();
        assert_eq!(m.kernels[0].reg_bits("%r2"), None);
        assert_eq!(m.kernels[0].reg_bits("%r1"), Some(32));
    }

    #[test]
    fn a_body_without_declarations_inserts_after_the_brace() {
        let m = parse(".entry k()\n{\n\tret;\n}\n").unwrap();
        assert_eq!(m.src.text_of(m.kernels[0].leading_end(&m.src)), "{");
    }
}
