//! candle's ops in graph-rt steps, on the GPU (one test binary: the suite carries each binary,
//! and candle's kernels make every one large).

mod capture_rules;
mod llama_block;
mod small_step;
