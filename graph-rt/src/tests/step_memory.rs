//! Steps whose closures allocate their intermediates as a framework does: through
//! `StepScope::alloc`, and through cudarc's stream-ordered allocations on the capturing
//! stream. Each becomes the graph's allocation and free nodes; discovery and validation see
//! their addresses as graph-internal.

use super::chain::{add1, buffers, fresh_input, N};
use super::{assert_close, capturing_ctx, sized};
use crate::step::{Buf, Step, StepMode, StepOptions, StepParams, StepScope, Validated};
use crate::{Context, LaunchConfig, Stream};

/// Temporaries each closure allocates.
const TEMPORARIES: usize = 20;

/// Floats of temporary `i`: `N` (16 KiB) to `N << 8` (4 MiB), sizes repeating so that the
/// graph's memory can be reused between temporaries freed early and those made later.
fn temporary_len(i: usize) -> usize {
    N << (i % 9)
}

/// A step and the parameters it was declared with.
type Made<F> = (Step<F>, Buf<f32>, Buf<f32>);

/// Checks `graphed`, a step that computes `y = x + TEMPORARIES + 1`, against `eager`, the same
/// closure run eagerly: a graph whose only patched words are the declared buffers', rebound to
/// fresh inputs and outputs each call, every output equal to the eager step's for the same
/// input; validation passes; no error deferred.
fn rebound_like_eager<F, G>(graphed: Made<F>, eager: Made<G>, stream: &Stream)
where
    F: FnMut(&StepScope<'_>) -> crate::Result<()>,
    G: FnMut(&StepScope<'_>) -> crate::Result<()>,
{
    let (mut step, x, y) = graphed;
    let (mut eager, ex, ey) = eager;
    match step.mode() {
        StepMode::Graph {
            patched_words,
            prelude,
            ..
        } => {
            assert_eq!(*patched_words, 2, "only the declared buffers' words");
            println!("prelude: {prelude:?}");
        }
        mode => panic!("the step runs as {mode:?}"),
    }
    assert!(matches!(eager.mode(), StepMode::Eager(_)));
    let ctx = stream.context().clone();
    let mut kept = Vec::new();
    for _ in 0..sized(50, 10, 4) {
        let mut b = buffers(&ctx, 3);
        let input = fresh_input(&mut b[0]);
        step.bind(&x, &b[0]).unwrap();
        step.bind(&y, &b[1]).unwrap();
        step.run().unwrap();
        eager.bind(&ex, &b[0]).unwrap();
        eager.bind(&ey, &b[2]).unwrap();
        eager.run().unwrap();
        let eagerly = b.swap_remove(2);
        let graphed = b.swap_remove(1);
        kept.push((input, graphed, eagerly));
    }
    assert_eq!(step.validate().unwrap(), Validated::Same);
    stream.synchronize().unwrap();
    let steps = (TEMPORARIES + 1) as f64;
    for (input, graphed, eagerly) in kept {
        let (g, e) = (graphed.to_vec().unwrap(), eagerly.to_vec().unwrap());
        assert_eq!(g, e, "the graph's output is the eager run's");
        let want: Vec<f64> = input.iter().map(|&v| v as f64 + steps).collect();
        assert_close(&g, &want, 1e-5);
    }
    drop((step, eager));
    assert!(ctx.take_deferred_errors().is_empty());
}

/// Parameters `x` and `y` of `N` floats, bound to fresh buffers (kept alive by the step).
fn xy(ctx: &Context) -> (StepParams, Buf<f32>, Buf<f32>) {
    let first = buffers(ctx, 2);
    let mut p = StepParams::new(ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    p.bind(&x, &first[0]).unwrap();
    p.bind(&y, &first[1]).unwrap();
    (p, x, y)
}

fn eagerly() -> StepOptions {
    StepOptions {
        eager: true,
        ..StepOptions::default()
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_closure_allocates_through_the_scope_is_rebound_like_eager() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let make = |options: StepOptions| {
        let (p, x, y) = xy(&ctx);
        let (bx, by, f) = (x.clone(), y.clone(), f.clone());
        // x → t0 → … → t19 → y, each temporary dropped once the next kernel has been enqueued
        // (its free node after that kernel), so later ones may reuse its memory.
        let step = Step::new(&stream, p, options, move |s| {
            let (xb, yb) = (s.buffer(&bx)?, s.buffer(&by)?);
            let mut prev = s.alloc::<f32>(temporary_len(0))?;
            // SAFETY: add1 over N floats of distinct buffers of at least N floats each.
            unsafe { s.launch(&f, &cfg, (&xb, &*prev, N as i32))? };
            for i in 1..TEMPORARIES {
                let next = s.alloc::<f32>(temporary_len(i))?;
                // SAFETY: as above.
                unsafe { s.launch(&f, &cfg, (&*prev, &*next, N as i32))? };
                prev = next;
            }
            // SAFETY: as above.
            unsafe { s.launch(&f, &cfg, (&*prev, &yb, N as i32))? };
            Ok(())
        })
        .unwrap();
        (step, x, y)
    };
    let graphed = make(StepOptions::default());
    let eager = make(eagerly());
    rebound_like_eager(graphed, eager, &stream);
}

#[cfg(feature = "cudarc")]
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_closure_allocates_through_cudarc_is_rebound_like_eager() {
    use cudarc::driver::{CudaContext, PushKernelArg};

    let _capturing = super::exclusive();
    let cctx = CudaContext::new(0).unwrap();
    // One stream: cudarc's events are recorded and waited for on it, inside the capture.
    let s1 = cctx.new_stream().unwrap();
    let stream = Stream::from_cudarc(&s1).unwrap();
    let ctx = stream.context().clone();
    let cu_f = super::cudarc::add1_of(&cctx);
    let cu_cfg = super::cudarc::cudarc_config();
    let n = N as i32;
    let make = |options: StepOptions| {
        let (p, x, y) = xy(&ctx);
        let (bx, by) = (x.clone(), y.clone());
        let (s1, cu_f) = (s1.clone(), cu_f.clone());
        // As the scope's test, with cudarc's allocations on its stream (`cuMemAllocAsync`,
        // freed by `cuMemFreeAsync` when a slice drops) and launches through its builder.
        let step = Step::new(&stream, p, options, move |s| {
            let (xp, yp) = (s.buffer(&bx)?.as_raw(), s.buffer(&by)?.as_raw());
            let mut prev = s1.alloc_zeros::<f32>(temporary_len(0))?;
            // SAFETY: add1 over N floats of distinct buffers of at least N floats each.
            unsafe {
                s1.launch_builder(&cu_f)
                    .arg(&xp)
                    .arg(&mut prev)
                    .arg(&n)
                    .launch(cu_cfg)?
            };
            for i in 1..TEMPORARIES {
                // SAFETY: written by add1 below before anything reads it.
                let mut next = unsafe { s1.alloc::<f32>(temporary_len(i)) }?;
                // SAFETY: as above.
                unsafe {
                    s1.launch_builder(&cu_f)
                        .arg(&prev)
                        .arg(&mut next)
                        .arg(&n)
                        .launch(cu_cfg)?
                };
                prev = next;
            }
            // SAFETY: as above.
            unsafe {
                s1.launch_builder(&cu_f)
                    .arg(&prev)
                    .arg(&yp)
                    .arg(&n)
                    .launch(cu_cfg)?
            };
            Ok(())
        })
        .unwrap();
        (step, x, y)
    };
    let graphed = make(StepOptions::default());
    let eager = make(eagerly());
    rebound_like_eager(graphed, eager, &stream);
}

/// `add1` from `x` into the temporary `t`, then from `t` into `y` (each at least `N` floats).
fn through(
    s: &StepScope<'_>,
    f: &crate::Function,
    x: &crate::DeviceBuffer<f32>,
    t: &crate::DeviceBuffer<f32>,
    y: &crate::DeviceBuffer<f32>,
) -> crate::Result<()> {
    let cfg = LaunchConfig::for_elements(N, 256);
    // SAFETY: add1 over N floats of distinct buffers of at least N floats each.
    unsafe { s.launch(f, &cfg, (x, t, N as i32))? };
    // SAFETY: as above.
    unsafe { s.launch(f, &cfg, (t, y, N as i32)) }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_dropped_step_returns_its_graph_memory_to_the_driver_without_a_synchronize() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    // 256 MiB of temporaries: far above the graph memory any other test leaves reserved.
    let big = sized(64 << 20, 8 << 20, 4 << 20);
    let (p, x, y) = xy(&ctx);
    let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        let t = s.alloc::<f32>(big)?;
        through(s, &f, &xb, &t, &yb)
    })
    .unwrap();
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
    step.run().unwrap();
    stream.synchronize().unwrap();
    let held = ctx.graph_memory().unwrap();
    assert!(held.reserved >= (big * 4) as u64, "{held:?}");
    drop(step);
    // No synchronize: the release thread trims once the last launch has finished.
    let dropped = std::time::Instant::now();
    let trimmed = loop {
        let now = ctx.graph_memory().unwrap();
        if now.reserved + (big * 4) as u64 <= held.reserved + (2 << 20) {
            break dropped.elapsed();
        }
        assert!(
            dropped.elapsed() < std::time::Duration::from_secs(5),
            "graph memory not returned: {now:?} (held {held:?})"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    println!("graph memory returned {trimmed:?} after the drop");
    if !super::sanitized() {
        assert!(
            trimmed < std::time::Duration::from_millis(100),
            "{trimmed:?}"
        );
    }
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_temporary_of_a_capture_cannot_be_bound_to_a_table() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut table = crate::ArgTable::new(&ctx, crate::TableOptions::default()).unwrap();
    let slot = table.ptr_slot::<f32>().unwrap();
    let mut refused = Vec::new();
    let (p, x, y) = xy(&ctx);
    let step = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        let t = s.alloc::<f32>(N)?;
        if s.is_capturing() {
            refused.push(table.bind(&slot, &t).map_err(|e| e.misuse_kind().cloned()));
            let view = t.slice(..)?;
            refused.push(
                table
                    .bind_view(&slot, &view)
                    .map_err(|e| e.misuse_kind().cloned()),
            );
        }
        through(s, &f, &xb, &t, &yb)
    })
    .unwrap();
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
    assert!(!refused.is_empty());
    for r in refused {
        assert_eq!(r, Err(Some(crate::Misuse::GraphMemory)));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_steps_memory_is_reported_by_part_and_estimated_from_its_eager_run() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let (p, x, y) = xy(&ctx);
    // Three temporaries alive together: 16 + 32 + 16 MiB.
    let mib = |m: usize| (m << 20) / 4;
    let step = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        let (a, b, c) = (
            s.alloc::<f32>(mib(16))?,
            s.alloc::<f32>(mib(32))?,
            s.alloc::<f32>(mib(16))?,
        );
        through(s, &f, &xb, &a, &b)?;
        through(s, &f, &b, &c, &yb)
    })
    .unwrap();
    let StepMode::Graph { build, .. } = step.mode() else {
        panic!("{:?}", step.mode());
    };
    let m = build.memory;
    println!("{m:?}");
    assert_eq!(m.graph_allocations, 64 << 20);
    // The eager run's high-water mark: the same three buffers (the pool may round them up;
    // other tests' stream-ordered allocations meanwhile would count too).
    let estimate = m.estimate.expect("an estimate") as f64;
    assert!(estimate >= 0.9 * (64 << 20) as f64, "{estimate}");
    // The prelude lists the few words it rewrites (x's and y's, not the temporaries'); the
    // table's words are on the device.
    assert!(m.prelude < 4096, "{}", m.prelude);
    assert!(m.table > 0);
    assert_eq!(m.held_by_graph(), m.graph_reserved + m.exec + m.prelude);
}
