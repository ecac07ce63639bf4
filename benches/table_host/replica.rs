//! anchor4's two host paths rebuilt in this process, so that they interleave with graph-rt's in
//! one group and every ratio is of times taken seconds apart, not minutes (the host cost of
//! launching a large graph drifts by 2× and more over a minute on a shared host): a graph whose
//! first kernel copies a mapped host mirror into a device table and whose chain reads the
//! table, launched by the raw `cuGraphLaunch` after writing every pointer into the mirror with
//! plain stores; and the chain alone over the table as it is, launched raw. Both graphs are
//! uploaded after instantiation, as anchor4 does. The first kernel is graph-rt's
//! `table_refresh` on a ring of one mirror (anchor4's `pull` copies with one thread a slot and
//! acknowledges nothing; the difference is device work, not host work).

use graph_rt::{
    CaptureMode, Context, DeviceBuffer, Function, GraphExec, InstantiateOptions, MappedHostBuffer,
    Module, Stream,
};

use super::{cfg, ELEMS};

/// anchor4's graphs and mirror for a chain of `n` table-form kernels over `n + 1` slots.
pub struct Replica {
    mirror: MappedHostBuffer<u64>,
    // Kept alive for the graphs: the device table and the refresh's counters.
    _table: DeviceBuffer<u64>,
    _seq: DeviceBuffer<u64>,
    _acks: MappedHostBuffer<u64>,
    pull: GraphExec,
    chain: GraphExec,
}

impl Replica {
    /// The graphs over `sets[0]` (the table starts bound to it), on `stream`.
    pub fn new(ctx: &Context, stream: &Stream, f: &Function, first: &[DeviceBuffer<f32>]) -> Self {
        let k = first.len();
        let padded = k.div_ceil(8) * 8;
        let refresh = Module::from_ptx(ctx, graph_rt::kernels::TABLE.ptx)
            .expect("module")
            .function("table_refresh")
            .expect("function");
        let mirror = MappedHostBuffer::<u64>::zeroed(ctx, padded).expect("mirror");
        let table = DeviceBuffer::<u64>::zeroed(ctx, padded).expect("table");
        let seq = DeviceBuffer::<u64>::zeroed(ctx, 2).expect("seq");
        let acks = MappedHostBuffer::<u64>::zeroed(ctx, 1).expect("acks");
        let words: Vec<u64> = first.iter().map(|b| b.as_raw()).collect();
        write(&mirror, &words);
        let (t, s, a) = (table.as_raw(), seq.as_raw(), acks.device_ptr());
        let m = mirror.device_ptr();
        let c = cfg(true);
        let blocks = k.div_ceil(1024).max(1) as u32;
        let capture = |with_pull: bool| {
            let graph = stream
                .capture(CaptureMode::Global, |scope| {
                    if with_pull {
                        let pull = graph_rt::LaunchConfig::new(blocks, 256u32);
                        // SAFETY: table_refresh copies `padded` words of the mirror into the
                        // table (both that long), counts in `seq` (2 words) and acknowledges in
                        // `acks` (1 word, a ring of one); all live as long as `self`.
                        unsafe {
                            scope.launch(&refresh, &pull, (m, t, padded as u32, 1u32, s, a))?
                        };
                    }
                    for j in 0..k - 1 {
                        // SAFETY: add1 (table form) reads ELEMS floats through table word j
                        // and writes ELEMS through word j + 1, bound to ELEMS-float buffers
                        // the bench keeps to the end.
                        unsafe {
                            scope.launch(
                                f,
                                &c,
                                (t + 8 * j as u64, t + 8 * (j + 1) as u64, ELEMS as i32),
                            )?
                        };
                    }
                    Ok(())
                })
                .expect("capture");
            graph
                .instantiate_with(&InstantiateOptions {
                    upload: Some(stream),
                    ..Default::default()
                })
                .expect("instantiate")
        };
        let (pull, chain) = (capture(true), capture(false));
        // The table holds the first words once the pull graph ran.
        launch(&pull, stream);
        stream.synchronize().expect("sync");
        Self {
            mirror,
            _table: table,
            _seq: seq,
            _acks: acks,
            pull,
            chain,
        }
    }

    /// Every pointer written into the mirror, then the pull graph launched raw.
    pub fn write_and_launch(&self, words: &[u64], stream: &Stream) {
        write(&self.mirror, words);
        launch(&self.pull, stream);
    }

    /// The pull graph launched raw with nothing written: the cost of its first node.
    pub fn launch_pull(&self, stream: &Stream) {
        launch(&self.pull, stream);
    }

    /// The chain alone over the table as it is, launched raw.
    pub fn launch_chain(&self, stream: &Stream) {
        launch(&self.chain, stream);
    }
}

/// Writes `words` into `mirror`, word by word (anchor4: `mirror[i] = P[i]`).
#[inline]
fn write(mirror: &MappedHostBuffer<u64>, words: &[u64]) {
    let dst = mirror.as_ptr();
    assert!(words.len() <= mirror.len());
    for (i, &w) in words.iter().enumerate() {
        // SAFETY: in bounds (checked above); the device reads the mirror only during a launch
        // of `pull`, and every launch is synchronized before the next write. Plain stores, as
        // anchor4's (the compiler may widen them as it does there).
        unsafe { *dst.add(i) = w };
    }
}

fn launch(exec: &GraphExec, stream: &Stream) {
    // SAFETY: a live exec of the stream's context; its graph reads memory `Replica` and the
    // bench keep alive.
    let r =
        unsafe { graph_rt::sys::cuGraphLaunch(exec.as_raw(), stream.as_raw()) }.expect("driver");
    assert_eq!(r, graph_rt::sys::CUresult::CUDA_SUCCESS, "cuGraphLaunch");
}
