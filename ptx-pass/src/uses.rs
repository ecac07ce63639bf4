//! Use analysis: where a kernel reads a parameter, and what it does with the value.
//!
//! The pass rewrites a parameter only when every mention of its name in the body is a plain
//! `ld.param.<t> %reg, [P];` of the parameter's full size; anything else is reported with its
//! line so the caller can refuse.

use crate::body::{Stmt, StmtKind};
use crate::module::{Kernel, Module, Param};
use crate::scan::Source;
use crate::types::ScalarType;

/// One `[@guard] ld.param.<ty> %dst, [P];` of a parameter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Load {
    pub stmt: Stmt,
    /// Token of the opcode.
    pub op: usize,
    pub ty: ScalarType,
    /// Token of the destination register.
    pub dst: usize,
}

/// A use the pass does not understand: its line and what it is.
pub(crate) type Misuse = (usize, String);

/// Every load of parameter `p` in kernel `k`, or the first use that is not such a load.
pub(crate) fn loads(m: &Module<'_>, k: &Kernel, p: &Param) -> Result<Vec<Load>, Misuse> {
    let src = &m.src;
    let mut out = Vec::new();
    for tok in k.open + 1..k.close {
        if !src.is_word(tok) || src.text_of(tok) != p.name {
            continue;
        }
        let line = src.line_of(tok);
        let stmt = k
            .stmt_at(tok)
            .ok_or_else(|| (line, "appears outside any statement".to_string()))?;
        out.push(classify(src, stmt, tok, p).map_err(|reason| (line, reason))?);
    }
    Ok(out)
}

/// Checks that the mention of `p` at token `tok` is a plain full-size `ld.param`.
fn classify(src: &Source<'_>, stmt: &Stmt, tok: usize, p: &Param) -> Result<Load, String> {
    if stmt.kind != StmtKind::Instr {
        return Err("its name appears outside an instruction".into());
    }
    let op = Kernel::op_index(src, stmt);
    let optext = src.text_of(op);
    let Some(rest) = optext.strip_prefix("ld.param") else {
        return Err(if optext.starts_with("mov") || optext.starts_with("cvta") {
            format!("its address is taken (`{optext}`)")
        } else if optext.starts_with("call") {
            "it is passed to `call`".into()
        } else {
            format!("it is used by `{optext}`, not loaded with `ld.param`")
        });
    };
    let vector = rest
        .split('.')
        .any(|part| part.len() > 1 && part.starts_with('v') && part[1..].parse::<u32>().is_ok());
    if vector {
        return Err(format!("vector load `{optext}`"));
    }
    let ty = rest
        .strip_prefix('.')
        .and_then(ScalarType::from_name)
        .ok_or_else(|| format!("unsupported load `{optext}`"))?;
    if src.is_punct(tok + 1, '+') || src.is_punct(tok + 1, '-') {
        return Err(format!("offset access `[{}+...]`", p.name));
    }
    let dst = op + 1;
    let plain = src.is_word(dst)
        && src.is_punct(op + 2, ',')
        && src.is_punct(op + 3, '[')
        && op + 4 == tok
        && src.is_punct(tok + 1, ']')
        && src.is_punct(tok + 2, ';')
        && tok + 2 == stmt.last;
    if !plain {
        return Err(format!(
            "unrecognised operands of `{optext}` (expected `{optext} %reg, [{}];`)",
            p.name
        ));
    }
    if ty.size() != p.size() {
        return Err(format!(
            "`{optext}` loads {} byte(s) of a {}-byte parameter",
            ty.size(),
            p.size()
        ));
    }
    Ok(Load {
        stmt: *stmt,
        op,
        ty,
        dst,
    })
}

/// Whether the value of every register loaded by `loads` is used only as an address: the source
/// of `cvta.to.global.<t> %x, %reg;` or inside the `[ ]` of a memory instruction. `Err(Some(line))`
/// names the first other use, `Err(None)` says there is no address use at all.
pub(crate) fn address_only(
    src: &Source<'_>,
    k: &Kernel,
    loads: &[Load],
) -> Result<(), Option<usize>> {
    let mut any = false;
    for l in loads {
        let reg = src.text_of(l.dst);
        for tok in k.open + 1..k.close {
            if !src.is_word(tok) || src.text_of(tok) != reg || loads.iter().any(|x| x.dst == tok) {
                continue;
            }
            let used_as_address = k.stmt_at(tok).is_some_and(|s| is_address_use(src, s, tok));
            if !used_as_address {
                return Err(Some(src.line_of(tok)));
            }
            any = true;
        }
    }
    if any {
        Ok(())
    } else {
        Err(None)
    }
}

