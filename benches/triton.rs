//! GPU time of the Triton fixtures (triton-fixtures/, Triton 3.6) in each form graph-rt launches
//! them: the original (Triton's cubin), the table form and the PDL table form (made by the PTX
//! pass at load time). Per fixture and form: the kernel alone between events (recorded behind an
//! eager table refresh, so that the GPU is busy and the events time the kernel, not the launch
//! latency), and one replay of a captured graph (refresh + kernel for the table
//! forms, the kernel alone for the original) with every pointer rebound before it, between
//! events. Medians of interleaved rounds.
//!
//! ```text
//! cargo bench --bench triton
//! ```

mod common;

use graph_rt::table::PtrSlot;
use graph_rt::triton::{TritonArg, TritonFiles, TritonForm, TritonKernel};
use graph_rt::{
    ArgTable, CaptureMode, Context, DeviceBuffer, Event, EventFlags, GraphExec, Stream,
    TableOptions,
};
use serde_json::Value;

macro_rules! triton_fixtures_dir {
    () => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/triton-fixtures/")
    };
}
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/triton-fixtures/embed.rs"
));

/// One fixture in one form, ready to launch: its buffers (two sets, alternated), slots, exec.
struct Case {
    kernel: TritonKernel,
    grid: [u32; 3],
    args: Vec<Value>,
    sets: Vec<Buffers>,
    table: ArgTable,
    slots: Vec<Option<PtrSlot<u8>>>,
    exec: GraphExec,
    turn: usize,
}

type Buffers = Vec<(String, DeviceBuffer<u8>)>;

fn buffer<'b>(set: &'b Buffers, name: &str) -> &'b DeviceBuffer<u8> {
    &set.iter().find(|(n, _)| n == name).expect("buffer").1
}

/// Binds every slot to its buffer of `set`.
fn bind(table: &mut ArgTable, args: &[Value], slots: &[Option<PtrSlot<u8>>], set: &Buffers) {
    for (a, s) in args.iter().zip(slots) {
        if let Some(s) = s {
            table
                .bind(s, buffer(set, a["buffer"].as_str().expect("name")))
                .expect("bind");
        }
    }
}

fn launch_args<'a>(
    args: &[Value],
    slots: &'a [Option<PtrSlot<u8>>],
    set: &'a Buffers,
) -> Vec<TritonArg<'a>> {
    args.iter()
        .zip(slots)
        .map(|(a, s)| match (s, a.get("buffer")) {
            (Some(s), _) => TritonArg::ptr_slot(s),
            (None, Some(b)) => TritonArg::buffer(buffer(set, b.as_str().expect("name"))),
            (None, None) => TritonFixture::scalar(a),
        })
        .collect()
}

impl Case {
    fn new(ctx: &Context, stream: &Stream, fx: &TritonFixture, form: TritonForm) -> Case {
        let m = fx.manifest();
        let kernel = TritonKernel::load(ctx, &fx.files(), form).expect("load");
        let g: Vec<u32> = m["grid"]
            .as_array()
            .expect("grid")
            .iter()
            .map(|v| v.as_u64().expect("dim") as u32)
            .collect();
        let sets: Vec<Buffers> = (0..2)
            .map(|_| {
                m["buffers"]
                    .as_object()
                    .expect("buffers")
                    .iter()
                    .map(|(name, b)| {
                        let (at, len) = (
                            b["before"].as_u64().expect("at") as usize,
                            b["bytes"].as_u64().expect("len") as usize,
                        );
                        (
                            name.clone(),
                            DeviceBuffer::from_host(ctx, &fx.buffers[at..at + len])
                                .expect("upload"),
                        )
                    })
                    .collect()
            })
            .collect();
        let mut table = ArgTable::new(ctx, TableOptions::default()).expect("table");
        let slots: Vec<Option<PtrSlot<u8>>> = kernel
            .params()
            .iter()
            .map(|p| p.slot.then(|| table.ptr_slot().expect("slot")))
            .collect();
        let args = m["args"].as_array().expect("args").clone();
        bind(&mut table, &args, &slots, &sets[0]);
        let table_form = slots.iter().any(Option::is_some);
        let grid = [g[0], g[1], g[2]];
        let graph = stream
            .capture(CaptureMode::Global, |scope| {
                if table_form {
                    table.record_refresh(scope)?;
                }
                let launch = launch_args(&args, &slots, &sets[0]);
                // SAFETY: the fixture's buffers and scalars, as Triton launched them.
                unsafe { kernel.record(scope, grid, &launch)? };
                Ok(())
            })
            .expect("capture");
        let exec = graph.instantiate().expect("instantiate");
        Case {
            kernel,
            grid,
            args,
            sets,
            table,
            slots,
            exec,
            turn: 0,
        }
    }

