//! Lists, at build time, the PTX files of `ptx/`, so that the crate's tests can check that
//! [`ALL`](crate::ALL) names every one of them without reading the source tree when they run
//! (the GPU suite runs the test binaries far from it).

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=ptx");
    let dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo")).join("ptx");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".ptx"))
        .collect();
    names.sort();
    // Each file's text next to its stem, embedded so that a test compares what `ALL` embeds
    // with the files as they were when this crate was built.
    let mut out = String::from("/// Every `ptx/*.ptx` file at build time: (stem, text).\npub(crate) const PTX_FILES: &[(&str, &str)] = &[\n");
    for n in &names {
        let stem = n.trim_end_matches(".ptx");
        let path = dir.join(n);
        writeln!(
            out,
            "    ({stem:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("ptx_files.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}
