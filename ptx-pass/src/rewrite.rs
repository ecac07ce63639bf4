//! The rewrite: a list of byte-range edits on the original text, applied in one pass so that
//! every byte not edited is copied unchanged.

use crate::error::PtxError;
use crate::module::{Kernel, Module};
use crate::report::{KernelSignature, ParamSignature, Slot, SlotKind};
use crate::select::{Choice, Plan};
use crate::types::ScalarType;
use crate::uses::Load;

/// Replace `text[start..end]` with `with` (an insertion when `start == end`).
struct Edit {
    start: usize,
    end: usize,
    with: String,
}

/// The rewritten text, the signatures of all kernels, and notes.
pub(crate) fn rewrite(
    m: &Module<'_>,
    plan: &Plan,
    pdl: bool,
) -> Result<(String, Vec<KernelSignature>, Vec<String>), PtxError> {
    let src = &m.src;
    let mut edits = Vec::new();
    let mut notes = plan.notes.clone();
    if pdl {
        pdl_header(m, &mut edits, &mut notes)?;
    }
    let mut signatures = Vec::with_capacity(m.kernels.len());
    for (k, choices) in m.kernels.iter().zip(&plan.kernels) {
        if !choices.is_empty() {
            kernel(m, k, choices, pdl, &mut edits)?;
            let names: Vec<&str> = choices
                .iter()
                .map(|c| k.params[c.param].name.as_str())
                .collect();
            notes.push(format!(
                "kernel `{}`: {} read through table slots{}",
                k.name,
                names.join(", "),
                if pdl { ", with PDL" } else { "" }
            ));
        }
        signatures.push(signature(k, choices));
    }
    if pdl {
        let rewritten: Vec<bool> = plan.kernels.iter().map(|c| !c.is_empty()).collect();
        let n = coherent_loads(m, &rewritten, &mut edits);
        if n > 0 {
            notes.push(format!(
                "{n} non-coherent global loads (ld.global.nc, ldu.global) of rewritten kernels and device functions now take the coherent path (PDL)"
            ));
        }
    }
    edits.sort_by_key(|e| (e.start, e.end));
    let text = src.text;
    let mut out = String::with_capacity(text.len() + 256 * plan.kernels.len());
    let mut at = 0;
    for e in &edits {
        let kept = text
            .get(at..e.start)
            .ok_or_else(|| PtxError::parse(1, "internal error: overlapping edits"))?;
        out.push_str(kept);
        out.push_str(&e.with);
        at = e.end;
    }
    out.push_str(text.get(at..).unwrap_or(""));
    Ok((out, signatures, notes))
}

/// The signature of kernel `k` after the rewrite.
fn signature(k: &Kernel, choices: &[Choice]) -> KernelSignature {
    let params = k
        .params
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let slot = choices.iter().find(|c| c.param == index).map(|c| Slot {
                kind: c.slot,
                align: match c.slot {
                    SlotKind::Pointer => p.align.map_or(16, |(n, _)| n),
                    SlotKind::Scalar(t) => t.size(),
                },
            });
            ParamSignature {
                index,
                name: p.name.clone(),
                size: if slot.is_some() { 8 } else { p.size() },
                slot,
            }
        })
        .collect();
    KernelSignature {
        name: k.name.clone(),
        params,
    }
}

/// A register-name prefix that occurs nowhere in the kernel's text.
fn unique_prefix(kernel_text: &str) -> String {
    let mut prefix = "%tslot".to_string();
    let mut n = 0;
    while kernel_text.contains(&prefix) {
        n += 1;
        prefix = format!("%tslot{n}");
    }
    prefix
}

