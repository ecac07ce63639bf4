//! What candle's ops do inside a step's capture, op by op, and what graph-rt makes of it:
//!
//! - a contiguous `Tensor::copy` of a declared tensor is a copy node, pointed at the tensor
//!   bound at every call;
//! - a view at a host offset that changes between calls (`narrow` at a position the closure
//!   reads on the host) is work the graph cannot replay: validation catches it, and the step
//!   runs eagerly from then on, with every result right;
//! - an op whose dims and strides candle uploads (a broadcast) runs from candle's upload cache,
//!   filled by the step's eager run.

use std::cell::Cell;

use candle_core::{DType, Tensor};
use graph_rt::step::{EagerReason, Step, StepMode, StepOptions, StepParams, Validated, Validation};
use graph_rt::Misuse;
use graph_rt_candle::{bind, buffer_of, error, tensor, CandleStream};

const ROWS: usize = 16;
const COLS: usize = 128;

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_copy_of_a_declared_candle_tensor_follows_the_tensor_bound_every_call() {
    let on = CandleStream::new(0).unwrap();
    let dev = on.device().clone();
    let ctx = on.stream().context().clone();
    let fresh = || Tensor::rand(-1f32, 1f32, (ROWS, COLS), &dev).unwrap();
    let zeros = || Tensor::zeros((ROWS, COLS), DType::F32, &dev).unwrap();
    let bias = Tensor::rand(0f32, 1f32, COLS, &dev).unwrap();
    let (p, x, y) = super::xy(&on, ROWS, COLS);
    let mut step = Step::new(on.stream(), p, StepOptions::default(), |s| {
        let _cache = on.cuda_device()?.enable_cuda_graph_htod_cache();
        // SAFETY: the tensors over x and y, and what shares their storage, live in this run only.
        let (xt, yt) = unsafe {
            (
                tensor(s, &on, &x, (ROWS, COLS))?,
                tensor(s, &on, &y, (ROWS, COLS))?,
            )
        };
        // A copy node reading x (cuMemcpyDtoDAsync), then a broadcast add over the copy.
        let c = xt.copy().map_err(error)?;
        let r = c.broadcast_add(&bias).map_err(error)?;
        yt.slice_set(&r, 0, 0).map_err(error)
    })
    .unwrap();
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
    let mut kept = Vec::new();
    for _ in 0..50 {
        let (xi, yo) = (fresh(), zeros());
        bind(&mut step, &x, &xi).unwrap();
        bind(&mut step, &y, &yo).unwrap();
        step.run().unwrap();
        kept.push((xi, yo));
    }
    assert_eq!(step.validate().unwrap(), Validated::Same);
    for (xi, yo) in kept {
        let want = xi.broadcast_add(&bias).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(yo.to_vec2::<f32>().unwrap(), want);
    }
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_candle_view_at_a_host_offset_that_changes_is_caught_by_validation() {
    let on = CandleStream::new(0).unwrap();
    let dev = on.device().clone();
    let ctx = on.stream().context().clone();
    let table = Tensor::rand(-1f32, 1f32, (ROWS, COLS), &dev).unwrap();
    let out = || Tensor::zeros((1, COLS), DType::F32, &dev).unwrap();
    let mut p = StepParams::new(&ctx, 2).unwrap();
    let y = p.buffer::<f32>(COLS).unwrap();
    p.bind(&y, &buffer_of(on.stream(), &out()).unwrap())
        .unwrap();
    // The row read is a host value the closure reads, not a declared parameter.
    let row = Cell::new(0usize);
    let options = StepOptions {
        validation: Validation::every(4),
        ..StepOptions::default()
    };
    let mut step = Step::new(on.stream(), p, options, |s| {
        let _cache = on.cuda_device()?.enable_cuda_graph_htod_cache();
        // SAFETY: the tensor over y, and what shares its storage, lives in this run only.
        let yt = unsafe { tensor(s, &on, &y, (1, COLS))? };
        let r = (table.narrow(0, row.get(), 1).map_err(error)? * 2.0).map_err(error)?;
        yt.slice_set(&r, 0, 0).map_err(error)
    })
    .unwrap();
    assert!(matches!(step.mode(), StepMode::Graph { .. }));
    let mut caught = None;
    let mut kept = Vec::new();
    for call in 1..=8 {
        row.set(call % ROWS);
        let yo = out();
        bind(&mut step, &y, &yo).unwrap();
        match step.run() {
            Ok(()) => kept.push((call, yo)),
            Err(e) => {
                assert!(
                    matches!(e.misuse_kind(), Some(Misuse::StepDiverged { .. })),
                    "{e}"
                );
                caught.get_or_insert(call);
                // Eager from now on: the same call again gives the right row.
                step.run().unwrap();
                kept.push((call, yo));
            }
        }
    }
    let caught = caught.expect("validation caught the moving view");
    assert!(caught <= 4, "caught at call {caught}");
    assert!(matches!(
        step.mode(),
        StepMode::Eager(EagerReason::Diverged(_))
    ));
    // Calls before the one that caught it replayed the captured row; from it on, each call
    // read its own.
    for (call, yo) in kept.into_iter().filter(|(call, _)| *call >= caught) {
        let r = call % ROWS;
        let want = (table.narrow(0, r, 1).unwrap() * 2.0).unwrap();
        assert_eq!(
            yo.to_vec2::<f32>().unwrap(),
            want.to_vec2::<f32>().unwrap(),
            "row {r}"
        );
    }
}
