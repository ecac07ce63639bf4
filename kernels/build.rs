//! Lists, at build time, the PTX files of `ptx/`, the CUDA C sources of `cuda/` and
//! `ptx/MANIFEST`, so that the crate's tests can check that [`ALL`](crate::ALL) names every PTX
//! file and that the PTX was compiled from the sources beside it, without reading the source tree
//! when they run (the GPU suite runs the test binaries far from it). Only the tests use them.
//! The prelude's cubins need nothing here: `src/prelude.rs` embeds them with `include_bytes!`,
//! which rebuilds the crate when they change.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=ptx");
    println!("cargo:rerun-if-changed=cuda");
    println!("cargo:rerun-if-changed=ptx-table");
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    // Each file's contents next to its stem, embedded so that a test compares what `ALL` embeds
    // with the files as they were when this crate was built.
    let mut out = String::new();
    embed(
        &mut out,
        "/// Every `ptx/*.ptx` file at build time: (stem, text).\npub(crate) const PTX_FILES: &[(&str, &str)]",
        &root.join("ptx"),
        "ptx",
        "include_str",
    );
    embed(
        &mut out,
        "/// Every `ptx-table/*.ptx` file (made by the PTX pass) at build time: (stem, text).\npub(crate) const TABLE_FILES: &[(&str, &str)]",
        &root.join("ptx-table"),
        "ptx",
        "include_str",
    );
    embed(
        &mut out,
        "/// Every `cuda/*.cu` file at build time: (stem, bytes).\npub(crate) const CUDA_FILES: &[(&str, &[u8])]",
        &root.join("cuda"),
        "cu",
        "include_bytes",
    );
    embed(
        &mut out,
        "/// Every `cuda/*.cuh` header at build time: (stem, bytes).\npub(crate) const CUDA_HEADERS: &[(&str, &[u8])]",
        &root.join("cuda"),
        "cuh",
        "include_bytes",
    );
    writeln!(
        out,
        "/// `ptx/MANIFEST` at build time.\npub(crate) const MANIFEST: &str = include_str!({:?});",
        root.join("ptx").join("MANIFEST").display().to_string()
    )
    .unwrap();
    let dest =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("embedded.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

/// Appends `{decl} = &[(stem, include!(path)), ...];` for every `dir/*.{ext}`, sorted by name.
fn embed(out: &mut String, decl: &str, dir: &Path, ext: &str, include: &str) {
    let suffix = format!(".{ext}");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(&suffix))
        .collect();
    names.sort();
    writeln!(out, "{decl} = &[").unwrap();
    for n in &names {
        let stem = n.trim_end_matches(&suffix);
        let path = dir.join(n).display().to_string();
        writeln!(out, "    ({stem:?}, {include}!({path:?})),").unwrap();
    }
    out.push_str("];\n");
}