    /// GPU µs of the kernel alone (after an eager refresh for table forms).
    fn kernel_alone(&mut self, stream: &Stream, start: &Event, end: &Event) -> f64 {
        self.turn += 1;
        let set = self.turn % 2;
        bind(&mut self.table, &self.args, &self.slots, &self.sets[set]);
        let args = launch_args(&self.args, &self.slots, &self.sets[set]);
        let table_form = self.slots.iter().any(Option::is_some);
        // Every form after a refresh (the original's table has no slot): the GPU is busy when
        // the start event is recorded, so the events time the kernel, not the launch's latency.
        self.table.refresh(stream).expect("refresh");
        start.record(stream).expect("record");
        // SAFETY: the fixture's buffers and scalars, as Triton launched them.
        unsafe {
            if table_form {
                self.kernel
                    .launch_after_refresh(stream, self.grid, &args)
                    .expect("launch")
            } else {
                self.kernel
                    .launch(stream, self.grid, &args)
                    .expect("launch")
            }
        }
        end.record(stream).expect("record");
        end.synchronize().expect("sync");
        Event::elapsed_ms(start, end).expect("elapsed") as f64 * 1e3
    }

    /// GPU µs of one graph replay, every pointer rebound before it (the original's graph is
    /// replayed as captured).
    fn replay(&mut self, stream: &Stream, start: &Event, end: &Event) -> f64 {
        self.turn += 1;
        let table_form = self.slots.iter().any(Option::is_some);
        start.record(stream).expect("record");
        if table_form {
            bind(
                &mut self.table,
                &self.args,
                &self.slots,
                &self.sets[self.turn % 2],
            );
            self.table.launch(&self.exec, stream).expect("launch");
        } else {
            self.exec.launch(stream).expect("launch");
        }
        end.record(stream).expect("record");
        end.synchronize().expect("sync");
        Event::elapsed_ms(start, end).expect("elapsed") as f64 * 1e3
    }
}

fn main() {
    common::built_from("triton");
    let ctx = match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) => return eprintln!("triton bench skipped: {e}"),
    };
    if ctx
        .device()
        .compute_capability()
        .map_or(true, |cc| cc.0 < 9)
    {
        return eprintln!("triton bench skipped: the fixtures are sm_90a");
    }
    let stream = Stream::new(&ctx).expect("stream");
    let (start, end) = (
        Event::new(&ctx, EventFlags::Timing).expect("event"),
        Event::new(&ctx, EventFlags::Timing).expect("event"),
    );
    println!("triton: GPU µs (median of interleaved rounds): kernel alone original · table · PDL table || graph replay, every pointer rebound: original (static) · table · PDL table");
    for fx in TRITON_FIXTURES {
        let pdl = graph_rt::ptx::Options {
            pdl: true,
            ..Default::default()
        };
        let mut cases = [
            Case::new(&ctx, &stream, fx, TritonForm::Original),
            Case::new(&ctx, &stream, fx, TritonForm::Table(Default::default())),
            Case::new(&ctx, &stream, fx, TritonForm::Table(pdl)),
        ];
        let cells = std::cell::RefCell::new(&mut cases);
        let mut variants: Vec<common::Variant> = Vec::new();
        for i in 0..3 {
            let (cells, start, end, stream) = (&cells, &start, &end, &stream);
            variants.push((
                "kernel",
                Box::new(move || cells.borrow_mut()[i].kernel_alone(stream, start, end)),
            ));
        }
        for i in 0..3 {
            let (cells, start, end, stream) = (&cells, &start, &end, &stream);
            variants.push((
                "replay",
                Box::new(move || cells.borrow_mut()[i].replay(stream, start, end)),
            ));
        }
        let r = common::interleave(200, variants);
        println!(
            "triton: {:<18} {:6.2} · {:6.2} · {:6.2} || {:6.2} · {:6.2} · {:6.2}",
            fx.name, r[0].1, r[1].1, r[2].1, r[3].1, r[4].1, r[5].1
        );
    }
}