/// Whether register token `tok` of `stmt` is used as an address.
fn is_address_use(src: &Source<'_>, stmt: &Stmt, tok: usize) -> bool {
    if stmt.kind != StmtKind::Instr {
        return false;
    }
    let op = Kernel::op_index(src, stmt);
    let optext = src.text_of(op);
    if optext.starts_with("cvta.to.global.") {
        return tok == op + 3
            && src.is_word(op + 1)
            && src.is_punct(op + 2, ',')
            && src.is_punct(op + 4, ';')
            && op + 4 == stmt.last;
    }
    let family = optext.split('.').next().unwrap_or("");
    if !matches!(
        family,
        "ld" | "ldu" | "st" | "atom" | "red" | "prefetch" | "prefetchu"
    ) {
        return false;
    }
    let mut depth = 0i32;
    for i in op + 1..tok {
        if src.is_punct(i, '[') {
            depth += 1;
        } else if src.is_punct(i, ']') {
            depth -= 1;
        }
    }
    depth > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::parse;
    use crate::testutil::kernel;

    /// `loads` of parameter 0 of `k` with `body`: Ok(number of loads) or the misuse.
    fn check(ty: &str, body: &[&str]) -> Result<usize, Misuse> {
        let text = kernel(&[&format!("{ty} k_param_0"), ".u32 k_param_1"], body);
        let m = parse(&text).unwrap();
        let k = &m.kernels[0];
        loads(&m, k, &k.params[0]).map(|l| l.len())
    }

    fn reason(ty: &str, body: &[&str]) -> String {
        let (line, reason) = check(ty, body).unwrap_err();
        assert_eq!(line, 16, "{reason}");
        reason
    }

    #[test]
    fn plain_loads_of_the_full_size_are_understood() {
        assert_eq!(check(".u64", &[]), Ok(0));
        assert_eq!(
            check(
                ".u64",
                &[
                    "ld.param.u64 \t%rd1, [k_param_0];",
                    "@!%p1 ld.param.b64 %rd2, [k_param_0];",
                    "ld.param.s64 %rd3,[k_param_0] ;",
                ]
            ),
            Ok(3)
        );
        assert_eq!(check(".u32", &["ld.param.s32 %rd1, [k_param_0];"]), Ok(1));
        assert_eq!(check(".f32", &["ld.param.b32 %r1, [k_param_0];"]), Ok(1));
        // In a comment, the name is not a use.
        assert_eq!(check(".u64", &["// mov.b64 %rd1, k_param_0;"]), Ok(0));
    }

    #[test]
    fn anything_else_is_a_misuse_with_its_line() {
        let r = |body: &str| reason(".u64", &[body]);
        assert!(r("mov.u64 %rd1, k_param_0;").contains("address is taken (`mov.u64`)"));
        assert!(r("cvta.param.u64 %rd1, k_param_0;").contains("`cvta.param.u64`"));
        assert!(r("ld.param.u64 %rd1, [k_param_0+0];").contains("offset access"));
        assert!(r("ld.param.u32 %r1, [k_param_0+4];").contains("offset access"));
        assert!(r("ld.param.v2.u32 {%r1, %r2}, [k_param_0];").contains("vector load"));
        assert!(r("ld.param.u32 %r1, [k_param_0];").contains("loads 4 byte(s) of a 8-byte"));
        assert!(r("ld.param.u64 %rd1, [k_param_0], 1;").contains("unrecognised operands"));
        assert!(r("ld.param.u64.u64 %rd1, [k_param_0];").contains("unsupported load"));
        assert!(!r("ld.param::entry.u64 %rd1, [k_param_0];").is_empty());
        assert!(r("call.uni f, (k_param_0);").contains("passed to `call`"));
        assert!(r("st.param.u64 [k_param_0], %rd1;").contains("used by `st.param.u64`"));
        assert!(r("k_param_0:").contains("outside an instruction"));
        assert!(r(".loc 1 k_param_0 2").contains("outside an instruction"));
    }

    /// `address_only` for parameter 0 of type `.u64`, loaded into `%rd1` first.
    fn address(body: &[&str]) -> Result<(), Option<usize>> {
        let mut lines = vec!["ld.param.u64 \t%rd1, [k_param_0];"];
        lines.extend(body);
        let text = kernel(&[".u64 k_param_0"], &lines);
        let m = parse(&text).unwrap();
        let k = &m.kernels[0];
        address_only(&m.src, k, &loads(&m, k, &k.params[0]).unwrap())
    }

    #[test]
    fn addresses_are_told_from_values() {
        assert_eq!(address(&["cvta.to.global.u64 %rd2, %rd1;"]), Ok(()));
        assert_eq!(address(&["ld.global.nc.f32 %f1, [%rd1];"]), Ok(()));
        assert_eq!(address(&["@%p1 st.global.u32 [%rd1+8], %r1;"]), Ok(()));
        assert_eq!(address(&["atom.global.add.u32 %r1, [%rd1], 1;"]), Ok(()));
        assert_eq!(
            address(&["red.global.add.u32 [%rd1], 1;", "ld.u32 %r1, [%rd1];"]),
            Ok(())
        );
        assert_eq!(address(&[]), Err(None));
        assert_eq!(address(&["st.global.u64 [%rd2], %rd1;"]), Err(Some(16)));
        assert_eq!(address(&["add.s64 %rd2, %rd1, 4;"]), Err(Some(16)));
        assert_eq!(address(&["cvta.to.global.u64 %rd1, %rd1;"]), Err(Some(16)));
        assert_eq!(address(&["cvta.to.shared.u64 %rd2, %rd1;"]), Err(Some(16)));
        assert_eq!(
            address(&[
                "cvta.to.global.u64 %rd2, %rd1;",
                "setp.eq.u64 %p1, %rd1, 0;"
            ]),
            Err(Some(17))
        );
    }
}
