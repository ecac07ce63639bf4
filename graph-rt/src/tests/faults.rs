//! Faults injected into seven driver calls (built with `--cfg graph_rt_fault`): instantiate,
//! end-capture, event record, stream-ordered allocation, graph launch, graph upload and exec
//! update, each failing at its first call, inside a capture, in a step's second capture and
//! during a replay. Each failure comes back as a typed error naming the call (or, for an exec
//! update, as the update's documented fallback), and afterwards the stream, the context, the
//! step and every object still work: the same work runs again, right, and nothing is left
//! parked or deferred. Leaks are memcheck's to find (`run.sh sanitize`).

use std::cell::Cell;

use graph_rt_sys::CUresult;

use super::chain::{add1, N};
use super::{capturing_ctx, random_f32};
use crate::fault::{fail, Fault};
use crate::step::{Buf, Step, StepMode, StepOptions, StepParams, Validation};
use crate::{
    CaptureMode, Context, DeviceBuffer, Error, Event, EventFlags, ExecUpdate, Function,
    InstantiateOptions, LaunchConfig, Stream,
};

/// The seven calls, by what they do and the entry point graph-rt makes it with.
const CALLS: [(&str, &str); 7] = [
    ("instantiate", "cuGraphInstantiateWithParams"),
    ("end-capture", "cuStreamEndCapture"),
    ("event record", "cuEventRecord"),
    ("stream-ordered allocation", "cuMemAllocAsync"),
    ("graph launch", "cuGraphLaunch"),
    ("graph upload", "cuGraphUpload"),
    ("exec update", "cuGraphExecUpdate"),
];

/// Where the fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// The call's first call, nothing captured yet.
    First,
    /// Made inside the closure of a capture of another stream.
    InCapture,
    /// Made inside the closure of a step's second capture (discovery's).
    SecondCapture,
    /// While the step's replay is in flight (for a graph launch: the step's own launch).
    Replay,
}

const INJECTED: CUresult = CUresult::CUDA_ERROR_UNKNOWN;

/// Everything one cell uses: a context, two streams, `add1`, buffers.
struct Rig {
    ctx: super::TestContext,
    main: Stream,
    other: Stream,
    f: Function,
    x: DeviceBuffer<f32>,
    host: Vec<f32>,
}

fn rig() -> Rig {
    let ctx = capturing_ctx();
    let (main, other) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let host = random_f32(N);
    Rig {
        f: add1(&ctx),
        x: DeviceBuffer::from_host(&ctx, &host).unwrap(),
        host,
        main,
        other,
        ctx,
    }
}

/// The seven calls, once each, on `stream` (which is not capturing), without waiting for it:
/// a stream-ordered buffer, an event recorded, a capture of `add1` (x → t) ended, instantiated
/// with an upload, uploaded, updated from a second capture, and launched. Returns the buffer the
/// launch writes.
fn seven(
    ctx: &Context,
    stream: &Stream,
    f: &Function,
    x: &DeviceBuffer<f32>,
) -> crate::Result<DeviceBuffer<f32>> {
    let t = DeviceBuffer::<f32>::alloc_async(stream, N)?;
    let event = Event::new(ctx, EventFlags::DisableTiming)?;
    event.record(stream)?;
    let cfg = LaunchConfig::for_elements(N, 256);
    let capture = || {
        stream.capture(CaptureMode::Relaxed, |s| {
            // SAFETY: add1 over N floats of two distinct N-float buffers the test keeps alive
            // until the stream is idle.
            unsafe { s.launch(f, &cfg, (x, &t, N as i32)) }.map(drop)
        })
    };
    let graph = capture()?;
    let mut exec = graph.instantiate_with(&InstantiateOptions {
        upload: Some(stream),
        ..InstantiateOptions::default()
    })?;
    exec.upload(stream)?;
    match exec.update(&capture()?)? {
        ExecUpdate::Updated => {}
        // A refused update instantiates the graph anew: the documented way out.
        ExecUpdate::Reinstantiated(failure) => tracing::info!(?failure, "update fell back"),
    }
    exec.launch(stream)?;
    Ok(t)
}

/// Whether `e` is the injected failure of `call` (a capture's error names the call too).
fn names(e: &Error, call: &str) -> bool {
    match e {
        Error::Driver { call: c, code, .. } | Error::Capture { call: c, code, .. } => {
            *c == call && *code == INJECTED
        }
        _ => false,
    }
}

/// Checks that `t` holds `x + 1`.
fn check(t: &DeviceBuffer<f32>, host: &[f32], what: &str) {
    let got = t.to_vec().unwrap();
    assert!(
        got.iter().zip(host).all(|(g, h)| *g == h + 1.0),
        "{what}: wrong result"
    );
}

