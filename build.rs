//! Build script of the root package. It needs no CUDA toolkit and no GPU: it only checks that
//! the checked-in PTX of `kernels/` was made from the CUDA C sources beside it, by comparing the
//! sources' SHA-256 with `kernels/ptx/MANIFEST`, and warns when it was not (CI fails on that,
//! through `python3 kernels/compile.py --check`).

use std::path::Path;

use sha2::{Digest, Sha256};

fn main() {
    println!("cargo:rerun-if-changed=kernels/cuda");
    println!("cargo:rerun-if-changed=kernels/ptx/MANIFEST");
    let manifest = match std::fs::read_to_string("kernels/ptx/MANIFEST") {
        Ok(m) => m,
        Err(e) => {
            println!("cargo:warning=kernels/ptx/MANIFEST unreadable ({e}): run python3 kernels/compile.py");
            return;
        }
    };
    for line in manifest.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(source_hash)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = Path::new("kernels/cuda").join(format!("{name}.cu"));
        let actual = std::fs::read(&path).map(|bytes| hex(&Sha256::digest(bytes)));
        if actual.as_deref().ok() != Some(source_hash) {
            println!(
                "cargo:warning={} changed since its PTX was compiled: run python3 kernels/compile.py",
                path.display()
            );
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
