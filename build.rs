//! The build script of `graph-rt-dev` (the workspace's examples and benches; not published, so no
//! user's build runs it): stamps them with the commit they were built from, so that a figure a
//! bench prints on the GPU machine — which has neither the source nor git — names its commit;
//! and makes the table forms of the decode example's own kernels with the PTX pass
//! (`graph-rt-ptx`, a build-dependency), as a framework's build script would: no CUDA toolkit,
//! the PTX checked in beside the sources (`examples/decode/ptx/`, made by `kernels/compile.py`);
//! and embeds the cubins of those table forms (`examples/decode/cubin/`, made by
//! `scripts/decode-cubins`) that were made from exactly the PTX it makes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    stamp();
    decode_table_forms();
}

/// The decode example's kernels whose parameters read table slots: the tokens in and the logits
/// and next tokens out (pointers rebound every call; the head's fused product writes both, so
/// that a step of the example's own products has no word for a prelude to patch), the position
/// and the attended length (scalars set every call: one capture serves every position).
const DECODE_POINTERS: &[&str] = &[
    "embed_norm:0",
    "argmax:0",
    "argmax:1",
    "gemv_norm_argmax:5",
    "gemv_norm_argmax:10",
];
const DECODE_SCALARS: &[&str] = &["attention:9", "attention:10"];

