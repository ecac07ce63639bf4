//! What every shipped PTX module must be: its target and entry points, the programmatic kernels'
//! ordering, the table forms as the PTX pass makes them, and the PTX as `ptx/MANIFEST` records it.

use super::*;
use std::collections::BTreeSet;

fn has_line(ptx: &str, line: &str) -> bool {
    ptx.lines().any(|l| l.trim_end() == line)
}

#[test]
fn ptx_version_and_target() {
    for k in ALL {
        assert!(
            has_line(k.ptx, ".version 8.4"),
            "{}: not PTX ISA 8.4",
            k.name
        );
        let (major, minor) = k.min_compute_capability;
        let target = format!(".target sm_{major}{minor}");
        assert!(has_line(k.ptx, &target), "{}: not {target}", k.name);
        assert!(
            has_line(k.ptx, ".address_size 64"),
            "{}: not 64-bit",
            k.name
        );
    }
}

#[test]
fn entry_points_declared() {
    for k in ALL {
        assert!(!k.entry_points.is_empty(), "{}: no entry points", k.name);
        for e in k.entry_points {
            let decl = format!(".visible .entry {e}(");
            assert!(k.ptx.contains(&decl), "{}: missing {decl}", k.name);
        }
        let declared = k.ptx.matches(".visible .entry ").count();
        assert_eq!(
            declared,
            k.entry_points.len(),
            "{}: entry_points does not list every .entry",
            k.name
        );
    }
}

/// The kernels made for programmatic dependent launch.
const PDL: &[Kernel] = &[CHAIN_PDL, CHAIN_TABLE_PDL, AXPY_TABLE_PDL, LAYER_TABLE_PDL];

/// The trimmed instruction lines of a PTX module (no comments, labels or blank lines).
fn instructions(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.ends_with(':'))
        .collect()
}

#[test]
fn programmatic_kernels_read_through_the_coherent_path() {
    // A kernel launched before its predecessor finished must not use non-coherent loads.
    for k in PDL {
        assert!(!k.ptx.contains("ld.global.nc"), "{}: ld.global.nc", k.name);
        assert!(
            k.ptx.contains("griddepcontrol.wait;"),
            "{}: no griddepcontrol.wait",
            k.name
        );
        assert!(
            k.ptx.contains("griddepcontrol.launch_dependents;"),
            "{}: no griddepcontrol.launch_dependents",
            k.name
        );
        assert_eq!(k.min_compute_capability, (9, 0), "{}", k.name);
    }
}

#[test]
fn only_programmatic_kernels_use_griddepcontrol() {
    for k in ALL {
        let is_pdl = PDL.iter().any(|p| p.name == k.name);
        assert_eq!(
            is_pdl,
            k.name.ends_with("_pdl"),
            "{}: PDL lists it?",
            k.name
        );
        assert_eq!(
            k.ptx.contains("griddepcontrol"),
            is_pdl,
            "{}: griddepcontrol only in _pdl kernels",
            k.name
        );
    }
}

/// Each `.entry` of a PTX module: (name, text from its declaration to the next one).
fn entries(ptx: &str) -> Vec<(&str, &str)> {
    ptx.split(".visible .entry ")
        .skip(1)
        .map(|e| (e.split('(').next().unwrap_or(e), e))
        .collect()
}