/// A step on `main` (relaxed captures, errors not turned into eager runs): y = x + 1, and in its
/// second capture, `during_second`. Returns it with its parameter `y`.
#[allow(clippy::type_complexity)]
fn step<'a>(
    r: &'a Rig,
    y: &DeviceBuffer<f32>,
    during_second: impl FnMut() -> crate::Result<()> + 'a,
) -> crate::Result<(
    Step<impl FnMut(&crate::step::StepScope<'_>) -> crate::Result<()> + 'a>,
    Buf<f32>,
)> {
    let mut p = StepParams::new(&r.ctx, 4)?;
    let (xp, yp) = (p.buffer::<f32>(N)?, p.buffer::<f32>(N)?);
    p.bind(&xp, &r.x)?;
    p.bind(&yp, y)?;
    let options = StepOptions {
        fail_on_capture_error: true,
        capture_mode: CaptureMode::Relaxed,
        validation: Validation::off(),
        ..StepOptions::default()
    };
    let captures = Cell::new(0);
    let mut during_second = during_second;
    let (f, cfg) = (&r.f, LaunchConfig::for_elements(N, 256));
    let out = yp.clone();
    let step = Step::new(&r.main, p, options, move |s| {
        if s.is_capturing() {
            captures.set(captures.get() + 1);
            if captures.get() == 2 {
                during_second()?;
            }
        }
        let (xb, yb) = (s.buffer(&xp)?, s.buffer(&yp)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(f, &cfg, (&xb, &yb, N as i32)) }
    })?;
    Ok((step, out))
}

/// One cell: `call` fails at `at`; returns whether the fault fired.
fn cell(r: &Rig, call: &'static str, at: At) -> bool {
    let what = format!("{call} at {at:?}");
    let armed: Cell<Option<Fault>> = Cell::new(None);
    let arm = || armed.set(Some(fail(call, 1, INJECTED)));
    let outcome: crate::Result<()> = match at {
        At::First => {
            arm();
            seven(&r.ctx, &r.main, &r.f, &r.x).map(drop)
        }
        At::InCapture => {
            let y = DeviceBuffer::<f32>::zeroed(&r.ctx, N).unwrap();
            let mut made = None;
            let captured = r.main.capture(CaptureMode::Relaxed, |s| {
                arm();
                made = Some(seven(&r.ctx, &r.other, &r.f, &r.x)?);
                let cfg = LaunchConfig::for_elements(N, 256);
                // SAFETY: add1 over N floats of two distinct N-float buffers.
                unsafe { s.launch(&r.f, &cfg, (&r.x, &y, N as i32)) }.map(drop)
            });
            r.other.synchronize().unwrap();
            captured.map(drop)
        }
        At::SecondCapture => {
            let y = DeviceBuffer::<f32>::zeroed(&r.ctx, N).unwrap();
            let made = std::cell::RefCell::new(Vec::new());
            let built = step(r, &y, || {
                arm();
                made.borrow_mut().push(seven(&r.ctx, &r.other, &r.f, &r.x)?);
                Ok(())
            });
            r.other.synchronize().unwrap();
            built.map(drop)
        }
        At::Replay => {
            let y = DeviceBuffer::<f32>::zeroed(&r.ctx, N).unwrap();
            let (mut s, yp) = step(r, &y, || Ok(())).unwrap();
            assert!(
                matches!(s.mode(), StepMode::Graph { .. }),
                "{what}: {:?}",
                s.mode()
            );
            let out = DeviceBuffer::<f32>::zeroed(&r.ctx, N).unwrap();
            // The step's own launch is the graph launch that fails; the other calls are made
            // while its replay is in flight.
            let mut ran = || {
                s.bind(&yp, &out)?;
                if call == "cuGraphLaunch" {
                    arm();
                }
                s.run()?;
                if call != "cuGraphLaunch" {
                    arm();
                }
                let t = seven(&r.ctx, &r.other, &r.f, &r.x)?;
                r.other.synchronize()?;
                check(&t, &r.host, &what);
                Ok(())
            };
            let ran = ran();
            r.main.synchronize().unwrap();
            r.other.synchronize().unwrap();
            // The step keeps working: the next call is right.
            let again = DeviceBuffer::<f32>::zeroed(&r.ctx, N).unwrap();
            s.bind(&yp, &again).unwrap();
            s.run()
                .unwrap_or_else(|e| panic!("{what}: the step's next call: {e}"));
            r.main.synchronize().unwrap();
            check(&again, &r.host, &format!("{what}: the step's next call"));
            if ran.is_ok() {
                check(&out, &r.host, &format!("{what}: the replay"));
            }
            ran
        }
    };
    let fired = armed.take().is_some_and(|f| f.fired());
    match (&outcome, fired) {
        (Err(e), true) => assert!(
            names(e, call),
            "{what}: the error does not name the call: {e}"
        ),
        (Err(e), false) => panic!("{what}: failed with no fault injected: {e}"),
        // Absorbed by design: a refused exec update instantiates anew.
        (Ok(()), true) => assert_eq!(call, "cuGraphExecUpdate", "{what}: the failure was lost"),
        (Ok(()), false) => {}
    }
    // Everything works again: the seven calls, a step made and run, nothing left behind.
    let t =
        seven(&r.ctx, &r.main, &r.f, &r.x).unwrap_or_else(|e| panic!("{what}: afterwards: {e}"));
    r.main.synchronize().unwrap();
    check(&t, &r.host, &format!("{what}: afterwards"));
    let y = DeviceBuffer::<f32>::zeroed(&r.ctx, N).unwrap();
    let (mut s, _) =
        step(r, &y, || Ok(())).unwrap_or_else(|e| panic!("{what}: a step afterwards: {e}"));
    s.run().unwrap();
    r.main.synchronize().unwrap();
    check(&y, &r.host, &format!("{what}: a step afterwards"));
    drop(s);
    r.ctx.synchronize().unwrap();
    let deferred = r.ctx.take_deferred_errors();
    assert!(deferred.is_empty(), "{what}: {deferred:?}");
    fired
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn seven_driver_calls_failing_at_four_points_are_typed_errors_and_leave_everything_usable() {
    let r = rig();
    let mut table = Vec::new();
    for (name, call) in CALLS {
        for at in [At::First, At::InCapture, At::SecondCapture, At::Replay] {
            let fired = cell(&r, call, at);
            table.push(format!(
                "{name} ({call}) at {at:?}: {}",
                if fired {
                    "failed, recovered"
                } else {
                    "not called there"
                }
            ));
        }
    }
    println!("fault matrix:\n{}", table.join("\n"));
    // Where a call is made at all, its failure was injected there (each call fires at First).
    assert!(
        table.iter().filter(|l| l.contains("First: failed")).count() == CALLS.len(),
        "{table:#?}"
    );
}
