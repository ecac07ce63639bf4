//! The profiler over a generated sweep of steps (`graph_rt::profile::sweep`, seeded): for each
//! point — a chain of `kernels` add1 over `elements` floats, after a device copy of `copy_bytes`
//! where it has one — the profiler decides (re-runnable: measured at once), then eager and the
//! graph are measured apart in interleaved rounds (CUDA events around each call, warm-up first,
//! medians and spreads), each mode's cost a call over the expected calls (the graph's one-time
//! cost, the median of three builds, amortized), and the chosen mode is compared with the
//! fastest: the regret. Beside it, what the profiler itself measured when it decided.
//!
//! Then partitioning: a step of four runs of 20 tiny kernels around a segment that synchronizes
//! with the host, split by the profiler's plan (`Segmented`) and by other plans, each timed on
//! the host per synchronized call in interleaved rounds: the plan against the best.
//!
//! ```text
//! cargo bench --bench profile     # needs a GPU
//! ```

use std::process::ExitCode;

use graph_rt::profile::{
    sweep, Mode, Part, PartitionPolicy, Policy, ProfileOptions, Profiled, Segment, Segmented,
    Stats, SweepPoint,
};
use graph_rt::step::{Buf, Step, StepMode, StepOptions, StepParams, StepScope};
use graph_rt::{Context, DeviceBuffer, Event, EventFlags, Function, LaunchConfig, Module, Stream};

/// A point's two declared buffers, x and y.
type Bufs = (Buf<f32>, Buf<f32>);

/// The sweep's seed and size.
const SEED: u64 = 0x6772_6170_682d_7274;
const POINTS: usize = 24;
/// Measured rounds (after two of warm-up) per mode.
const ROUNDS: usize = 15;

mod common;

/// Set in the child process that reads the parent's decisions file.
const CHILD: &str = "GRAPH_RT_PROFILE_CHILD";

