//! The layer stack of `examples/layers.rs` (8 layers of cuBLAS GEMM → bias + GELU → GEMM →
//! residual, input, output and weight set rebound every replay) measured over more rounds: the
//! chosen mechanisms (table + PDL for the shipped kernels, the in-graph prelude for cuBLAS)
//! against the plain graph replayed with no rebinding, host per-node updates and re-capture +
//! exec update, in interleaved rounds.
//!
//! ```text
//! cargo bench --bench layers     # needs a GPU and cuBLAS (GRAPH_RT_CUBLAS)
//! ```

#[path = "../examples/layers.rs"]
mod layers;

use std::process::ExitCode;

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; nothing else is read.
    match layers::run(100) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("layers: {e}");
            ExitCode::FAILURE
        }
    }
}
