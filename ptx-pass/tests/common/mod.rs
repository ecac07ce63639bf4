//! Fixtures and the byte-for-byte check shared by the integration tests.
#![allow(dead_code)]

use std::collections::HashMap;

use graph_rt_ptx::{inspect, DefaultChoice, Options, ParamRef};

macro_rules! fixtures {
    ($dir:literal: $($name:literal),* $(,)?) => {
        &[$(($name, include_bytes!(concat!($dir, $name, ".ptx")) as &[u8])),*]
    };
}

/// The shipped kernels' NVRTC PTX.
pub const KERNELS: &[(&str, &[u8])] = fixtures!("../../../kernels/ptx/":
    "axpy", "chain", "chain_pdl", "reduce", "rmsnorm", "table",
);

/// Triton 3.6 PTX (`.version 8.7`, `sm_90a`).
pub const TRITON: &[(&str, &[u8])] = fixtures!("../../fixtures/triton/":
    "add_div16", "add_div16_cluster2", "add_div16_maxnreg", "add_div16_nolineinfo", "add_nodiv",
    "gdc_add1", "layernorm_fwd", "matmul_fp16", "row_sum", "scaled_strided_mixeddiv",
    "scaled_strided_nodiv", "softmax",
);

/// The same Triton kernels at `.version 8.4`.
pub const TRITON_PTX84: &[(&str, &[u8])] = fixtures!("../../fixtures/triton/ptx84/":
    "add_div16", "add_div16_cluster2", "add_div16_maxnreg", "add_div16_nolineinfo", "add_nodiv",
    "gdc_add1", "layernorm_fwd", "matmul_fp16", "row_sum", "scaled_strided_mixeddiv",
    "scaled_strided_nodiv", "softmax",
);

/// Triton 3.6 PTX of real torch.compile kernels (PyTorch 2.11 Inductor on an H200, recorded by
/// scripts/inductor_cases.py): templates (mm, persistent TMA mm, conv, flex attention), scans,
/// sorts, cooperative and PDL reductions, libdevice math, Philox dropout, a user kernel.
pub const INDUCTOR: &[(&str, &[u8])] = fixtures!("../../fixtures/inductor/":
    "argmax", "conv_template_relu", "cooperative_amax_sum", "cumprod_scan", "dropout_philox",
    "embedding", "flex_attention", "gelu_backward_sum", "integer_ops", "libdevice_math",
    "mm_persistent_tma", "mm_template_bias_relu", "pdl_layer_norm_relu", "scatter_amax", "sort",
    "user_kernel", "var_mean_columns", "where_mask",
);

/// NVRTC 12.4 PTX, some with line info.
pub const NVCC: &[(&str, &[u8])] = fixtures!("../../fixtures/nvcc/":
    "axpy", "chain", "chain_pdl", "chain_pdl_lineinfo", "reduce", "reduce_lineinfo", "rmsnorm",
    "rmsnorm_lineinfo", "table",
);

/// nvcc 13.0 PTX (`.version 9.0`).
pub const NVCC13: &[(&str, &[u8])] = fixtures!("../../fixtures/nvcc/cu13/":
    "axpy", "chain", "chain_pdl", "chain_pdl_O3_lineinfo", "reduce", "reduce_O3_lineinfo",
    "rmsnorm", "rmsnorm_O3_lineinfo", "table",
);

/// The refusal fixtures of `tests/refusals/`.
pub const REFUSALS: &[(&str, &[u8])] = fixtures!("../refusals/":
    "byval_array", "call_argument", "cvta_param", "kernel_address_taken", "mov_address",
    "not_utf8", "offset_load", "truncated_body", "undeclared_register", "unparseable_target_pdl",
    "vector_load", "wrong_size_load",
);

/// Every fixture that is valid PTX.
pub fn all_valid() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    [KERNELS, TRITON, TRITON_PTX84, INDUCTOR, NVCC, NVCC13]
        .into_iter()
        .flatten()
        .copied()
}

/// What [`check_edits`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Edits {
    pub inserted: usize,
    pub coherent_loads: usize,
    pub edited_loads: usize,
    pub edited_decls: usize,
    pub edited_header: usize,
}

/// Checks that `output` is `input` with lines inserted and lines edited only as the pass may
/// insert and edit them: the inserted lines are removed, and each edited line is mapped back to
/// its original. Panics with the offending line otherwise.
pub fn check_edits(input: &str, output: &str) -> Edits {
    let a: Vec<&str> = input.split_inclusive('\n').collect();
    let b: Vec<&str> = output.split_inclusive('\n').collect();
    let mut slots: HashMap<String, String> = HashMap::new();
    let mut found = Edits::default();
    let (mut i, mut j) = (0, 0);
    while j < b.len() {
        if i < a.len() && a[i] == b[j] {
            i += 1;
            j += 1;
            continue;
        }
        if inserted_line(b[j], &mut slots) {
            found.inserted += 1;
            j += 1;
            continue;
        }
        assert!(i < a.len(), "output line {} is extra: {:?}", j + 1, b[j]);
        let (x, y) = (a[i], b[j]);
        if edited_header(x, y) {
            found.edited_header += 1;
        } else if edited_decl(x, y) {
            found.edited_decls += 1;
        } else if edited_load(x, y, &slots) {
            found.edited_loads += 1;
        } else if coherent(x) == y && x != y {
            // With PDL, non-coherent loads take the coherent path.
            found.coherent_loads += 1;
        } else {
            panic!("input line {} changed:\n  in:  {x:?}\n  out: {y:?}", i + 1);
        }
        i += 1;
        j += 1;
    }
    assert_eq!(i, a.len(), "the output lacks input lines from {}", i + 1);
    found
}

