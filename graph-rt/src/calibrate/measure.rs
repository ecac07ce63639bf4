//! Calibration on the device: every mechanism's chain timed in interleaved rounds, the copy
//! bandwidth, and the cached model per device.

use std::time::Instant;

use super::cache::{self, ModelSource, Wanted};
use super::device::{identify, DeviceId};
use super::options::CalibrateOptions;
use super::workload::{chain_shape, chain_step, ChainStep};
use crate::choose::{CostModel, Mechanism};
use crate::driver::{CaptureStatus, DeviceBuffer, Event, EventFlags, Stream};
use crate::error::{Error, Misuse, Result};
use crate::prelude::Prelude;
use crate::timing::{interleave, median, rounds_at, warm_up};

/// Bytes of the copy whose time gives the copy bandwidth.
const BANDWIDTH_BYTES: usize = 64 << 20;

/// Measures, on `stream`'s device, the wall µs per synchronized replay of the calibration chain
/// (see [`chain_step`]) at each of `options.sizes` kernel nodes, rebinding every pointer before
/// each replay, for each mechanism that applies: table + PDL (compute capability 9.0+), table,
/// the in-graph prelude (where it loads), host per-node update, re-capture + exec update, static graph with the input copied in and
/// the output out, and the caller's [`ExtraMechanism`](super::ExtraMechanism)s; and the
/// device-to-device copy bandwidth (a 64 MiB copy, timed between events). Returns the model
/// fitted to those points.
///
/// Per size, every mechanism's chain is built first; then the mechanisms take turns, one
/// synchronized step each per round, the order rotating, warm-up rounds first; each keeps the
/// median of its rounds. The static-copy points are stored less the time of copying the chain's
/// `copy_bytes` ([`chain_shape`]) at the measured bandwidth, which [`choose`](crate::choose::choose)
/// adds back for each graph's own bytes.
///
/// The stream must not be capturing.
pub fn calibrate(stream: &Stream, options: &CalibrateOptions) -> Result<CostModel> {
    options.check()?;
    measure(stream, options, &plan(stream, options)?)
}

/// What a calibration of a device measures: found once per call (identifying the device and
/// loading the prelude to see whether it runs there are driver calls).
struct Plan {
    id: DeviceId,
    pdl: bool,
    mechanisms: Vec<Mechanism>,
}

fn plan(stream: &Stream, options: &CalibrateOptions) -> Result<Plan> {
    let device = stream.context().device();
    let pdl = device.compute_capability()?.0 >= 9;
    let prelude = Prelude::device_support(stream.context()).is_ok();
    Ok(Plan {
        id: identify(&device)?,
        pdl,
        mechanisms: options.planned(pdl, prelude),
    })
}

/// [`calibrate`] with its plan made.
fn measure(stream: &Stream, options: &CalibrateOptions, plan: &Plan) -> Result<CostModel> {
    if stream.capture_status()? != CaptureStatus::None {
        return Err(Error::misuse(
            "calibrate",
            Misuse::Capturing,
            "the stream is capturing: calibration launches and synchronizes, which a capture cannot hold",
        ));
    }
    let (pdl, planned) = (plan.pdl, &plan.mechanisms);
    let bandwidth = copy_bandwidth(stream)?;
    let mut samples = Vec::with_capacity(planned.len() * options.sizes.len());
    for &nodes in &options.sizes {
        let mut steps = planned
            .iter()
            .map(|&m| match options.extra_setup(m) {
                Some(setup) => setup(stream, nodes),
                None => chain_step(stream, m, nodes),
            })
            .collect::<Result<Vec<ChainStep>>>()?;
        stream.synchronize()?;
        let mut cases: Vec<_> = steps
            .iter_mut()
            .map(|step| move || timed(stream, step))
            .collect();
        let rounds = rounds_at(nodes, options.rounds);
        let medians = interleave(rounds, warm_up(rounds), &mut cases)?;
        let copy_us = chain_shape(nodes, pdl).copy_bytes as f64 / bandwidth;
        for (&m, us) in planned.iter().zip(medians) {
            let us = if m == Mechanism::StaticCopy {
                (us - copy_us).max(0.0)
            } else {
                us
            };
            samples.push((m, nodes, us));
        }
    }
    CostModel::fit(&plan.id.description, &samples, bandwidth)
}

