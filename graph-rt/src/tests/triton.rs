//! Triton fixtures (triton-fixtures/, made on an H200 by make.py with Triton 3.6's own launcher):
//! each loaded from its cache files and launched by graph-rt, original and in table forms (plain
//! and PDL), gives the bytes Triton's launch gave; in captured graphs replayed 100 times with
//! every slot rebound to fresh buffers and no synchronization between replays, every output is
//! right; specialization breaks are typed errors.

use serde_json::Value;

use super::capturing_ctx;
use crate::table::PtrSlot;
use crate::triton::{TritonArg, TritonFiles, TritonForm, TritonKernel};
use crate::{
    ArgTable, CaptureMode, Context, DeviceBuffer, Event, EventFlags, Misuse, Stream, TableOptions,
};

macro_rules! triton_fixtures_dir {
    () => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../triton-fixtures/")
    };
}
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../triton-fixtures/embed.rs"
));

fn forms() -> [(&'static str, TritonForm); 3] {
    let pdl = graph_rt_ptx::Options {
        pdl: true,
        ..Default::default()
    };
    [
        ("original", TritonForm::Original),
        ("table", TritonForm::Table(Default::default())),
        ("PDL table", TritonForm::Table(pdl)),
    ]
}

/// The fixture's buffers, in manifest order, filled with their bytes before Triton's launch.
fn upload(ctx: &Context, fx: &TritonFixture, m: &Value) -> Vec<(String, DeviceBuffer<u8>)> {
    let bufs = m["buffers"].as_object().unwrap();
    bufs.iter()
        .map(|(name, b)| {
            let (at, len) = (
                b["before"].as_u64().unwrap() as usize,
                b["bytes"].as_u64().unwrap() as usize,
            );
            (
                name.clone(),
                DeviceBuffer::from_host(ctx, &fx.buffers[at..at + len]).unwrap(),
            )
        })
        .collect()
}

/// Checks every buffer holds exactly the bytes it held after Triton's launch.
fn check(fx: &TritonFixture, m: &Value, bufs: &[(String, DeviceBuffer<u8>)], what: &str) {
    for (name, buf) in bufs {
        let b = &m["buffers"][name];
        let (at, len) = (
            b["after"].as_u64().unwrap() as usize,
            b["bytes"].as_u64().unwrap() as usize,
        );
        let got = buf.to_vec().unwrap();
        let want = &fx.buffers[at..at + len];
        if got != want {
            let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
            panic!(
                "{} ({what}): buffer `{name}` differs from Triton's launch first at byte {first}",
                fx.name
            );
        }
    }
}

fn grid(m: &Value) -> [u32; 3] {
    let g: Vec<u32> = m["grid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    [g[0], g[1], g[2]]
}

fn buffer_of<'b>(bufs: &'b [(String, DeviceBuffer<u8>)], name: &str) -> &'b DeviceBuffer<u8> {
    &bufs.iter().find(|(n, _)| n == name).unwrap().1
}