/// In each kernel of the table-form PDL modules, `griddepcontrol.launch_dependents` comes first,
/// then the slot loads (every `ld.global` before the wait, one per slot), then
/// `griddepcontrol.wait`, and no load from global memory follows until the wait.
#[test]
fn table_pdl_kernels_load_slots_between_launch_dependents_and_wait() {
    let slots_per_kernel = [
        (CHAIN_TABLE_PDL, &[("add1", 2)][..]),
        (AXPY_TABLE_PDL, &[("axpy_f32", 4)]),
        (LAYER_TABLE_PDL, &[("bias_gelu", 3), ("residual_add", 3)]),
    ];
    for (k, kernels) in slots_per_kernel {
        let found = entries(k.ptx);
        let names: Vec<&str> = found.iter().map(|(name, _)| *name).collect();
        let expected: Vec<&str> = kernels.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, expected, "{}: entries", k.name);
        for ((name, text), (_, slots)) in found.into_iter().zip(kernels) {
            let what = format!("{} {name}", k.name);
            let ins = instructions(text);
            let pos = |op: &str| {
                let at: Vec<usize> = (0..ins.len()).filter(|&i| ins[i] == op).collect();
                assert_eq!(at.len(), 1, "{what}: {op} {} times", at.len());
                at[0]
            };
            let launch = pos("griddepcontrol.launch_dependents;");
            let wait = pos("griddepcontrol.wait;");
            assert!(launch < wait, "{what}: wait before launch_dependents");
            let is_load = |l: &&str| l.starts_with("ld.") && !l.starts_with("ld.param.");
            assert!(
                !ins[..launch].iter().any(is_load),
                "{what}: a load before launch_dependents"
            );
            let slot_loads: Vec<&str> = ins[launch..wait]
                .iter()
                .copied()
                .filter(|l| is_load(l))
                .collect();
            assert_eq!(
                slot_loads.len(),
                *slots,
                "{what}: slot loads before the wait: {slot_loads:?}"
            );
            assert!(
                slot_loads.iter().all(|l| l.starts_with("ld.global.")),
                "{what}: slot loads not ld.global: {slot_loads:?}"
            );
            assert!(
                ins[wait..].iter().any(is_load),
                "{what}: no data load after the wait"
            );
        }
    }
}

/// `layer.cu` writes its constants with `f` suffixes: one double constant would make the GELU
/// expression double precision, many times slower on most GPUs.
#[test]
fn layer_kernels_compute_in_f32() {
    for k in [LAYER, LAYER_TABLE, LAYER_TABLE_PDL] {
        assert!(!k.ptx.contains(".f64"), "{}: double precision", k.name);
        let names: Vec<&str> = entries(k.ptx).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, k.entry_points, "{}", k.name);
    }
}

#[test]
fn table_refresh_reads_mirrors_coherently_and_fences_the_ack() {
    let ins = instructions(TABLE.ptx);
    assert!(
        !TABLE.ptx.contains("ld.global.nc"),
        "mirror read through ld.global.nc"
    );
    assert!(
        ins.iter().any(|l| l.starts_with("ld.volatile.global.u64")),
        "mirror not read with volatile loads"
    );
    let ack = ins
        .iter()
        .position(|l| l.starts_with("st.volatile.global.u64"))
        .expect("no volatile store of the ack");
    assert!(
        ins[ack..]
            .iter()
            .any(|l| *l == "membar.sys;" || *l == "fence.sc.sys;"),
        "no system fence after the ack"
    );
}

#[test]
fn ptx_has_no_nul() {
    for k in ALL {
        assert!(!k.ptx.contains('\0'), "{}: embedded NUL", k.name);
    }
}

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// Every embedded PTX file: `ptx/` (compiled) and `ptx-table/` (made by the PTX pass).
fn ptx_files() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    PTX_FILES.iter().chain(TABLE_FILES)
}

#[test]
fn all_lists_every_ptx_file() {
    let on_disk: BTreeSet<&str> = ptx_files().map(|(stem, _)| *stem).collect();
    let listed: BTreeSet<&str> = ALL.iter().map(|k| k.name).collect();
    assert_eq!(listed.len(), ALL.len(), "duplicate names in ALL");
    assert_eq!(on_disk, listed);
}

#[test]
fn embedded_ptx_matches_files() {
    for k in ALL {
        let (_, text) = ptx_files()
            .find(|(stem, _)| *stem == k.name)
            .unwrap_or_else(|| panic!("{}: no ptx/{}.ptx", k.name, k.name));
        assert_eq!(*text, k.ptx, "{}: name does not match file", k.name);
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(bytes))
}

