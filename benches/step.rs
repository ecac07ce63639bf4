//! The step API's cost over the table it drives: a 200-kernel chain of table-form `add1`
//! (PDL) with every pointer rebound each call, two buffer sets alternating, run through
//! [`Step::run`] and, on the same kind of graph, through [`ArgTable::launch`] directly. Host µs
//! of binding + launching (no synchronize in the timed part) and wall µs per synchronized call,
//! interleaved, medians. And the same step under the overhead profiler with production
//! sampling at its default rate (one call in 64 timed by events), against the same table. Last,
//! what one validation of the step costs ([`Step::validate`]).

use std::time::Instant;

use graph_rt::profile::{Mode, ProfileOptions, Profiled};
use graph_rt::step::{Buf, Step, StepMode, StepOptions, StepParams, StepScope, Validated};
use graph_rt::table::PtrSlot;
use graph_rt::{ArgTable, CaptureMode, DeviceBuffer, LaunchConfig, Module, Stream};

mod common;

const ELEMS: usize = 4096;
const NODES: usize = 200;

fn main() {
    let Some(ctx) = common::start("step", true) else {
        return;
    };
    let stream = Stream::new(&ctx).expect("stream");
    let f = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN_TABLE_PDL.ptx)
        .and_then(|m| m.function("add1"))
        .expect("add1");
    let cfg = LaunchConfig::for_elements(ELEMS, 256).programmatic_stream_serialization();
    let sets: Vec<Vec<DeviceBuffer<f32>>> = (0..2)
        .map(|_| {
            (0..=NODES)
                .map(|_| DeviceBuffer::zeroed(&ctx, ELEMS).expect("alloc"))
                .collect()
        })
        .collect();

    // Through the step API.
    let declare = || {
        let mut params = StepParams::new(&ctx, 256).expect("params");
        let bufs: Vec<Buf<f32>> = (0..=NODES)
            .map(|_| params.buffer(ELEMS).expect("declare"))
            .collect();
        for (p, b) in bufs.iter().zip(&sets[0]) {
            params.bind(p, b).expect("bind");
        }
        (params, bufs)
    };
    let chain = |bufs: &[Buf<f32>], s: &StepScope<'_>| -> graph_rt::Result<()> {
        for k in 0..NODES {
            // SAFETY: add1 over ELEMS floats through slots bound to distinct ELEMS-float buffers.
            unsafe { s.launch(&f, &cfg, (bufs[k].slot(), bufs[k + 1].slot(), ELEMS as i32))? };
        }
        Ok(())
    };
    let (params, bufs) = declare();
    let step =
        Step::new(&stream, params, StepOptions::default(), |s| chain(&bufs, s)).expect("step");
    // The same step under the profiler (re-runnable: decided at once), sampling on.
    let (params, pbufs) = declare();
    let options = ProfileOptions {
        rerunnable: true,
        ..ProfileOptions::default()
    };
    let profiled = Profiled::new(
        "step bench",
        &stream,
        params,
        StepOptions::default(),
        options,
        |s| chain(&pbufs, s),
    )
    .expect("profiled");
    println!("step: profiler: {}", profiled.report());
    assert_eq!(profiled.mode(), Mode::Graph, "{}", profiled.report());
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );

    // The same chain through a table directly.
    let mut table = ArgTable::new(&ctx, graph_rt::TableOptions::default()).expect("table");
    let slots: Vec<PtrSlot<f32>> = (0..=NODES)
        .map(|_| table.ptr_slot().expect("slot"))
        .collect();
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            table.record_refresh(s)?;
            for k in 0..NODES {
                // SAFETY: as above.
                unsafe { s.launch(&f, &cfg, (&slots[k], &slots[k + 1], ELEMS as i32))? };
            }
            Ok(())
        })
        .expect("capture");
    // Instantiated as the step instantiates its graph (uploaded at once): the same exec, launched
    // through the table alone.
    let exec = graph
        .instantiate_with(&graph_rt::InstantiateOptions {
            upload: Some(&stream),
            ..Default::default()
        })
        .expect("instantiate");

    let step = std::cell::RefCell::new(step);
    let table = std::cell::RefCell::new(table);
    let (mut a, mut b, mut c, mut d) = (0usize, 0usize, 0usize, 0usize);
    let step_call = |turn: usize| {
        let mut s = step.borrow_mut();
        for (p, buf) in bufs.iter().zip(&sets[turn % 2]) {
            s.bind(p, buf).expect("bind");
        }
        s.run().expect("run");
    };
    let profiled = std::cell::RefCell::new(profiled);
    let (mut e, mut g) = (0usize, 0usize);
    let profiled_call = |turn: usize| {
        let mut s = profiled.borrow_mut();
        for (p, buf) in pbufs.iter().zip(&sets[turn % 2]) {
            s.bind(p, buf).expect("bind");
        }
        s.run().expect("run");
    };
    let table_call = |turn: usize| {
        let mut t = table.borrow_mut();
        for (slot, buf) in slots.iter().zip(&sets[turn % 2]) {
            t.bind(slot, buf).expect("bind");
        }
        t.launch(&exec, &stream).expect("launch");
    };
    let timed = |call: &dyn Fn(usize), turn: usize, wall: bool| {
        let t = Instant::now();
        call(turn);
        if wall {
            stream.synchronize().expect("sync");
        }
        let us = t.elapsed().as_secs_f64() * 1e6;
        stream.synchronize().expect("sync");
        us
    };
    let variants: Vec<common::Variant> = vec![
        (
            "step: bind 201 + run, host",
            Box::new(|| {
                a += 1;
                timed(&step_call, a, false)
            }),
        ),
        (
            "table: bind 201 + launch, host",
            Box::new(|| {
                b += 1;
                timed(&table_call, b, false)
            }),
        ),
        (
            "step: bind 201 + run, wall",
            Box::new(|| {
                c += 1;
                timed(&step_call, c, true)
            }),
        ),
        (
            "table: bind 201 + launch, wall",
            Box::new(|| {
                d += 1;
                timed(&table_call, d, true)
            }),
        ),
        (
            "profiled: bind 201 + run, host",
            Box::new(|| {
                e += 1;
                timed(&profiled_call, e, false)
            }),
        ),
        (
            "profiled: bind 201 + run, wall",
            Box::new(|| {
                g += 1;
                timed(&profiled_call, g, true)
            }),
        ),
    ];
    // Three runs of 400 interleaved rounds: both sides run the same table launch, so their
    // ratio is near 1 and a single run's median moves it by a few percent; each run's ratio is
    // printed, and their median is the figure.
    let runs = common::interleave_repeated(3, 400, variants);
    let ratio = |m: &[(&str, f64)], a: &str, b: &str| {
        let get = |n: &str| m.iter().find(|(k, _)| *k == n).map_or(f64::NAN, |v| v.1);
        get(a) / get(b)
    };
    for (r, m) in runs.iter().enumerate() {
        let cells: Vec<String> = m.iter().map(|(n, us)| format!("{n} {us:.2} µs")).collect();
        println!("step: run {} of 3: {}", r + 1, cells.join(" · "));
    }
    let median_of = |a: &str, b: &str| {
        let each: Vec<f64> = runs.iter().map(|m| ratio(m, a, b)).collect();
        let shown: Vec<String> = each.iter().map(|x| format!("{x:.3}")).collect();
        (common::median(each), shown.join(" / "))
    };
    let table_host = "table: bind 201 + launch, host";
    let table_wall = "table: bind 201 + launch, wall";
    let (host, host_runs) = median_of("step: bind 201 + run, host", table_host);
    let (wall, wall_runs) = median_of("step: bind 201 + run, wall", table_wall);
    println!(
        "step: {NODES}-kernel step, every pointer rebound (two sets alternating) ÷ the same graph through ArgTable::launch: host {host:.3}×, wall {wall:.3}× (median of 3 runs; host {host_runs}, wall {wall_runs})"
    );
    let (host, host_runs) = median_of("profiled: bind 201 + run, host", table_host);
    let (wall, wall_runs) = median_of("profiled: bind 201 + run, wall", table_wall);
    println!(
        "step: the same step under the profiler, sampling one call in 64 ÷ the same graph through ArgTable::launch: host {host:.3}×, wall {wall:.3}× (median of 3 runs; host {host_runs}, wall {wall_runs})"
    );

    // What one validation of the step costs (its closure captured again and compared with the
    // graph, node by node), host µs, median of 20.
    let mut s = step.borrow_mut();
    let each: Vec<f64> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let v = s.validate().expect("validate");
            assert_eq!(
                v,
                Validated::Same,
                "the step's closure declares everything it reads"
            );
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    println!(
        "step: one validation of the {NODES}-kernel step (Step::validate): {:.1} µs host (median of 20)",
        common::median(each)
    );
}
