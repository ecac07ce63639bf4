//! The layer stack (8 layers of cuBLAS GEMM → bias + GELU → GEMM → residual, input, output and
//! weight set rebound every replay): the rebinding mechanisms one by one against the plain
//! graph replayed with no rebinding (`layers/mechanisms.rs`: table + PDL for the shipped
//! kernels with the prelude for cuBLAS, the prelude everywhere, host per-node updates,
//! re-capture + exec update), then the same stack through the step API (`examples/layers.rs`),
//! each in interleaved rounds.
//!
//! ```text
//! cargo bench --bench layers     # needs a GPU and cuBLAS (GRAPH_RT_CUBLAS)
//! ```

#[path = "../examples/layers.rs"]
mod layers;
#[path = "layers/mechanisms.rs"]
mod mechanisms;

use std::process::ExitCode;

fn main() -> ExitCode {
    println!("layers: built from {}", graph_rt_dev::BUILT_FROM);
    // `cargo bench` passes `--bench`; nothing else is read.
    let ran = mechanisms::run(100).and_then(|a| Ok(a & layers::run(100)?));
    match ran {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("layers: {e}");
            ExitCode::FAILURE
        }
    }
}
