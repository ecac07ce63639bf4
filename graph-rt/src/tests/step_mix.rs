//! A step's choice of mix by the cost model.

use super::capturing_ctx;
use super::chain::{add1, buffers, N};
use super::step::rebound_mixed_step;
use crate::choose::fixtures::host_updates_cheapest;
use crate::choose::Mix;
use crate::foreign::PreludeMode;
use crate::step::{Step, StepMode, StepOptions, StepParams};
use crate::{LaunchConfig, Stream};

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_model_predicts_host_updates_rewrites_from_the_host_and_stays_right() {
    let options = StepOptions {
        cost_model: Some(host_updates_cheapest()),
        ..StepOptions::default()
    };
    let host = PreludeMode::Host {
        reason: String::new(),
    };
    // The plain + table form + cuBLAS step, fresh buffers every call, every result checked.
    rebound_mixed_step(options, Some(host));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_reports_the_models_prediction_for_its_kernels() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let bufs = buffers(&ctx, 2);
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    p.bind(&x, &bufs[0]).unwrap();
    p.bind(&y, &bufs[1]).unwrap();
    let cfg = LaunchConfig::for_elements(N, 256);
    let options = StepOptions {
        cost_model: Some(host_updates_cheapest()),
        ..StepOptions::default()
    };
    let step = Step::new(&stream, p, options, |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32)) }
    })
    .unwrap();
    let StepMode::Graph { mix: Some(mix), .. } = step.mode() else {
        panic!("{:?}", step.mode());
    };
    assert_eq!(
        mix.written,
        Mix::PreludeEverywhere,
        "a plain kernel on s.buffer"
    );
    assert_eq!(mix.applied, Mix::HostUpdates);
    assert_eq!(mix.predicted.len(), Mix::ALL.len());
}
