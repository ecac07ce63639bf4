//! Communicators: the unique id their ranks share, making one (a rank of a clique, or every
//! rank of a clique in one thread), waiting for NCCL's non-blocking calls with a deadline, abort,
//! and the destroy their last user runs.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::id::UniqueId;
use super::sys::{self, Comm, Config, NcclLib, Status, UNIQUE_ID_BYTES};
use super::{check_devices, check_rank};
use crate::driver::{point_after, Context, Point, StreamInner};
use crate::error::{Error, Misuse, Result};

/// How a communicator waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommOptions {
    /// How long making the communicator (every rank joining) may take before it is aborted
    /// and [`Error::Timeout`] returned. 60 s by default.
    pub init_timeout: Duration,
    /// How long a made communicator waits for NCCL (a group's end, finalizing), and how long
    /// a dropped communicator's unfinished eager collectives get before it is aborted. 60 s by
    /// default.
    pub timeout: Duration,
}

impl Default for CommOptions {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(60),
            timeout: Duration::from_secs(60),
        }
    }
}

/// The (id, device) of every live rank of this process: one rank a GPU.
static RANKS: Mutex<Vec<([u8; UNIQUE_ID_BYTES], usize)>> = Mutex::new(Vec::new());

/// One rank's NCCL communicator, shared by the [`Communicator`], the eager collectives not yet
/// finished and the graphs that captured collectives of it.
pub(crate) struct CommInner {
    pub(super) comm: Comm,
    pub(super) lib: &'static NcclLib,
    pub(super) ctx: Context,
    pub(super) rank: usize,
    pub(super) nranks: usize,
    pub(super) timeout: Duration,
    id: [u8; UNIQUE_ID_BYTES],
    pub(super) aborted: AtomicBool,
    // Graphs that captured collectives of this communicator and are alive.
    pub(super) graphs: AtomicUsize,
    // The streams its eager collectives were queued on (each once), which a dropped
    // communicator's watchdog waits for.
    pub(super) eager_streams: Mutex<Vec<Arc<StreamInner>>>,
}

// SAFETY: an NCCL communicator may be used from any thread, one call at a time: `CommInner`'s
// own calls (abort, destroy, the async-error query) are made by its last owner or under the
// `Communicator` (not `Sync`) that issues the collectives.
unsafe impl Send for CommInner {}
// SAFETY: as above; shared only to be kept alive (graphs, parked batches) and dropped.
unsafe impl Sync for CommInner {}

impl CommInner {
    /// Waits until `comm`'s last call has completed (`ncclCommGetAsyncError` no longer
    /// `ncclInProgress`), up to `deadline`.
    pub(super) fn wait(&self, call: &'static str, deadline: Instant) -> Result<()> {
        wait_comm(self.lib, self.comm, call, deadline, self.timeout)
    }

    /// Aborts the communicator (`ncclCommAbort`): its uncompleted operations end, its
    /// resources are freed; every later call is refused.
    pub(super) fn abort_now(&self) -> Result<()> {
        if self.aborted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: a live communicator of this context, aborted once (the flag above).
        let status = unsafe { (self.lib.abort)(self.comm) };
        check(self.lib, "ncclCommAbort", status, std::ptr::null_mut())
    }