/// Writes `$OUT_DIR/decode_table.ptx` and `$OUT_DIR/decode_pdl_table.ptx` (the two modules with
/// those parameters rewritten) and `$OUT_DIR/decode_table.rs` (each rewritten kernel's
/// signature, for `TableKernel::from_signature`: the same in both modules, checked).
fn decode_table_forms() {
    let dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let mut signatures = None;
    let mut made = Vec::new();
    for name in ["decode", "decode_pdl"] {
        let src = PathBuf::from(format!("examples/decode/ptx/{name}.ptx"));
        println!("cargo:rerun-if-changed={}", src.display());
        let ptx = std::fs::read(&src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
        let parse = |list: &[&str]| -> Vec<graph_rt_ptx::ParamRef> {
            list.iter()
                .map(|r| r.parse().unwrap_or_else(|e| panic!("parameter {r}: {e}")))
                .collect()
        };
        let options = graph_rt_ptx::Options {
            kernels: Some(
                ["embed_norm", "attention", "argmax", "gemv_norm_argmax"]
                    .map(String::from)
                    .to_vec(),
            ),
            params: parse(DECODE_POINTERS),
            scalars: parse(DECODE_SCALARS),
            ..Default::default()
        };
        let out = graph_rt_ptx::indirect(&ptx, &options)
            .unwrap_or_else(|e| panic!("the PTX pass refused {}: {e}", src.display()));
        std::fs::write(dir.join(format!("{name}_table.ptx")), &out.ptx)
            .unwrap_or_else(|e| panic!("writing {name}_table.ptx: {e}"));
        made.push((format!("{name}_table"), sha256_hex(out.ptx.as_bytes())));
        match &signatures {
            None => signatures = Some(out.kernels),
            Some(first) => assert_eq!(
                first, &out.kernels,
                "decode.ptx and decode_pdl.ptx have different table signatures"
            ),
        }
    }
    let mut rs = String::from(
        "// Made by build.rs from examples/decode/ptx/decode.ptx with the PTX pass.\n\
         /// Each rewritten kernel's signature, as the PTX pass reported it.\n\
         pub fn signatures() -> Vec<graph_rt::ptx::KernelSignature> {\n    \
         use graph_rt::ptx::*;\n    vec![\n",
    );
    for k in signatures.as_deref().unwrap_or_default() {
        writeln!(
            rs,
            "        KernelSignature {{ name: {:?}.into(), params: vec![",
            k.name
        )
        .unwrap();
        for p in &k.params {
            let slot = match p.slot {
                None => "None".to_string(),
                Some(s) => {
                    let kind = match s.kind {
                        graph_rt_ptx::SlotKind::Pointer => "SlotKind::Pointer".to_string(),
                        graph_rt_ptx::SlotKind::Scalar(t) => {
                            format!("SlotKind::Scalar(ScalarType::{t:?})")
                        }
                    };
                    format!("Some(Slot {{ kind: {kind}, align: {} }})", s.align)
                }
            };
            writeln!(
                rs,
                "            ParamSignature {{ index: {}, name: {:?}.into(), size: {}, slot: {slot} }},",
                p.index, p.name, p.size
            )
            .unwrap();
        }
        writeln!(rs, "        ] }},").unwrap();
    }
    rs.push_str("    ]\n}\n");
    rs.push_str(&decode_cubins(&made));
    std::fs::write(dir.join("decode_table.rs"), rs).expect("writing decode_table.rs");
}

/// The SHA-256 of `bytes`, in lowercase hex (as `sha256sum` and the cubins' MANIFEST write it).
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The shipped cubins of the table forms (`examples/decode/cubin/`, made by
/// `scripts/decode-cubins` with ptxas 12.4), as Rust: `CUBINS`, each embedded only while the
/// MANIFEST's hash of the PTX it was made from is the hash `made` here gives for its module (and
/// the file's own hash matches). A stale or damaged one is left out with a warning: the example
/// then compiles the PTX, as on any other architecture; a stale cubin never runs.
fn decode_cubins(made: &[(String, String)]) -> String {
    let dir = Path::new("examples/decode/cubin");
    let manifest = dir.join("MANIFEST");
    println!("cargo:rerun-if-changed={}", manifest.display());
    let mut rs = String::from(
        "/// A shipped cubin of a table-form module (`examples/decode/cubin/`), for one architecture.\n\
         pub struct Cubin {\n    \
         /// The module: `decode_table` or `decode_pdl_table`.\n    \
         pub module: &'static str,\n    \
         /// The compute capability it was assembled for (it loads on that one only).\n    \
         pub arch: (i32, i32),\n    \
         pub image: &'static [u8],\n\
         }\n\
         /// The cubins made from exactly the PTX above (build.rs checked the MANIFEST's hashes).\n\
         pub const CUBINS: &[Cubin] = &[\n",
    );
    let text = std::fs::read_to_string(&manifest).unwrap_or_default();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [file, arch, ptx_sha, cubin_sha] = f[..] else {
            println!("cargo:warning=examples/decode/cubin/MANIFEST: a line that is not `file arch sha sha`: {line}");
            continue;
        };
        let module = file.split('.').next().unwrap_or_default();
        let cc = arch
            .strip_prefix("sm_")
            .and_then(|n| n.parse::<i32>().ok())
            .map(|n| (n / 10, n % 10));
        let (Some((_, ptx_made)), Some(cc)) = (made.iter().find(|(m, _)| m == module), cc) else {
            println!("cargo:warning=examples/decode/cubin/MANIFEST names {file} ({arch}), no module or architecture build.rs knows");
            continue;
        };
        let path = dir.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        let image = std::fs::read(&path).unwrap_or_default();
        if ptx_made != ptx_sha {
            println!("cargo:warning={} was made from other PTX than build.rs makes now: left out, the decode example compiles the PTX (run scripts/decode-cubins)", path.display());
        } else if sha256_hex(&image) != cubin_sha {
            println!("cargo:warning={} is missing or not the file its MANIFEST names: left out, the decode example compiles the PTX", path.display());
        } else {
            let abs = std::fs::canonicalize(&path).expect("the cubin's path");
            writeln!(
                rs,
                "    Cubin {{ module: {module:?}, arch: ({}, {}), image: include_bytes!({:?}) }},",
                cc.0, cc.1, abs
            )
            .unwrap();
        }
    }
    rs.push_str("];\n");
    rs
}

/// Sets `GRAPH_RT_DEV_COMMIT`: the commit, `+changes` when tracked files differ from it.
fn stamp() {
    // A new commit moves HEAD or the branch it names.
    let git = Path::new(".git");
    println!("cargo:rerun-if-changed=.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{branch}");
        }
    }
    println!("cargo:rerun-if-changed=.git/packed-refs");
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = run(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Uncommitted changes to tracked files: the binaries are not that commit alone.
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let stamp = if dirty {
        format!("{commit}+changes")
    } else {
        commit
    };
    println!("cargo:rustc-env=GRAPH_RT_DEV_COMMIT={stamp}");
}
