//! candle's ops in graph-rt steps, on the GPU (one test binary: the suite carries each binary,
//! and candle's kernels make every one large).

mod capture_rules;
mod llama_block;
mod small_step;

use candle_core::{DType, Tensor};
use graph_rt::step::{Buf, StepParams};
use graph_rt_candle::{buffer_of, CandleStream};

/// Parameters `x` and `y` of `rows × cols` floats, bound to a random tensor and a zeroed one.
fn xy(on: &CandleStream, rows: usize, cols: usize) -> (StepParams, Buf<f32>, Buf<f32>) {
    let dev = on.device();
    let mut p = StepParams::new(on.stream().context(), 4).unwrap();
    let (x, y) = (
        p.buffer::<f32>(rows * cols).unwrap(),
        p.buffer::<f32>(rows * cols).unwrap(),
    );
    let fresh = Tensor::rand(-1f32, 1f32, (rows, cols), dev).unwrap();
    let zeros = Tensor::zeros((rows, cols), DType::F32, dev).unwrap();
    p.bind(&x, &buffer_of(on.stream(), &fresh).unwrap())
        .unwrap();
    p.bind(&y, &buffer_of(on.stream(), &zeros).unwrap())
        .unwrap();
    (p, x, y)
}