/// The edits for one kernel.
fn kernel(
    m: &Module<'_>,
    k: &Kernel,
    choices: &[Choice],
    pdl: bool,
    edits: &mut Vec<Edit>,
) -> Result<(), PtxError> {
    let src = &m.src;
    let tok = |i: usize| src.tokens[i];
    let kernel_text = src
        .text
        .get(tok(k.first).start..tok(k.close).end)
        .unwrap_or("");
    let pfx = unique_prefix(kernel_text);
    let mut decls = vec![
        format!(".reg .b64 \t{pfx}_p<{}>;", choices.len()),
        format!(".reg .b64 \t{pfx}_a<{}>;", choices.len()),
    ];
    let mut loads = Vec::new();
    for (i, c) in choices.iter().enumerate() {
        let p = &k.params[c.param];
        let value = format!("{pfx}_v{i}");
        let (value_bits, global_ty) = match p.ty {
            ScalarType::S8 if c.slot != SlotKind::Pointer => (16, "s8"),
            _ => match p.size() {
                8 => (64, "b64"),
                4 => (32, "b32"),
                2 => (16, "b16"),
                _ => (16, "u8"),
            },
        };
        decls.push(format!(".reg .b{value_bits} \t{value};"));
        loads.push(format!("ld.param.u64 \t{pfx}_p{i}, [{}];", p.name));
        loads.push(format!("cvta.to.global.u64 \t{pfx}_a{i}, {pfx}_p{i};"));
        loads.push(format!("ld.global.{global_ty} \t{value}, [{pfx}_a{i}];"));
        match (c.slot, p.ptr, p.align) {
            (SlotKind::Scalar(_), _, _) => edits.push(Edit {
                start: tok(p.ty_tok).start,
                end: tok(p.ty_tok).end,
                with: ".u64".into(),
            }),
            (SlotKind::Pointer, Some(_), Some((_, align_tok))) => edits.push(Edit {
                start: tok(align_tok).start,
                end: tok(align_tok).end,
                with: "8".into(),
            }),
            _ => {}
        }
        let signed_value = global_ty == "s8";
        for l in &c.loads {
            let with = replace_load(m, k, l, &value, signed_value).map_err(|reason| {
                PtxError::Refused {
                    kernel: k.name.clone(),
                    param: p.name.clone(),
                    line: src.line_of(l.op),
                    reason,
                }
            })?;
            edits.push(Edit {
                start: tok(l.op).start,
                end: tok(l.stmt.last).end,
                with,
            });
        }
    }
    let mut lines = decls;
    if pdl {
        lines.push("griddepcontrol.launch_dependents;".into());
    }
    lines.extend(loads);
    if pdl {
        lines.push("griddepcontrol.wait;".into());
    }
    edits.push(insertion(m, k, &lines));
    Ok(())
}

/// With PDL a rewritten kernel may start while the grid it depends on still writes: its global
/// loads, and those of every `.func` it may call, must take the coherent path. `ld.global.nc`
/// ("read-only for the kernel's lifetime") becomes `ld.global` with the same other qualifiers,
/// and `ldu.global` becomes `ld.global`: always correct loads. Kernels not rewritten are left
/// alone.
fn coherent_loads(m: &Module<'_>, rewritten: &[bool], edits: &mut Vec<Edit>) -> usize {
    let src = &m.src;
    let untouched: Vec<std::ops::Range<usize>> = m
        .kernels
        .iter()
        .zip(rewritten)
        .filter(|(_, r)| !**r)
        .map(|(k, _)| k.open..k.close)
        .collect();
    let mut n = 0;
    for i in 0..src.tokens.len() {
        let t = src.text_of(i);
        let with = if let Some(rest) = t.strip_prefix("ldu.global.") {
            format!("ld.global.{rest}")
        } else if t.starts_with("ld.global.") && t.split('.').any(|p| p == "nc") {
            let parts: Vec<&str> = t.split('.').filter(|p| *p != "nc").collect();
            parts.join(".")
        } else {
            continue;
        };
        if !src.is_word(i) || untouched.iter().any(|r| r.contains(&i)) {
            continue;
        }
        edits.push(Edit {
            start: src.tokens[i].start,
            end: src.tokens[i].end,
            with,
        });
        n += 1;
    }
    n
}