/// Launches `kernel` once on the fixture's inputs: buffers passed directly, or bound to pointer
/// slots of `table` (refreshed first) when the kernel is a table form.
fn launch_once(
    ctx: &Context,
    stream: &Stream,
    fx: &TritonFixture,
    kernel: &TritonKernel,
) -> Vec<(String, DeviceBuffer<u8>)> {
    let m = fx.manifest();
    let bufs = upload(ctx, fx, &m);
    let args_m = m["args"].as_array().unwrap();
    let mut table = ArgTable::new(ctx, TableOptions::default()).unwrap();
    let slots: Vec<Option<PtrSlot<u8>>> = kernel
        .params()
        .iter()
        .map(|p| p.slot.then(|| table.ptr_slot().unwrap()))
        .collect();
    for (a, slot) in args_m.iter().zip(&slots) {
        if let Some(s) = slot {
            table
                .bind(s, buffer_of(&bufs, a["buffer"].as_str().unwrap()))
                .unwrap();
        }
    }
    let args: Vec<TritonArg> = args_m
        .iter()
        .zip(&slots)
        .map(|(a, slot)| match (slot, a.get("buffer")) {
            (Some(s), _) => TritonArg::ptr_slot(s),
            (None, Some(b)) => TritonArg::buffer(buffer_of(&bufs, b.as_str().unwrap())),
            (None, None) => TritonFixture::scalar(a),
        })
        .collect();
    // SAFETY: the fixture's own buffers and arguments, as Triton launched them.
    unsafe {
        if slots.iter().any(Option::is_some) {
            table.refresh(stream).unwrap();
            kernel
                .launch_after_refresh(stream, grid(&m), &args)
                .unwrap()
        } else {
            kernel.launch(stream, grid(&m), &args).unwrap()
        }
    };
    stream.synchronize().unwrap();
    bufs
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0 (the fixtures are sm_90a)"]
fn triton_fixtures_give_tritons_bytes_in_every_form() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    for fx in TRITON_FIXTURES {
        for (what, form) in forms() {
            let kernel = TritonKernel::load(&ctx, &fx.files(), form).unwrap();
            assert_eq!(kernel.from_cubin(), what == "original");
            let bufs = launch_once(&ctx, &stream, fx, &kernel);
            check(fx, &fx.manifest(), &bufs, what);
        }
    }
}

