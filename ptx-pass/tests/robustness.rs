//! The pass never panics, whatever the bytes: every truncation and many byte flips of every
//! fixture give a result or a typed error.

mod common;

use common::{all_valid, KERNELS, REFUSALS};
use graph_rt_ptx::{indirect, inspect, Options};

/// Runs everything the crate offers on `bytes`; a panic fails the test.
fn run_all(bytes: &[u8]) {
    let _ = inspect(bytes).map(|info| info.to_string());
    let pdl = Options {
        pdl: true,
        ..Options::default()
    };
    for o in [Options::default(), pdl] {
        if let Ok(out) = indirect(bytes, &o) {
            // Whatever was rewritten must be readable again.
            let again = inspect(out.ptx.as_bytes());
            assert!(again.is_ok(), "{again:?}");
            for k in &out.kernels {
                assert!(k.describe().starts_with(&k.name));
            }
        }
    }
}

fn fixtures() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    all_valid().chain(REFUSALS.iter().copied())
}

#[test]
fn every_truncation_of_the_shipped_kernels_and_refusals() {
    for &(_, ptx) in KERNELS.iter().chain(REFUSALS) {
        for n in 0..=ptx.len() {
            run_all(&ptx[..n]);
        }
    }
}

#[test]
fn sampled_truncations_of_compiler_fixtures() {
    for (_, ptx) in all_valid() {
        // Every 53rd length (at most about 400 lengths spread over the file: the large
        // Inductor fixtures), and all of the tail, where the closing braces and DWARF are.
        let tail = ptx.len().saturating_sub(80);
        let every = (ptx.len() / 400).max(53);
        for n in (0..=ptx.len()).filter(|&n| n % every == 0 || n >= tail) {
            run_all(&ptx[..n]);
        }
    }
}

#[test]
fn byte_flips() {
    const BYTES: &[u8] = b"{}()[];:,.%@!+-\"/*\n\r\t 0x\xff\x80";
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (_, ptx) in fixtures() {
        let mut copy = ptx.to_vec();
        for _ in 0..80 {
            let at = (next() % ptx.len() as u64) as usize;
            let old = copy[at];
            copy[at] = BYTES[(next() % BYTES.len() as u64) as usize];
            run_all(&copy);
            copy[at] = old;
        }
    }
}

#[test]
fn empty_and_tiny_inputs() {
    for bytes in [
        &b""[..],
        b"{",
        b"}",
        b".entry",
        b".entry k",
        b".entry k(",
        b".entry k()",
        b".entry k(){",
        b".entry k(){}",
        b".visible .entry k(.param .u64 .ptr .global .align 1 p){ld.param.u64 %rd1, [p];}",
        b".version",
        b".target",
        b".section",
        b".func",
        b"\"",
        b"/*",
        b"@",
    ] {
        run_all(bytes);
    }
}
