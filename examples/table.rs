//! Captures a step once and replays it on fresh inputs every step through the argument table
//! with programmatic dependent launch: each step binds its own input and output buffers to the
//! table's slots (a host write) and launches, with no copy and no driver call but the launch.
//! Checks every result, and prints the median step time of eager launches, of the static graph
//! replayed with the input copied into the buffer it reads, and of table + PDL.
//!
//! The step: a chain of 32 `add1` kernels over 65536 floats, `out = x + 32`.
//!
//! ```text
//! cargo run --release --example table
//! ```
//! Prints `table: PASS ...` and exits 0 when every step matched; without a GPU or driver it
//! prints the reason on one line and exits 1.

use std::process::ExitCode;
use std::time::Instant;

use graph_rt::table::{PtrSlot, TableKernel};
use graph_rt::timing::median;
use graph_rt::{
    ArgTable, CaptureMode, Context, DeviceBuffer, Function, LaunchConfig, Module, Stream,
    TableOptions,
};
use rand::Rng;

const ELEMS: usize = 1 << 16;
const KERNELS: usize = 32;
const STEPS: usize = 200;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("table: {e}");
            ExitCode::FAILURE
        }
    }
}

fn random(n: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Whether `out` holds `x + KERNELS` (exactly: small integers added to floats in [-1, 1)).
fn right(out: &[f32], x: &[f32]) -> bool {
    out.iter()
        .zip(x)
        .all(|(o, x)| (*o as f64 - (*x as f64 + KERNELS as f64)).abs() < 1e-5)
}

fn run() -> graph_rt::Result<bool> {
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let pdl = ctx.device().compute_capability()?.0 >= 9;
    let load = |src: &str, name: &str| -> graph_rt::Result<Function> {
        Module::from_ptx(&ctx, src)?.function(name)
    };
    let add1 = load(graph_rt::kernels::CHAIN.ptx, "add1")?;
    // The table form of the same PTX, made by the PTX pass at load time: `add1` then takes the
    // addresses of two pointer slots where it took two pointers (with PDL: it loads them before
    // `griddepcontrol.wait`, overlapping the previous kernel), and its launches are checked
    // against that signature.
    let options = graph_rt::ptx::Options {
        pdl,
        ..Default::default()
    };
    let add1_table = TableKernel::load(&ctx, graph_rt::kernels::CHAIN.ptx, "add1", &options)?;
    let plain = LaunchConfig::for_elements(ELEMS, 256);
    let table_cfg = if pdl {
        plain.programmatic_stream_serialization()
    } else {
        plain
    };
    let alloc = || DeviceBuffer::<f32>::alloc(&ctx, ELEMS);
    // Intermediates, shared by every variant; the static graph's fixed input and output.
    let mids: Vec<DeviceBuffer<f32>> = (0..KERNELS - 1)
        .map(|_| alloc())
        .collect::<Result<_, _>>()?;
    let (mut fixed_in, fixed_out) = (alloc()?, alloc()?);

    // The static graph reads fixed_in and writes fixed_out.
    let chain = |x: &DeviceBuffer<f32>, out: &DeviceBuffer<f32>| -> Vec<(u64, u64)> {
        let mut v = vec![x.as_raw()];
        v.extend(mids.iter().map(|m| m.as_raw()));
        v.push(out.as_raw());
        v.windows(2).map(|w| (w[0], w[1])).collect()
    };
    let static_graph = stream.capture(CaptureMode::Global, |s| {
        for (i, o) in chain(&fixed_in, &fixed_out) {
            // SAFETY: add1 over ELEMS floats of distinct ELEMS-float buffers, all alive until
            // the end of `run` (the graph does not keep raw addresses alive).
            unsafe { s.launch(&add1, &plain, (i, o, ELEMS as i32))? };
        }
        Ok(())
    })?;
    let static_exec = static_graph.instantiate()?;

    // The table graph reads slot 0 and writes slot KERNELS; the intermediates are bound once.
    let mut table = ArgTable::new(
        &ctx,
        TableOptions {
            capacity: KERNELS + 1,
            depth: 4,
        },
    )?;
    let slots: Vec<PtrSlot<f32>> = (0..=KERNELS)
        .map(|_| table.ptr_slot())
        .collect::<Result<_, _>>()?;
    for (slot, m) in slots[1..KERNELS].iter().zip(&mids) {
        table.bind(slot, m)?;
    }
    let table_graph = stream.capture(CaptureMode::Global, |s| {
        table.record_refresh(s)?;
        for k in 0..KERNELS {
            // SAFETY: add1's table form over ELEMS floats through slots bound to ELEMS-float
            // buffers.
            unsafe { add1_table.record(s, &table_cfg, (&slots[k], &slots[k + 1], ELEMS as i32))? };
        }
        Ok(())
    })?;
    let table_exec = table_graph.instantiate()?;

    let (mut eager, mut copied, mut tabled, mut pass) = (Vec::new(), Vec::new(), Vec::new(), true);
    for _ in 0..STEPS {
        let x = random(ELEMS);
        let (mut input, out) = (alloc()?, alloc()?);
        input.write_on(&stream, &x)?;

        // Eager: the kernels launched one by one.
        let t0 = Instant::now();
        for (i, o) in chain(&input, &out) {
            // SAFETY: as for the static graph.
            unsafe { stream.launch(&add1, &plain, (i, o, ELEMS as i32))? };
        }
        stream.synchronize()?;
        eager.push(t0.elapsed().as_secs_f64() * 1e6);
        pass &= right(&out.read_on(&stream)?, &x);

        // Static graph: copy the input into the buffer it reads, replay.
        let t0 = Instant::now();
        // SAFETY: both buffers live until the end of the step, past the synchronize below.
        unsafe { fixed_in.copy_from_device_async(&input, &stream)? };
        static_exec.launch(&stream)?;
        stream.synchronize()?;
        copied.push(t0.elapsed().as_secs_f64() * 1e6);
        pass &= right(&fixed_out.read_on(&stream)?, &x);

        // Table + PDL: bind this step's input and output, launch.
        let out2 = alloc()?;
        let t0 = Instant::now();
        table.bind(&slots[0], &input)?;
        table.bind(&slots[KERNELS], &out2)?;
        table.launch(&table_exec, &stream)?;
        stream.synchronize()?;
        tabled.push(t0.elapsed().as_secs_f64() * 1e6);
        pass &= right(&out2.read_on(&stream)?, &x);
    }
    let (e, c, t) = (median(eager), median(copied), median(tabled));
    println!(
        "table: {} {STEPS} steps of {KERNELS} kernels on fresh inputs; median step: eager {e:.1} µs, static replay with the input copied in {c:.1} µs, table{} {t:.1} µs ({:.2}× the static replay, {:.2}× faster than eager) on {}",
        if pass { "PASS" } else { "FAIL" },
        if pdl { " + PDL" } else { " (no PDL below compute capability 9.0)" },
        t / c,
        e / t,
        ctx.device().name()?
    );
    Ok(pass)
}
