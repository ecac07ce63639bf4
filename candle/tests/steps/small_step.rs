//! A small candle step (affine, SiLU, softmax over the last dimension) through graph-rt's step
//! API on candle's own stream, rebound to fresh candle tensors every call: every output equal,
//! bit for bit, to the same closure run eagerly.

use candle_core::Tensor;
use graph_rt::step::{Buf, Step, StepMode, StepOptions, StepScope, Validated};
use graph_rt_candle::{bind, error, tensor, CandleStream};

const ROWS: usize = 64;
const COLS: usize = 256;

fn forward(x: &Tensor) -> candle_core::Result<Tensor> {
    let h = x.affine(2.0, 1.0)?;
    let h = candle_nn::ops::silu(&h)?;
    candle_nn::ops::softmax_last_dim(&h)
}

/// The closure: `y = forward(x)`, written into the declared `y` by candle's own copy kernel.
fn body<'a>(
    on: &'a CandleStream,
    x: &'a Buf<f32>,
    y: &'a Buf<f32>,
) -> impl FnMut(&StepScope<'_>) -> graph_rt::Result<()> + 'a {
    move |s| {
        // SAFETY: the tensors over x and y, and what shares their storage, live in this run only.
        let (xt, yt) = unsafe {
            (
                tensor(s, on, x, (ROWS, COLS))?,
                tensor(s, on, y, (ROWS, COLS))?,
            )
        };
        let r = forward(&xt).map_err(error)?;
        yt.slice_set(&r, 0, 0).map_err(error)
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_small_candle_step_is_rebound_every_call_and_equals_candle_eager() {
    let on = CandleStream::new(0).unwrap();
    let dev = on.device().clone();
    let ctx = on.stream().context().clone();
    let fresh = || Tensor::rand(-1f32, 1f32, (ROWS, COLS), &dev).unwrap();
    let zeros = || Tensor::zeros((ROWS, COLS), candle_core::DType::F32, &dev).unwrap();
    let declare = || super::xy(&on, ROWS, COLS);
    let (p, gx, gy) = declare();
    let mut graphed =
        Step::new(on.stream(), p, StepOptions::default(), body(&on, &gx, &gy)).unwrap();
    assert!(
        matches!(graphed.mode(), StepMode::Graph { .. }),
        "{:?}",
        graphed.mode()
    );
    let (p, ex, ey) = declare();
    let eager_options = StepOptions {
        eager: true,
        ..StepOptions::default()
    };
    let mut eager = Step::new(on.stream(), p, eager_options, body(&on, &ex, &ey)).unwrap();
    let mut kept = Vec::new();
    for _ in 0..100 {
        let (x, y, z) = (fresh(), zeros(), zeros());
        bind(&mut graphed, &gx, &x).unwrap();
        bind(&mut graphed, &gy, &y).unwrap();
        graphed.run().unwrap();
        bind(&mut eager, &ex, &x).unwrap();
        bind(&mut eager, &ey, &z).unwrap();
        eager.run().unwrap();
        kept.push((y, z));
    }
    assert_eq!(graphed.validate().unwrap(), Validated::Same);
    for (y, z) in kept {
        let (y, z) = (y.to_vec2::<f32>().unwrap(), z.to_vec2::<f32>().unwrap());
        assert_eq!(y, z, "the graph's output is candle's eager output");
    }
    assert!(ctx.take_deferred_errors().is_empty());
}