/// Wall µs of one step and the synchronization of `stream` after it.
fn timed(stream: &Stream, step: &mut ChainStep) -> Result<f64> {
    let t = Instant::now();
    step(stream)?;
    stream.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

/// Device-to-device copy bandwidth in bytes per µs: the median of 20 copies of 64 MiB between
/// events, after 3 to warm up.
fn copy_bandwidth(stream: &Stream) -> Result<f64> {
    const WARM: usize = 3;
    const COPIES: usize = 20;
    let ctx = stream.context();
    let src = DeviceBuffer::<u8>::zeroed(ctx, BANDWIDTH_BYTES)?;
    let mut dst = DeviceBuffer::<u8>::alloc(ctx, BANDWIDTH_BYTES)?;
    let start = Event::new(ctx, EventFlags::Timing)?;
    let end = Event::new(ctx, EventFlags::Timing)?;
    let mut times = Vec::with_capacity(COPIES);
    for i in 0..WARM + COPIES {
        start.record(stream)?;
        // SAFETY: equal lengths; both buffers were allocated by DeviceBuffer::alloc/zeroed (their
        // drop frees them with cuMemFree, which waits for queued work), and the stream is not
        // capturing (calibrate checked it).
        unsafe { dst.copy_from_device_async(&src, stream)? };
        end.record(stream)?;
        end.synchronize()?;
        if i >= WARM {
            times.push(f64::from(Event::elapsed_ms(&start, &end)?) * 1e3);
        }
    }
    let us = median(times);
    if us.is_nan() || us <= 0.0 {
        // Not a misuse: the device's timing gave nothing usable.
        return Err(Error::invalid(
            "cuEventElapsedTime",
            format!("a 64 MiB copy measured {us} µs"),
        ));
    }
    Ok(BANDWIDTH_BYTES as f64 / us)
}

/// The cost model of `stream`'s device: read from `cost-model-<device UUID>.json` in the cache
/// directory (`options.cache_dir`, else `GRAPH_RT_CACHE_DIR`, else `$XDG_CACHE_HOME/graph-rt`,
/// else `$HOME/.cache/graph-rt`), or measured by [`calibrate`] and written there (atomically:
/// a temporary file renamed over it) when the file is missing, unreadable or corrupt, of
/// another device, lacks a mechanism this calibration measures or was measured at other chain
/// sizes than `options.sizes`, or when `options.recalibrate`
/// or `GRAPH_RT_RECALIBRATE=1` asks for it. [`ModelSource`] says which, and why; a file that
/// cannot be written is reported there too, and the measured model returned all the same.
///
/// ```no_run
/// use graph_rt::{Context, Stream};
/// use graph_rt::calibrate::{chain_shape, cost_model, CalibrateOptions};
/// use graph_rt::choose::choose;
///
/// # fn main() -> graph_rt::Result<()> {
/// let ctx = Context::new(0)?;
/// let stream = Stream::new(&ctx)?;
/// let (model, source) = cost_model(&stream, &CalibrateOptions::default())?;
/// println!("cost model {source}");
/// let pdl = ctx.device().compute_capability()?.0 >= 9;
/// println!("{}", choose(&chain_shape(200, pdl), &model, None)?);
/// # Ok(()) }
/// ```
pub fn cost_model(stream: &Stream, options: &CalibrateOptions) -> Result<(CostModel, ModelSource)> {
    options.check()?;
    let plan = plan(stream, options)?;
    let dir = options
        .cache_dir
        .clone()
        .or_else(|| cache::cache_dir_from(|name| std::env::var_os(name)));
    let path = dir.map(|d| d.join(cache::file_name(&plan.id.key)));
    let forced = options.recalibrate || cache::flag(std::env::var_os(cache::ENV_RECALIBRATE));
    let wanted = Wanted {
        device: &plan.id.description,
        mechanisms: &plan.mechanisms,
        sizes: &options.sizes,
    };
    cache::load_or_calibrate(path, forced, wanted, || measure(stream, options, &plan))
}