/// 100 replays of a graph of the fixture's table form (refresh, kernel), every pointer slot
/// bound to fresh buffers (holding the fixture's inputs) before each, no synchronization until
/// the end; then every replay's buffers are checked. Returns the GPU µs of one replay.
fn replay_rebound(ctx: &Context, stream: &Stream, fx: &TritonFixture, form: TritonForm) -> f64 {
    let m = fx.manifest();
    let kernel = TritonKernel::load(ctx, &fx.files(), form).unwrap();
    let mut table = ArgTable::new(ctx, TableOptions::default()).unwrap();
    let args_m = m["args"].as_array().unwrap();
    let slots: Vec<Option<PtrSlot<u8>>> = kernel
        .params()
        .iter()
        .map(|p| p.slot.then(|| table.ptr_slot().unwrap()))
        .collect();
    assert!(slots.iter().any(Option::is_some));
    let exec = stream
        .capture(CaptureMode::Global, |scope| {
            table.record_refresh(scope)?;
            let args: Vec<TritonArg> = args_m
                .iter()
                .zip(&slots)
                .map(|(a, s)| match s {
                    Some(s) => TritonArg::ptr_slot(s),
                    None => TritonFixture::scalar(a),
                })
                .collect();
            // SAFETY: every slot is bound to a fresh copy of the fixture's buffer before each
            // launch.
            unsafe { kernel.record(scope, grid(&m), &args)? };
            Ok(())
        })
        .unwrap()
        .instantiate()
        .unwrap();
    let sanitized = std::env::var_os("GRAPH_RT_SANITIZER").is_some();
    let replays = if sanitized { 5 } else { 100 };
    let sets: Vec<_> = (0..replays).map(|_| upload(ctx, fx, &m)).collect();
    let (start, end) = (
        Event::new(ctx, EventFlags::Timing).unwrap(),
        Event::new(ctx, EventFlags::Timing).unwrap(),
    );
    start.record(stream).unwrap();
    for bufs in &sets {
        for (a, s) in args_m.iter().zip(&slots) {
            if let Some(s) = s {
                table
                    .bind(s, buffer_of(bufs, a["buffer"].as_str().unwrap()))
                    .unwrap();
            }
        }
        table.launch(&exec, stream).unwrap();
    }
    end.record(stream).unwrap();
    stream.synchronize().unwrap();
    for bufs in &sets {
        check(fx, &m, bufs, "graph replay, rebound");
    }
    Event::elapsed_ms(&start, &end).unwrap() as f64 * 1e3 / replays as f64
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0 (the fixtures are sm_90a)"]
fn triton_table_forms_in_graphs_rebound_every_replay_stay_right() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    println!(
        "triton: fixture · µs per replay (100 replays, every pointer rebound): table · PDL table"
    );
    for fx in TRITON_FIXTURES {
        let [_, (_, table), (_, pdl)] = forms();
        let t = replay_rebound(&ctx, &stream, fx, table);
        let p = replay_rebound(&ctx, &stream, fx, pdl);
        println!("triton: {:<18} {t:8.2} · {p:8.2}", fx.name);
    }
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0 (the fixtures are sm_90a)"]
fn triton_specialization_breaks_are_typed_errors() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let fx = TRITON_FIXTURES.iter().find(|f| f.name == "add").unwrap();
    // add_kernel(x, y, out, n): every pointer and n compiled as divisible by 16.
    let kernel = TritonKernel::load(&ctx, &fx.files(), TritonForm::Original).unwrap();
    assert!(kernel.params().iter().all(|p| p.divisible_16));
    let bufs: Vec<DeviceBuffer<f32>> = (0..3)
        .map(|_| DeviceBuffer::zeroed(&ctx, 4100).unwrap())
        .collect();
    let shifted = bufs[0].slice(1..4097).unwrap();
    let misuse = |r: crate::Result<()>| r.err().and_then(|e| e.misuse_kind().cloned());
    let breaks = |index| Some(Misuse::Specialization { index });
    let b = |i: usize| TritonArg::buffer(&bufs[i]);
    // SAFETY: refused before launching, or launched on 4100-float buffers with n ≤ 4096.
    unsafe {
        assert_eq!(
            misuse(kernel.launch(
                &stream,
                [4, 1, 1],
                &[TritonArg::view(&shifted), b(1), b(2), TritonArg::i32(4096)]
            )),
            breaks(0)
        );
        assert_eq!(
            misuse(kernel.launch(
                &stream,
                [5, 1, 1],
                &[b(0), b(1), b(2), TritonArg::i32(4100)]
            )),
            breaks(3)
        );
        kernel
            .launch(
                &stream,
                [4, 1, 1],
                &[b(0), b(1), b(2), TritonArg::i32(4096)],
            )
            .unwrap();
    }
    // Table form with n a scalar slot: the slot must take multiples of 16, and does.
    let options = graph_rt_ptx::Options {
        scalars: vec!["add_kernel:3".parse().unwrap()],
        ..Default::default()
    };
    let table_kernel = TritonKernel::load(&ctx, &fx.files(), TritonForm::Table(options)).unwrap();
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let loose: PtrSlot<f32> = table.ptr_slot_with(4, 0).unwrap();
    let p: Vec<PtrSlot<f32>> = (0..3).map(|_| table.ptr_slot().unwrap()).collect();
    let any_n = table.scalar_slot::<i32>().unwrap();
    let n16 = table.scalar_slot_with::<i32>(16).unwrap();
    let s = |i: usize| TritonArg::ptr_slot(&p[i]);
    // SAFETY: every call is refused before launching.
    unsafe {
        assert_eq!(
            misuse(table_kernel.launch(
                &stream,
                [4, 1, 1],
                &[
                    TritonArg::ptr_slot(&loose),
                    s(1),
                    s(2),
                    TritonArg::scalar_slot(&n16)
                ]
            )),
            breaks(0)
        );
        assert_eq!(
            misuse(table_kernel.launch(
                &stream,
                [4, 1, 1],
                &[s(0), s(1), s(2), TritonArg::scalar_slot(&any_n)]
            )),
            breaks(3)
        );
        // A value where the table form reads a slot.
        assert_eq!(
            misuse(table_kernel.launch(
                &stream,
                [4, 1, 1],
                &[s(0), s(1), s(2), TritonArg::i32(4096)]
            )),
            Some(Misuse::WrongArgument { index: 3 })
        );
    }
    assert_eq!(
        table
            .set_scalar(&n16, 4100)
            .unwrap_err()
            .misuse_kind()
            .cloned(),
        Some(Misuse::NotMultiple { multiple: 16 })
    );
    table.set_scalar(&n16, 4096).unwrap();
    stream.synchronize().unwrap();
}