/// `line` with its non-coherent global loads made coherent, as the pass does with PDL.
fn coherent(line: &str) -> String {
    line.split_inclusive(|c: char| c.is_whitespace())
        .map(|w| {
            let t = w.trim_end();
            let rest = &w[t.len()..];
            if let Some(r) = t.strip_prefix("ldu.global.") {
                format!("ld.global.{r}{rest}")
            } else if t.starts_with("ld.global.") {
                let parts: Vec<&str> = t.split('.').filter(|p| *p != "nc").collect();
                format!("{}{rest}", parts.join("."))
            } else {
                w.to_string()
            }
        })
        .collect()
}

/// Whether `line` is one the pass inserts; records which parameter a value register holds.
fn inserted_line(line: &str, slots: &mut HashMap<String, String>) -> bool {
    let t = line.trim();
    if t == "griddepcontrol.launch_dependents;" || t == "griddepcontrol.wait;" {
        return true;
    }
    if !t.contains("%tslot") {
        return false;
    }
    if let Some(rest) = t.strip_prefix("ld.param.u64 \t") {
        let (reg, param) = rest.split_once(", [").expect("slot address load");
        let (pfx, k) = reg.rsplit_once("_p").expect("slot address register");
        let param = param.strip_suffix("];").expect("slot address load end");
        slots.insert(format!("{pfx}_v{k}"), param.to_string());
        return true;
    }
    t.starts_with(".reg .b")
        || t.starts_with("cvta.to.global.u64 \t")
        || t.starts_with("ld.global.")
}

fn edited_header(x: &str, y: &str) -> bool {
    if let Some(v) = x.strip_prefix(".version ") {
        let v = v.trim_end();
        return y == x.replacen(v, "7.8", 1);
    }
    if let Some(t) = x.strip_prefix(".target ") {
        let sm = t
            .split(|c: char| c == ',' || c.is_whitespace())
            .next()
            .unwrap_or("");
        return sm.starts_with("sm_") && y == x.replacen(sm, "sm_90", 1);
    }
    false
}

fn edited_decl(x: &str, y: &str) -> bool {
    if !x.trim_start().starts_with(".param ") {
        return false;
    }
    if let Some(p) = x.find(".align ") {
        let digits = x[p + 7..].bytes().take_while(u8::is_ascii_digit).count();
        if y == format!("{}8{}", &x[..p + 7], &x[p + 7 + digits..]) {
            return true;
        }
    }
    [
        "u8", "s8", "b8", "u16", "s16", "b16", "u32", "s32", "b32", "f32", "u64", "s64", "b64",
        "f64",
    ]
    .iter()
    .any(|t| y == x.replacen(&format!(".param .{t} "), ".param .u64 ", 1))
}

fn edited_load(x: &str, y: &str, slots: &HashMap<String, String>) -> bool {
    let Some(p) = x.find("ld.param.") else {
        return false;
    };
    if !y.starts_with(&x[..p]) {
        return false;
    }
    let (xr, yr) = (&x[p..], &y[p..]);
    let split_op = |s: &str| {
        let op_end = s.find(char::is_whitespace).unwrap_or(s.len());
        let rest = &s[op_end..];
        let ws = rest.len() - rest.trim_start().len();
        (
            s[..op_end].to_string(),
            rest[..ws].to_string(),
            rest[ws..].to_string(),
        )
    };
    let (_, xws, xops) = split_op(xr);
    let (yop, yws, yops) = split_op(yr);
    if xws != yws || !(yop.starts_with("mov.b") || yop.starts_with("cvt.")) {
        return false;
    }
    let Some((dst, rest)) = xops.split_once(", [") else {
        return false;
    };
    let Some((param, tail)) = rest.split_once("];") else {
        return false;
    };
    let Some(yrest) = yops.strip_prefix(&format!("{dst}, ")) else {
        return false;
    };
    let Some((value, ytail)) = yrest.split_once(';') else {
        return false;
    };
    ytail == tail && slots.get(value).map(String::as_str) == Some(param)
}

/// The output as text; the input must be UTF-8 to get there.
pub fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("fixture is UTF-8")
}

/// Options naming every parameter the default selection leaves out as a scalar.
pub fn all_scalars(ptx: &[u8]) -> Options {
    let info = inspect(ptx).unwrap();
    let scalars = info
        .kernels
        .iter()
        .flat_map(|k| {
            k.params
                .iter()
                .filter(|p| p.default == DefaultChoice::Scalar)
                .map(|p| ParamRef::Index {
                    kernel: k.name.clone(),
                    index: p.index,
                })
        })
        .collect();
    Options {
        scalars,
        ..Options::default()
    }
}