    /// Checks that NCCL made what was asked: the communicator's rank count, rank and device.
    fn verify(&self) -> Result<()> {
        let device = self.ctx.device().ordinal();
        for (call, f, want) in [
            ("ncclCommCount", self.lib.count, self.nranks),
            ("ncclCommUserRank", self.lib.user_rank, self.rank),
            ("ncclCommCuDevice", self.lib.cu_device, device),
        ] {
            let mut got = -1;
            // SAFETY: a live, initialised communicator and a valid out-pointer.
            check(self.lib, call, unsafe { f(self.comm, &mut got) }, self.comm)?;
            if usize::try_from(got).ok() != Some(want) {
                return Err(Error::invalid(
                    call,
                    format!("NCCL made a communicator with {got} where {want} was asked (is the context the device's primary context?)"),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn refuse_if_aborted(&self, call: &'static str) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(Error::misuse(
                call,
                Misuse::Aborted,
                "the communicator was aborted: make a new one on every rank",
            ));
        }
        Ok(())
    }
}

impl Drop for CommInner {
    /// Runs where the last owner lets go (the `Communicator`, an eager collective's parked batch
    /// once it has run, a graph that captured one): hands the destroy to the context's release
    /// thread, since it waits for peers and for the device, which no capture allows.
    fn drop(&mut self) {
        RANKS
            .lock()
            .retain(|r| *r != (self.id, self.ctx.device().ordinal()));
        if self.aborted.load(Ordering::Acquire) {
            return;
        }
        let destroy = Destroy {
            comm: self.comm,
            lib: self.lib,
            ctx: self.ctx.clone(),
            timeout: self.timeout,
        };
        self.ctx.inner.tracker.release_later(Box::new(destroy));
    }
}

/// A communicator nothing uses any more, to finalize and destroy on the release thread (or to
/// abort when finalizing takes longer than its timeout).
struct Destroy {
    comm: Comm,
    lib: &'static NcclLib,
    ctx: Context,
    timeout: Duration,
}

// SAFETY: a communicator may be destroyed from any thread once nothing else uses it (its
// `CommInner` is gone).
unsafe impl Send for Destroy {}

impl Drop for Destroy {
    fn drop(&mut self) {
        let r = self.ctx.bind().and_then(|_| {
            // SAFETY: a live communicator nothing uses any more.
            let status = unsafe { (self.lib.finalize)(self.comm) };
            check_or_progress(self.lib, "ncclCommFinalize", status, self.comm)?;
            let deadline = Instant::now() + self.timeout;
            wait_comm(
                self.lib,
                self.comm,
                "ncclCommFinalize",
                deadline,
                self.timeout,
            )?;
            // SAFETY: finalized, used by nothing.
            let status = unsafe { (self.lib.destroy)(self.comm) };
            check(self.lib, "ncclCommDestroy", status, std::ptr::null_mut())
        });
        if r.is_err() {
            // A peer that never finalizes must not keep this thread: abort frees it anyway.
            // SAFETY: the communicator, not destroyed (the destroy failed or was not reached).
            let _ = self
                .ctx
                .bind()
                .map(|_| unsafe { (self.lib.abort)(self.comm) });
        }
        self.ctx.inner.record(r);
    }
}

/// A communicator of one rank, on one device: its collectives ([`Communicator::all_reduce`] and
/// the others) run on streams of its context, eagerly, inside captures
/// ([`Communicator::record`]) and through a step's scope.
///
/// Made non-blocking: every NCCL call returns at once and graph-rt waits for it with the
/// communicator's deadlines ([`CommOptions`]), so a peer that never joins fails the
/// call with [`Error::Timeout`] instead of hanging it. `Send` but not `Sync`: a communicator is
/// used from one thread at a time (one thread a GPU, or every rank in one thread through
/// [`group`](super::group)). Dropping it never waits: it is destroyed on the context's release
/// thread once nothing can use it (the collectives queued so far, the graphs that captured one):
/// wherever the last of those lets go, the destroy (which waits for peers and the device, what
/// no capture allows) is handed to that thread.
pub struct Communicator {
    pub(super) inner: Arc<CommInner>,
    // Inside `record`: the capturing stream, and what the collectives used, for its graph.
    pub(super) recording: std::cell::Cell<Option<graph_rt_sys::CUstream>>,
    pub(super) kept: std::cell::RefCell<Vec<crate::resource::Resource>>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.inner.rank)
            .field("nranks", &self.inner.nranks)
            .field("device", &self.inner.ctx.device().ordinal())
            .field("aborted", &self.inner.aborted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for Communicator {
    /// Never waits. Eager collectives still running (a peer that died never runs its side)
    /// would keep the communicator, and what they use, parked for good: a watchdog thread waits
    /// for them up to the communicator's timeout, then aborts it (their kernels end, what they
    /// used is released) and records [`Error::Timeout`] on the context
    /// ([`Context::take_deferred_errors`]). Not while a graph that captured one of its
    /// collectives is alive (its replays would read what the abort frees).
    fn drop(&mut self) {
        let streams = std::mem::take(&mut *self.inner.eager_streams.lock());
        if streams.is_empty() || self.inner.aborted.load(Ordering::Acquire) {
            return;
        }
        let points: Vec<Point> = streams.iter().filter_map(|s| point_after(s).ok()).collect();
        if points.iter().all(Point::passed) {
            return;
        }
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new()
            .name("graph-rt nccl watchdog".into())
            .spawn(move || watch(inner, points));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "graph-rt: no watchdog for a dropped communicator's collectives");
        }
    }
}

/// Waits for `points` (after a dropped communicator's eager collectives) up to its timeout,
/// then aborts it.
fn watch(inner: Arc<CommInner>, mut points: Vec<Point>) {
    const CALL: &str = "Communicator (dropped)";
    let deadline = Instant::now() + inner.timeout;
    if inner.ctx.bind().is_err() {
        return;
    }
    points.retain_mut(|p| !p.wait_until(deadline));
    if points.is_empty() || inner.graphs.load(Ordering::Acquire) > 0 {
        return;
    }
    let aborted = inner.abort_now();
    let reason = match &aborted {
        Ok(()) => "the communicator was dropped with collectives that did not finish (a peer that never ran its side?): it was aborted, and what they used released".to_owned(),
        Err(e) => format!("the communicator was dropped with collectives that did not finish, and its abort failed: {e}"),
    };
    tracing::warn!(rank = inner.rank, "graph-rt: {reason}");
    inner.ctx.inner.record(Err(Error::Timeout {
        call: CALL,
        after: inner.timeout,
        reason,
    }));
}

impl Communicator {
    /// Rank `rank` of the `nranks` ranks made with `id`, on `ctx`'s device (its primary
    /// context, as [`Context::new`] gives): every rank calls this, each in its own thread or
    /// process, within `options.init_timeout` of each other. Loads NCCL on first use.
    pub fn init_rank(
        ctx: &Context,
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        options: &CommOptions,
    ) -> Result<Self> {
        const CALL: &str = "ncclCommInitRankConfig";
        check_rank(CALL, rank, nranks)?;
        let lib = sys::library()?;
        let claim = claim(CALL, id, &[ctx.device().ordinal()])?;
        let deadline = Instant::now() + options.init_timeout;
        let comm = start_init(lib, ctx, id, rank, nranks)?;
        // SAFETY: `comm` is the handle `start_init` made, used by nothing else.
        let this = unsafe { Self::finish(lib, ctx, id, comm, rank, nranks, options, deadline) }?;
        std::mem::forget(claim);
        Ok(this)
    }