fn main() -> ExitCode {
    if let Some(file) = std::env::var_os(CHILD) {
        return match child(std::path::Path::new(&file)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("profile (child): {e}");
                ExitCode::FAILURE
            }
        };
    }
    println!("profile: built from {}", graph_rt_dev::BUILT_FROM);
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("profile: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The point's closure: the copy (if any), then y = x + 1 and `kernels - 1` more in place.
fn body<'a>(
    f: &'a Function,
    point: SweepPoint,
    bufs: &'a Bufs,
    scratch: &'a std::cell::RefCell<(DeviceBuffer<u8>, DeviceBuffer<u8>)>,
) -> impl FnMut(&StepScope<'_>) -> graph_rt::Result<()> + 'a {
    let cfg = LaunchConfig::for_elements(point.elements, 256);
    let n = point.elements as i32;
    move |s| {
        if point.copy_bytes > 0 {
            let mut sc = scratch.borrow_mut();
            let (dst, src) = &mut *sc;
            s.copy(dst, src)?;
        }
        let (x, y) = (s.buffer(&bufs.0)?, s.buffer(&bufs.1)?);
        // SAFETY: add1 over `elements` floats of two distinct buffers that long, then in place
        // (each thread its own element).
        unsafe { s.launch(f, &cfg, (&x, &y, n))? };
        for _ in 1..point.kernels {
            // SAFETY: as above.
            unsafe { s.launch(f, &cfg, (&y, &y, n))? };
        }
        Ok(())
    }
}

fn params(ctx: &Context, point: SweepPoint) -> graph_rt::Result<(StepParams, Bufs)> {
    let mut p = StepParams::new(ctx, 4)?;
    let (x, y) = (
        p.buffer::<f32>(point.elements)?,
        p.buffer::<f32>(point.elements)?,
    );
    p.bind(&x, &DeviceBuffer::zeroed(ctx, point.elements)?)?;
    p.bind(&y, &DeviceBuffer::zeroed(ctx, point.elements)?)?;
    Ok((p, (x, y)))
}

/// Each mode of `step` measured apart: interleaved rounds, each call between two events.
fn measure<F>(step: &mut Step<F>, stream: &Stream) -> graph_rt::Result<(Stats, Stats)>
where
    F: FnMut(&StepScope<'_>) -> graph_rt::Result<()>,
{
    let ctx = stream.context();
    let ev = || Event::new(ctx, EventFlags::Timing);
    let (a, b, c, d) = (ev()?, ev()?, ev()?, ev()?);
    let (mut eager, mut graph) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS + 2 {
        let first_eager = r % 2 == 0;
        for (i, (start, end)) in [(&a, &b), (&c, &d)].into_iter().enumerate() {
            start.record(stream)?;
            if (i == 0) == first_eager {
                step.run_eagerly()?;
            } else {
                step.run()?;
            }
            end.record(stream)?;
        }
        stream.synchronize()?;
        if r >= 2 {
            let (t0, t1) = (
                Event::elapsed_ms(&a, &b)? as f64 * 1e3,
                Event::elapsed_ms(&c, &d)? as f64 * 1e3,
            );
            let (e, g) = if first_eager { (t0, t1) } else { (t1, t0) };
            eager.push(e);
            graph.push(g);
        }
    }
    let bad = || graph_rt::Error::InvalidArgument {
        call: "profile bench",
        reason: "no finite sample".into(),
    };
    Ok((
        Stats::of(&eager).ok_or_else(bad)?,
        Stats::of(&graph).ok_or_else(bad)?,
    ))
}

fn run() -> graph_rt::Result<bool> {
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let f = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN.ptx)?.function("add1")?;
    println!("profile: a sweep of {POINTS} generated steps (seed {SEED:#x}): per call µs (CUDA events, median of {ROUNDS} interleaved rounds), the graph's one-time cost amortized over the expected calls; regret = the chosen mode's cost ÷ the cheaper one's");
    println!(
        "profile: {:>3} {:>7} {:>8} {:>6} {:>8} | {:>16} {:>16} {:>9} | {:>6} {:>16} {:>7} | {:>23}",
        "k",
        "elems",
        "copy KiB",
        "calls",
        "one-time",
        "eager",
        "graph",
        "graph+1x",
        "chose",
        "reason",
        "regret",
        "profiler: eager graph 1x"
    );
    let (mut worst, mut ok, mut strict) = (1.0f64, true, 0usize);
    for point in sweep(SEED, POINTS) {
        let scratch = std::cell::RefCell::new((
            DeviceBuffer::<u8>::zeroed(&ctx, point.copy_bytes.max(1))?,
            DeviceBuffer::<u8>::zeroed(&ctx, point.copy_bytes.max(1))?,
        ));
        let (p, bufs) = params(&ctx, point)?;
        let options = ProfileOptions {
            rerunnable: true,
            policy: Policy {
                expected_calls: point.expected_calls,
                ..Policy::default()
            },
            sample_every: 0,
            ..ProfileOptions::default()
        };
        let profiled = Profiled::new(
            "sweep",
            &stream,
            p,
            StepOptions::default(),
            options,
            body(&f, point, &bufs, &scratch),
        )?;
        let report = profiled.report().clone();
        drop(profiled);
        let Some(decision) = report.decision.clone() else {
            println!("profile: no decision at {point:?}");
            ok = false;
            continue;
        };
        // The modes measured apart, on a step of their own.
        let (p, bufs2) = params(&ctx, point)?;
        let mut step = Step::new(
            &stream,
            p,
            StepOptions {
                recapturable: true,
                ..StepOptions::default()
            },
            body(&f, point, &bufs2, &scratch),
        )?;
        // The one-time cost: the median of three builds (one is a single host-timed sample).
        let mut builds = Vec::new();
        for i in 0..3 {
            if i > 0 {
                step.recapture()?;
            }
            builds.push(match step.mode() {
                StepMode::Graph { build, .. } => build.us,
                _ => f64::INFINITY,
            });
        }
        let one_time = common::median(builds);
        let (e, g) = measure(&mut step, &stream)?;
        let calls = point.expected_calls as f64;
        let graph_cost = g.median_us + one_time / calls;
        let eager_cost = e.median_us;
        let chosen = match decision.mode {
            Mode::Graph => graph_cost,
            Mode::Eager => eager_cost,
        };
        let best = graph_cost.min(eager_cost);
        let regret = chosen / best;
        // Slower than eager beyond the spread: a graph kept that loses.
        let loses =
            decision.mode == Mode::Graph && graph_cost > eager_cost + e.spread_us + g.spread_us;
        // Within the noise of the two medians' difference (the profiler's own rule).
        let noise = 2.0 * (e.median_error_us().powi(2) + g.median_error_us().powi(2)).sqrt();
        let fine = regret <= 1.03 || (chosen - best) <= noise;
        ok &= fine && !loses;
        strict += usize::from(regret <= 1.03);
        worst = worst.max(regret);
        println!(
            "profile: {:>3} {:>7} {:>8} {:>6} {:>8.0} | {:>9.1} ±{:<5.1} {:>9.1} ±{:<5.1} {:>9.1} | {:>6} {:>16} {:>6.3}  | {:>7.1} {:>6.1} {:>5.0}{}{}",
            point.kernels,
            point.elements,
            point.copy_bytes / 1024,
            point.expected_calls,
            one_time,
            e.median_us,
            e.spread_us,
            g.median_us,
            g.spread_us,
            graph_cost,
            decision.mode.name(),
            decision.reason.code(),
            regret,
            report.eager.map_or(f64::NAN, |s| s.median_us),
            report.graph.map_or(f64::NAN, |s| s.median_us),
            report.one_time_us,
            match report.one_time_samples.len() {
                0 | 1 => String::new(),
                n => format!(" ({n} builds)"),
            },
            if fine && !loses { "" } else { "  <- over" },
        );
    }
    println!(
        "profile: chosen ÷ cheaper ≤ 1.03 (or within the noise of the two medians) at every point, never a losing graph kept: {} (≤ 1.03 at {strict} of {POINTS} points; worst regret {worst:.3})",
        if ok { "yes" } else { "no" }
    );
    partitioning(&ctx, &stream, &f)?;
    let second = second_process(&ctx, &stream, &f)?;
    Ok(second)
}

/// The step the two processes share: 40 tiny kernels.
const SHARED: SweepPoint = SweepPoint {
    kernels: 40,
    elements: 4096,
    expected_calls: 1000,
    copy_bytes: 0,
};

/// A profiled step of [`SHARED`] with its decisions in `file`.
fn shared_step<'a>(
    stream: &Stream,
    f: &'a Function,
    bufs: &'a Bufs,
    scratch: &'a std::cell::RefCell<(DeviceBuffer<u8>, DeviceBuffer<u8>)>,
    p: StepParams,
    file: &std::path::Path,
) -> graph_rt::Result<Profiled<impl FnMut(&StepScope<'_>) -> graph_rt::Result<()> + 'a>> {
    let options = ProfileOptions {
        rerunnable: true,
        store: Some(file.to_owned()),
        ..ProfileOptions::default()
    };
    Profiled::new(
        "two processes",
        stream,
        p,
        StepOptions::default(),
        options,
        body(f, SHARED, bufs, scratch),
    )
}

/// Decides a step here, then runs this bench again as a child process on the same decisions
/// file: the child's decision must come from the file, nothing profiled.
fn second_process(ctx: &Context, stream: &Stream, f: &Function) -> graph_rt::Result<bool> {
    let file = std::env::temp_dir().join(format!(
        "graph-rt-profile-bench-{}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&file);
    let scratch = std::cell::RefCell::new((
        DeviceBuffer::<u8>::zeroed(ctx, 1)?,
        DeviceBuffer::<u8>::zeroed(ctx, 1)?,
    ));
    let (p, bufs) = params(ctx, SHARED)?;
    let first = shared_step(stream, f, &bufs, &scratch, p, &file)?;
    println!("profile: first process: {}", first.report());
    drop(first);
    let exe = std::env::current_exe().map_err(|e| graph_rt::Error::InvalidArgument {
        call: "profile bench",
        reason: format!("no path to this bench: {e}"),
    })?;
    let out = std::process::Command::new(exe)
        .env(CHILD, &file)
        .output()
        .map_err(|e| graph_rt::Error::InvalidArgument {
            call: "profile bench",
            reason: format!("cannot run the child process: {e}"),
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        println!("profile: second process: {line}");
    }
    let _ = std::fs::remove_file(&file);
    let from_file = out.status.success() && text.contains("from the file: yes");
    println!(
        "profile: second process: decision from the file, nothing profiled: {}",
        if from_file { "yes" } else { "no" }
    );
    Ok(from_file)
}

/// The child: the same step on the parent's decisions file.
fn child(file: &std::path::Path) -> graph_rt::Result<()> {
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let f = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN.ptx)?.function("add1")?;
    let scratch = std::cell::RefCell::new((
        DeviceBuffer::<u8>::zeroed(&ctx, 1)?,
        DeviceBuffer::<u8>::zeroed(&ctx, 1)?,
    ));
    let (p, bufs) = params(&ctx, SHARED)?;
    let step = shared_step(&stream, &f, &bufs, &scratch, p, file)?;
    let r = step.report();
    println!("{r}");
    println!(
        "from the file: {}, profiled calls {}",
        if r.from_file && r.profiled_calls == 0 {
            "yes"
        } else {
            "no"
        },
        r.profiled_calls
    );
    Ok(())
}

/// Four runs of `per_run` in-place add1 over `buf` around a segment that synchronizes.
fn segments<'a>(f: &'a Function, buf: &'a DeviceBuffer<f32>, per_run: usize) -> Vec<Segment<'a>> {
    let cfg = LaunchConfig::for_elements(buf.len(), 256);
    let n = buf.len() as i32;
    let run = move |s: &StepScope<'_>| -> graph_rt::Result<()> {
        for _ in 0..per_run {
            // SAFETY: add1 in place over the buffer (each thread its own element).
            unsafe { s.launch(f, &cfg, (buf, buf, n))? };
        }
        Ok(())
    };
    vec![
        Segment::new("run 1", run),
        Segment::new("run 2", run),
        Segment::new("sync", move |s| {
            // SAFETY: as above.
            unsafe { s.launch(f, &cfg, (buf, buf, n))? };
            s.synchronize()
        }),
        Segment::new("run 3", run),
        Segment::new("run 4", run),
    ]
}

fn partitioning(ctx: &Context, stream: &Stream, f: &Function) -> graph_rt::Result<()> {
    let buf = DeviceBuffer::<f32>::zeroed(ctx, 4096)?;
    let chosen = Segmented::new(
        stream,
        segments(f, &buf, 20),
        9,
        &PartitionPolicy::default(),
    )?;
    println!(
        "profile: partitioning (k = 5 segments, 81 kernels a call): the plan {}",
        chosen.describe()
    );
    let part = |start, end, captured| Part {
        start,
        end,
        captured,
    };
    let others = [
        ("all eager", vec![part(0, 5, false)]),
        (
            "a graph per run",
            vec![
                part(0, 1, true),
                part(1, 2, true),
                part(2, 3, false),
                part(3, 4, true),
                part(4, 5, true),
            ],
        ),
        (
            "graphs before the sync only",
            vec![part(0, 2, true), part(2, 5, false)],
        ),
        (
            "graphs after the sync only",
            vec![part(0, 3, false), part(3, 5, true)],
        ),
    ];
    let mut plans = vec![("the profiler's plan", chosen)];
    for (name, parts) in others {
        plans.push((
            name,
            Segmented::with_plan(stream, segments(f, &buf, 20), parts)?,
        ));
    }
    let plans: Vec<(&'static str, std::cell::RefCell<Segmented<'_>>)> = plans
        .into_iter()
        .map(|(n, p)| (n, std::cell::RefCell::new(p)))
        .collect();
    let variants: Vec<common::Variant> = plans
        .iter()
        .map(|(name, p)| -> common::Variant {
            (
                name,
                Box::new(move || {
                    let t = std::time::Instant::now();
                    p.borrow_mut().run().expect("run");
                    stream.synchronize().expect("sync");
                    t.elapsed().as_secs_f64() * 1e6
                }),
            )
        })
        .collect();
    let m = common::interleave(100, variants);
    let best = m.iter().map(|v| v.1).fold(f64::INFINITY, f64::min);
    let line: Vec<String> = m.iter().map(|(n, us)| format!("{n} {us:.1}")).collect();
    println!("profile: partitioning, wall µs per synchronized call (median of 100 interleaved rounds): {}", line.join(" · "));
    let plan = m[0].1;
    println!(
        "profile: partitioning: the profiler's plan ÷ the best plan measured = {:.3}× (≤ 1.03: {})",
        plan / best,
        if plan / best <= 1.03 { "yes" } else { "no" }
    );
    Ok(())
}