/// The text replacing load `l` (from its opcode to its `;`): a move or conversion from the value
/// register `value`, whose 1-byte content (if any) is sign-extended when `signed_value`.
fn replace_load(
    m: &Module<'_>,
    k: &Kernel,
    l: &Load,
    value: &str,
    signed_value: bool,
) -> Result<String, String> {
    let src = &m.src;
    let dst = src.text_of(l.dst);
    let space = src
        .text
        .get(src.tokens[l.op].end..src.tokens[l.dst].start)
        .unwrap_or(" ");
    let bits = k
        .reg_bits(dst)
        .ok_or_else(|| format!("destination register `{dst}` is not declared with a plain type"))?;
    let load_bits = 8 * l.ty.size() as u32;
    let sign = |signed: bool| if signed { 's' } else { 'u' };
    let op = if load_bits == 8 {
        if bits == 16 && l.ty.is_signed() == signed_value {
            "mov.b16".to_string()
        } else if matches!(bits, 16 | 32 | 64) {
            format!(
                "cvt.{}{bits}.{}8",
                sign(l.ty.is_signed()),
                sign(l.ty.is_signed())
            )
        } else {
            return Err(format!("`{dst}` is a {bits}-bit register"));
        }
    } else if bits == load_bits {
        format!("mov.b{bits}")
    } else if bits > load_bits && !l.ty.is_float() && matches!(bits, 32 | 64) {
        let s = sign(l.ty.is_signed());
        format!("cvt.{s}{bits}.{s}{load_bits}")
    } else {
        return Err(format!(
            "`{dst}` is a {bits}-bit register, loaded with .{}",
            l.ty.name()
        ));
    };
    Ok(format!("{op}{space}{dst}, {value};"))
}

/// Inserts `lines` right after the kernel's leading declarations: as whole lines after the
/// declaration's line when nothing else follows it there, else right after its `;`.
fn insertion(m: &Module<'_>, k: &Kernel, lines: &[String]) -> Edit {
    let src = &m.src;
    let text = src.text;
    let after = k.leading_end(src);
    let offset = src.tokens[after].end;
    let next_start = src.tokens.get(after + 1).map_or(text.len(), |t| t.start);
    let newline = text[offset..].find('\n').map(|i| offset + i);
    let eol = |nl: usize| {
        if text[..nl].ends_with('\r') {
            "\r\n"
        } else {
            "\n"
        }
    };
    match newline {
        Some(nl) if nl < next_start && !src.in_block_comment(nl) => {
            let eol = eol(nl);
            let with = lines.iter().map(|l| format!("\t{l}{eol}")).collect();
            Edit {
                start: nl + 1,
                end: nl + 1,
                with,
            }
        }
        _ => {
            let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
            let with = lines.iter().map(|l| format!("{eol}\t{l}")).collect();
            Edit {
                start: offset,
                end: offset,
                with,
            }
        }
    }
}