    /// A communicator of one rank on each of `contexts`' devices (rank `i` on `contexts[i]`),
    /// made in this thread in one NCCL group (`ncclGroupStart`, one `ncclCommInitRankConfig` a
    /// device, `ncclGroupEnd`). The devices must differ ([`Misuse::RankPerGpu`]).
    pub fn init_all(contexts: &[Context], options: &CommOptions) -> Result<Vec<Self>> {
        const CALL: &str = "ncclCommInitRankConfig";
        let devices: Vec<usize> = contexts.iter().map(|c| c.device().ordinal()).collect();
        check_devices(CALL, &devices)?;
        let lib = sys::library()?;
        let id = UniqueId::new()?;
        let claim = claim(CALL, &id, &devices)?;
        let nranks = contexts.len();
        let deadline = Instant::now() + options.init_timeout;
        // SAFETY: no arguments; balanced by the group end below on every path.
        let status = unsafe { (lib.group_start)() };
        check(lib, "ncclGroupStart", status, std::ptr::null_mut())?;
        let mut comms = Vec::with_capacity(nranks);
        let mut started = Ok(());
        for (rank, ctx) in contexts.iter().enumerate() {
            match start_init(lib, ctx, &id, rank, nranks) {
                Ok(c) => comms.push(c),
                Err(e) => {
                    started = Err(e);
                    break;
                }
            }
        }
        // SAFETY: closes the group opened above.
        let ended = unsafe { (lib.group_end)() };
        let ended = check_or_progress(lib, "ncclGroupEnd", ended, std::ptr::null_mut());
        if let Err(e) = started.and(ended) {
            for (c, ctx) in comms.iter().zip(contexts) {
                // SAFETY: handles the group made, aborted once, used by nothing else.
                let _ = ctx.bind().map(|_| unsafe { (lib.abort)(*c) });
            }
            return Err(e);
        }
        let mut out = Vec::with_capacity(nranks);
        let mut failed = None;
        for (rank, (comm, ctx)) in comms.into_iter().zip(contexts).enumerate() {
            if failed.is_some() {
                // SAFETY: a handle of the group, aborted once, used by nothing else.
                let _ = ctx.bind().map(|_| unsafe { (lib.abort)(comm) });
                continue;
            }
            // SAFETY: `comm` is the group's handle for `ctx`, used by nothing else.
            match unsafe { Self::finish(lib, ctx, &id, comm, rank, nranks, options, deadline) } {
                Ok(c) => out.push(c),
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            for c in &out {
                let _ = c.inner.abort_now();
            }
            return Err(e);
        }
        std::mem::forget(claim);
        Ok(out)
    }

    /// Waits for `comm`'s initialisation and wraps it; aborts it on any failure.
    ///
    /// # Safety
    /// `comm` is the handle of a `ncclCommInitRankConfig` of `ctx` for `rank` of `nranks`,
    /// owned by the caller, who hands it over.
    #[allow(clippy::too_many_arguments)] // the init's own arguments, checked by the caller
    unsafe fn finish(
        lib: &'static NcclLib,
        ctx: &Context,
        id: &UniqueId,
        comm: Comm,
        rank: usize,
        nranks: usize,
        options: &CommOptions,
        deadline: Instant,
    ) -> Result<Self> {
        let inner = Arc::new(CommInner {
            comm,
            lib,
            ctx: ctx.clone(),
            rank,
            nranks,
            timeout: options.timeout,
            id: id.0,
            aborted: AtomicBool::new(false),
            graphs: AtomicUsize::new(0),
            eager_streams: Mutex::new(Vec::new()),
        });
        let this = Self {
            inner,
            recording: std::cell::Cell::new(None),
            kept: std::cell::RefCell::new(Vec::new()),
        };
        let ready = ctx
            .bind()
            .and_then(|_| {
                let call = "ncclCommInitRankConfig";
                wait_comm(lib, comm, call, deadline, options.init_timeout)
            })
            .and_then(|_| this.inner.verify());
        if let Err(e) = ready {
            let _ = this.inner.abort_now();
            return Err(e);
        }
        Ok(this)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// The communicator's ranks.
    pub fn nranks(&self) -> usize {
        self.inner.nranks
    }

    /// The context (and device) the communicator's collectives run in.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The version of the NCCL loaded, e.g. `(2, 28, 9)`.
    pub fn nccl_version(&self) -> (u32, u32, u32) {
        sys::split_version(self.inner.lib.version)
    }

    /// The path or name NCCL was loaded from.
    pub fn library_path(&self) -> &Path {
        Path::new(&self.inner.lib.path)
    }

    /// The raw `ncclComm_t`, for NCCL calls graph-rt does not wrap. Do not destroy, abort or
    /// finalize it, nor use it from another thread while this value is used.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.inner.comm
    }

    /// Whether the communicator was aborted.
    pub fn is_aborted(&self) -> bool {
        self.inner.aborted.load(Ordering::Acquire)
    }

    /// Aborts the communicator (`ncclCommAbort`): its uncompleted collectives end (their
    /// results are undefined), every later call is refused ([`Misuse::Aborted`]). Refused while a
    /// graph that captured one of its collectives is alive ([`Misuse::ExecExists`]): a replay
    /// would read what the abort frees. Call it on every rank.
    pub fn abort(&self) -> Result<()> {
        if self.inner.graphs.load(Ordering::Acquire) > 0 {
            return Err(Error::misuse(
                "ncclCommAbort",
                Misuse::ExecExists,
                "a graph that captured a collective of this communicator is alive: drop its graphs and execs first",
            ));
        }
        self.inner.abort_now()
    }

    /// Waits until `stream` has finished what it has queued, up to `timeout`, and checks the
    /// communicator for errors its collectives met (`ncclCommGetAsyncError`). When the stream is
    /// not idle by then (a peer that never ran its side of a collective), the communicator is
    /// aborted, so that the stream's collectives end, and [`Error::Timeout`] is returned —
    /// unless a graph that captured one of its collectives is alive (see
    /// [`Communicator::abort`]): then nothing is aborted.
    pub fn synchronize(&self, stream: &crate::driver::Stream, timeout: Duration) -> Result<()> {
        const CALL: &str = "Communicator::synchronize";
        self.inner.refuse_if_aborted(CALL)?;
        let start = Instant::now();
        let mut pause = Duration::from_micros(20);
        loop {
            self.async_error(CALL)?;
            if stream.is_idle()? {
                return self.async_error(CALL);
            }
            if start.elapsed() >= timeout {
                let reason = match self.abort() {
                    Ok(()) => "the stream's collectives did not finish (a peer did not run its side?): the communicator was aborted".to_owned(),
                    Err(e) => format!("the stream's collectives did not finish, and the communicator was not aborted: {e}"),
                };
                return Err(Error::Timeout {
                    call: CALL,
                    after: timeout,
                    reason,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// The error a collective met asynchronously, if any (`ncclCommGetAsyncError`).
    fn async_error(&self, call: &'static str) -> Result<()> {
        let mut state = sys::NCCL_SUCCESS;
        // SAFETY: a live communicator and a valid out-pointer.
        let status = unsafe { (self.inner.lib.async_error)(self.inner.comm, &mut state) };
        check(
            self.inner.lib,
            "ncclCommGetAsyncError",
            status,
            self.inner.comm,
        )?;
        match state {
            sys::NCCL_SUCCESS | sys::NCCL_IN_PROGRESS => Ok(()),
            failed => Err(sys::error(self.inner.lib, call, failed, self.inner.comm)),
        }
    }
}

/// Marks `devices` as holding a rank of `id` in this process, or refuses a device that already
/// holds one. The mark is taken back when the returned guard drops (the communicators, once
/// made, take it back when destroyed instead: the guard is forgotten then).
fn claim(call: &'static str, id: &UniqueId, devices: &[usize]) -> Result<Claim> {
    let mut ranks = RANKS.lock();
    if let Some(&device) = devices.iter().find(|d| ranks.contains(&(id.0, **d))) {
        return Err(Error::misuse(
            call,
            Misuse::RankPerGpu { device },
            format!("device {device} already holds a rank of this communicator: NCCL takes one rank a GPU"),
        ));
    }
    ranks.extend(devices.iter().map(|d| (id.0, *d)));
    Ok(Claim {
        id: id.0,
        devices: devices.to_vec(),
    })
}

struct Claim {
    id: [u8; UNIQUE_ID_BYTES],
    devices: Vec<usize>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        RANKS
            .lock()
            .retain(|(id, d)| !(*id == self.id && self.devices.contains(d)));
    }
}

/// Starts `ncclCommInitRankConfig` for `rank` of `nranks` on `ctx`, non-blocking.
fn start_init(
    lib: &'static NcclLib,
    ctx: &Context,
    id: &UniqueId,
    rank: usize,
    nranks: usize,
) -> Result<Comm> {
    const CALL: &str = "ncclCommInitRankConfig";
    // NCCL makes the communicator for the current device: the context's.
    ctx.bind()?;
    let mut config = Config::non_blocking();
    let mut comm: Comm = std::ptr::null_mut();
    let (n, r) = (rank_int(CALL, nranks)?, rank_int(CALL, rank)?);
    // SAFETY: valid out-pointer and configuration (the 2.14 layout, named by its version); the
    // id is 128 bytes by value, as the C signature takes it.
    let status = unsafe { (lib.init_rank_config)(&mut comm, n, id.raw(), r, &mut config) };
    if let Err(e) = check_or_progress(lib, CALL, status, comm) {
        if !comm.is_null() {
            // SAFETY: the handle the failed call made, used by nothing else.
            unsafe { (lib.abort)(comm) };
        }
        return Err(e);
    }
    Ok(comm)
}

fn rank_int(call: &'static str, v: usize) -> Result<std::ffi::c_int> {
    std::ffi::c_int::try_from(v).map_err(|_| {
        Error::misuse(
            call,
            Misuse::TooLarge { what: "rank" },
            format!("{v} does not fit NCCL's int"),
        )
    })
}

/// Waits until `comm`'s last call has completed, up to `deadline` ([`Error::Timeout`] after
/// `timeout`, the communicator left for the caller to abort).
pub(super) fn wait_comm(
    lib: &NcclLib,
    comm: Comm,
    call: &'static str,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    let mut pause = Duration::from_micros(10);
    loop {
        let mut state = sys::NCCL_IN_PROGRESS;
        // SAFETY: a live communicator (possibly still initialising) and a valid out-pointer.
        let status = unsafe { (lib.async_error)(comm, &mut state) };
        check(lib, "ncclCommGetAsyncError", status, comm)?;
        match state {
            sys::NCCL_SUCCESS => return Ok(()),
            sys::NCCL_IN_PROGRESS => {}
            failed => return Err(sys::error(lib, call, failed, comm)),
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                call,
                after: timeout,
                reason: "NCCL did not complete the call (every rank must make the same calls in the same order)".into(),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// `status` as a result: `ncclSuccess` is `Ok`, anything else an [`Error::Nccl`] of `call`.
pub(super) fn check(lib: &NcclLib, call: &'static str, status: Status, comm: Comm) -> Result<()> {
    if status == sys::NCCL_SUCCESS {
        Ok(())
    } else {
        Err(sys::error(lib, call, status, comm))
    }
}

/// As [`check`], with `ncclInProgress` (a non-blocking call still completing) `Ok` too.
pub(super) fn check_or_progress(
    lib: &NcclLib,
    call: &'static str,
    status: Status,
    comm: Comm,
) -> Result<()> {
    if status == sys::NCCL_IN_PROGRESS {
        Ok(())
    } else {
        check(lib, call, status, comm)
    }
}