/// The bytes MANIFEST hashes for a source: the source, then each `cuda/*.cuh` it includes
/// (`#include "name.cuh"`, in order), as `compile.py` hashes them.
fn hashed_source(source: &[u8]) -> Vec<u8> {
    let mut out = source.to_vec();
    let text = String::from_utf8_lossy(source);
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let Some(name) = rest
            .trim_start()
            .strip_prefix("include")
            .and_then(|r| r.trim_start().strip_prefix('"'))
            .and_then(|r| r.split('"').next())
            .and_then(|n| n.strip_suffix(".cuh"))
        else {
            continue;
        };
        let (_, header) = CUDA_HEADERS
            .iter()
            .find(|(stem, _)| *stem == name)
            .unwrap_or_else(|| panic!("a source includes {name}.cuh, which is not in cuda/"));
        out.extend_from_slice(header);
    }
    out
}

/// What `python3 kernels/compile.py --check` checks, less the compiling: each MANIFEST line
/// (`name sha256(cuda/<name>.cu, then each header it includes) sha256(ptx/<name>.ptx)`)
/// matches the files, and it lists every source.
#[test]
fn manifest_matches_sources_and_ptx() {
    let mut listed = BTreeSet::new();
    for line in MANIFEST
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let &[name, source_hash, ptx_hash] = fields.as_slice() else {
            panic!("malformed MANIFEST line: {line:?}");
        };
        let (_, source) = CUDA_FILES
            .iter()
            .find(|(stem, _)| *stem == name)
            .unwrap_or_else(|| panic!("MANIFEST lists {name}, but there is no cuda/{name}.cu"));
        assert_eq!(
            sha256_hex(&hashed_source(source)),
            source_hash,
            "cuda/{name}.cu or a header it includes changed since its PTX was compiled: run python3 kernels/compile.py"
        );
        let (_, ptx) = PTX_FILES
            .iter()
            .find(|(stem, _)| *stem == name)
            .unwrap_or_else(|| panic!("MANIFEST lists {name}, but there is no ptx/{name}.ptx"));
        assert_eq!(
            sha256_hex(ptx.as_bytes()),
            ptx_hash,
            "ptx/{name}.ptx is not what MANIFEST records: run python3 kernels/compile.py"
        );
        assert!(listed.insert(name), "MANIFEST lists {name} twice");
    }
    let sources: BTreeSet<&str> = CUDA_FILES.iter().map(|(stem, _)| *stem).collect();
    assert_eq!(listed, sources, "MANIFEST does not list every cuda/*.cu");
}

/// The table forms are what the PTX pass makes of the shipped PTX today
/// (`kernels/make-table-forms` remakes them).
#[test]
fn table_forms_are_what_the_pass_makes() {
    use graph_rt_ptx::{indirect, Options};
    let scalars = || vec!["axpy_f32:0".parse().unwrap(), "axpy_f32:3".parse().unwrap()];
    let forms = [
        (CHAIN_TABLE, CHAIN, Options::default()),
        (
            CHAIN_TABLE_PDL,
            CHAIN,
            Options {
                pdl: true,
                ..Options::default()
            },
        ),
        (
            AXPY_TABLE,
            AXPY,
            Options {
                scalars: scalars(),
                ..Options::default()
            },
        ),
        (
            AXPY_TABLE_PDL,
            AXPY,
            Options {
                scalars: scalars(),
                pdl: true,
                ..Options::default()
            },
        ),
        // Pointers only: `m` and `n` stay plain values.
        (LAYER_TABLE, LAYER, Options::default()),
        (
            LAYER_TABLE_PDL,
            LAYER,
            Options {
                pdl: true,
                ..Options::default()
            },
        ),
    ];
    for (form, source, options) in forms {
        let made = indirect(source.ptx.as_bytes(), &options)
            .unwrap_or_else(|e| panic!("{}: {e}", form.name));
        assert!(
            made.ptx == form.ptx,
            "ptx-table/{}.ptx is stale: run kernels/make-table-forms",
            form.name
        );
    }
}