/// The `.version`/`.target` edits PDL needs (`griddepcontrol` wants PTX ISA 7.8 and sm_90).
fn pdl_header(
    m: &Module<'_>,
    edits: &mut Vec<Edit>,
    notes: &mut Vec<String>,
) -> Result<(), PtxError> {
    let src = &m.src;
    let (version, line) = m.version().ok_or(PtxError::Pdl {
        line: 1,
        reason: "the module has no `.version`".into(),
    })?;
    let (major, minor) = version.ok_or_else(|| PtxError::Pdl {
        line,
        reason: format!(
            "cannot read `.version {}`",
            src.text_of(m.version.unwrap_or(0))
        ),
    })?;
    if (major, minor) < (7, 8) {
        let t = src.tokens[m.version.unwrap_or(0)];
        edits.push(Edit {
            start: t.start,
            end: t.end,
            with: "7.8".into(),
        });
        notes.push(format!(
            "raised .version {major}.{minor} to 7.8 for griddepcontrol (PDL)"
        ));
    }
    let target = m.target.as_ref().ok_or(PtxError::Pdl {
        line: 1,
        reason: "the module has no `.target`".into(),
    })?;
    let line = src.line_of(target.directive);
    let refuse = |reason: String| PtxError::Pdl { line, reason };
    let mut sm = None;
    for i in target.first..=target.last {
        let t = src.text_of(i);
        if i % 2 != target.first % 2 {
            if !src.is_punct(i, ',') {
                return Err(refuse(format!("unexpected `{t}` in `.target`")));
            }
            continue;
        }
        if let Some(arch) = t.strip_prefix("sm_") {
            let digits = arch.bytes().take_while(u8::is_ascii_digit).count();
            let number = arch[..digits].parse::<u32>();
            match (number, &arch[digits..]) {
                (Ok(n), "" | "a" | "f") if sm.is_none() => sm = Some((n, i)),
                _ => return Err(refuse(format!("cannot read target `{t}`"))),
            }
        } else if !matches!(t, "texmode_unified" | "texmode_independent" | "debug") {
            return Err(refuse(format!(
                "`.target` option `{t}` is not known to work with sm_90"
            )));
        }
    }
    let (n, i) = sm.ok_or_else(|| refuse("`.target` names no sm_ architecture".into()))?;
    if n < 90 {
        if src.text_of(i).len() != 3 + n.to_string().len() {
            return Err(refuse(format!("cannot raise `{}`", src.text_of(i))));
        }
        edits.push(Edit {
            start: src.tokens[i].start,
            end: src.tokens[i].end,
            with: "sm_90".into(),
        });
        notes.push(format!(
            "raised .target {} to sm_90 for griddepcontrol (PDL)",
            src.text_of(i)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::kernel;
    use crate::{indirect, Options, PtxError};

    fn scalars(text: &str, names: &[&str], pdl: bool) -> Result<crate::Rewritten, PtxError> {
        let o = Options {
            scalars: names.iter().map(|n| n.parse().unwrap()).collect(),
            pdl,
            ..Options::default()
        };
        indirect(text.as_bytes(), &o)
    }

    fn pdl_header(version: &str, target: &str) -> Result<(String, Vec<String>), PtxError> {
        let text = kernel(&[".u32 k_param_0"], &["ld.param.u32 %r1, [k_param_0];"])
            .replace(".version 8.4", version)
            .replace(".target sm_70", target);
        let out = scalars(&text, &["k:0"], true)?;
        let head: String = out.ptx.lines().take(2).collect::<Vec<_>>().join("\n");
        Ok((head, out.notes))
    }

    #[test]
    fn pdl_raises_version_and_target_only_when_lower() {
        let (head, notes) = pdl_header(".version 7.0", ".target sm_80, debug").unwrap();
        assert_eq!(head, ".version 7.8\n.target sm_90, debug");
        assert_eq!(notes.len(), 3, "{notes:?}");
        for (v, t) in [
            (".version 8.0", ".target sm_90a"),
            (".version 8.7", ".target sm_100a"),
            (".version 9.0", ".target sm_120f"),
            (".version 7.8", ".target sm_90, texmode_independent"),
        ] {
            let (head, notes) = pdl_header(v, t).unwrap();
            assert_eq!(head, format!("{v}\n{t}"));
            assert_eq!(notes.len(), 1, "{notes:?}");
        }
        for (v, t, line) in [
            (".version 8.4", ".target compute_70", 2),
            (".version 8.4", ".target sm_70, map_f64_to_f32", 2),
            (".version 8.4", ".target sm_70 sm_80", 2),
            (".version 8.4", ".target sm_70, sm_80", 2),
            (".version 8.4", ".target sm_80a", 2),
            (".version x.y", ".target sm_70", 1),
            ("", ".target sm_70", 1),
            (".version 8.4", "", 1),
        ] {
            match pdl_header(v, t) {
                Err(PtxError::Pdl { line: l, .. }) => assert_eq!(l, line, "{v} {t}"),
                other => panic!("{v} {t}: {other:?}"),
            }
        }
    }

    #[test]
    fn small_scalars_convert_to_the_loaded_width() {
        let text = kernel(
            &[
                ".u8 k_param_0",
                ".s8 k_param_1",
                ".u16 k_param_2",
                ".u32 k_param_3",
            ],
            &[
                "ld.param.u8 \t%rs1, [k_param_0];",
                "ld.param.s8 \t%rs2, [k_param_0];",
                "ld.param.u8 \t%r1, [k_param_0];",
                "ld.param.s8 \t%rs3, [k_param_1];",
                "ld.param.u8 \t%rs4, [k_param_1];",
                "ld.param.s8 \t%rd1, [k_param_1];",
                "ld.param.b16 \t%rs1, [k_param_2];",
                "ld.param.u32 \t%rd2, [k_param_3];",
            ],
        );
        let out = scalars(&text, &["k:0", "k:1", "k:2", "k:3"], false).unwrap();
        for line in [
            "\tld.global.u8 \t%tslot_v0, [%tslot_a0];\n",
            "\tld.global.s8 \t%tslot_v1, [%tslot_a1];\n",
            "\tld.global.b16 \t%tslot_v2, [%tslot_a2];\n",
            "\t.reg .b16 \t%tslot_v0;\n",
            "\tmov.b16 \t%rs1, %tslot_v0;\n",
            "\tcvt.s16.s8 \t%rs2, %tslot_v0;\n",
            "\tcvt.u32.u8 \t%r1, %tslot_v0;\n",
            "\tmov.b16 \t%rs3, %tslot_v1;\n",
            "\tcvt.u16.u8 \t%rs4, %tslot_v1;\n",
            "\tcvt.s64.s8 \t%rd1, %tslot_v1;\n",
            "\tmov.b16 \t%rs1, %tslot_v2;\n",
            "\tcvt.u64.u32 \t%rd2, %tslot_v3;\n",
            "\t.param .u64 k_param_0,\n",
        ] {
            assert!(out.ptx.contains(line), "{line:?} not in\n{}", out.ptx);
        }
    }

    #[test]
    fn loads_into_registers_of_another_width_are_refused() {
        for (param, load) in [
            (".f32 k_param_0", "ld.param.f32 %rd1, [k_param_0];"),
            (".u32 k_param_0", "ld.param.u32 %rs1, [k_param_0];"),
            (".u32 k_param_0", "ld.param.u32 %p1, [k_param_0];"),
        ] {
            let text = kernel(&[param], &[load]);
            match scalars(&text, &["k:0"], false) {
                Err(PtxError::Refused { line: 15, .. }) => {}
                other => panic!("{load}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_register_prefix_is_unique_in_the_kernel() {
        let text = kernel(
            &[".u32 k_param_0"],
            &[
                "// %tslot and %tslot1 are taken",
                "ld.param.u32 %r1, [k_param_0];",
            ],
        );
        let out = scalars(&text, &["k:0"], false).unwrap();
        assert!(
            out.ptx.contains("\tmov.b32 %r1, %tslot2_v0;\n"),
            "{}",
            out.ptx
        );
    }

    #[test]
    fn inserts_mid_line_when_the_line_goes_on() {
        let one_line = ".version 8.4\n.target sm_70\n.address_size 64\n\
                        .entry k(.param .u32 p) { .reg .b32 %r<2>; ld.param.u32 %r1, [p]; ret; }\n";
        let out = scalars(one_line, &["p"], false).unwrap();
        assert!(out.ptx.contains(
            "{ .reg .b32 %r<2>;\n\t.reg .b64 \t%tslot_p<1>;\n\t.reg .b64 \t%tslot_a<1>;\n\t.reg .b32 \
             \t%tslot_v0;\n\tld.param.u64 \t%tslot_p0, [p];\n\tcvta.to.global.u64 \t%tslot_a0, \
             %tslot_p0;\n\tld.global.b32 \t%tslot_v0, [%tslot_a0]; mov.b32 %r1, %tslot_v0; ret; }\n"
        ));
        let comment = kernel(&[".u32 k_param_0"], &["ld.param.u32 %r1, [k_param_0];"])
            .replace("%rd<9>;\n", "%rd<9>; /* a comment\n that goes on */\n");
        let out = scalars(&comment, &["k:0"], false).unwrap();
        assert!(out.ptx.contains("%rd<9>;\n\t.reg .b64"));
        assert!(out
            .ptx
            .contains("[%tslot_a0]; /* a comment\n that goes on */\n"));
        let trailing = comment.replace("/* a comment\n that goes on */", "// fine");
        let out = scalars(&trailing, &["k:0"], false).unwrap();
        assert!(out.ptx.contains("%rd<9>; // fine\n\t.reg .b64"));
    }
}
