//! The gate between graph-rt's stream captures and its waits for a whole context
//! (`cuCtxSynchronize`, and calls that wait as it does: `cublasDestroy`).
//!
//! CUDA refuses `cuCtxSynchronize` while any stream of the context captures, in every capture
//! mode (thread-local and relaxed included), and the refusal breaks that capture: its end then
//! fails with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`. (`wip/capture-modes/probe.c`: of eleven
//! calls made on another thread during a capture, this is the only one a thread-local or relaxed
//! capture does not survive; a global-mode capture survives almost none, in any context of the
//! process.) graph-rt waits for a whole context where a copy or fill must
//! not race with any stream (`DeviceBuffer::to_vec`, `from_host`, …; the copy and its wait for
//! the legacy stream pass the gate with the wait), in
//! [`Context::synchronize`](super::Context::synchronize), and on the release thread (a foreign
//! owner's guard, a cuBLAS handle). So that another thread's capture, such as one rank's step in
//! thread-local mode, is not broken by them, such a wait first lets graph-rt's captures of the
//! context, and its global-mode captures of any context, on other threads end; and a capture does
//! not begin in a context while such a wait of it is under way (a global-mode one, while such a
//! wait of any context is). A wait made on a thread that is
//! capturing itself (in the context, or in a mode other than relaxed) goes to the driver at once:
//! the driver refuses it, and the capture cannot wait for itself. A capture another library began
//! is not seen.
//!
//! Host-only bookkeeping (keyed by the raw context), tested without a GPU.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::sync::{thread_local, Condvar, Mutex, MutexGuard};

use super::CaptureMode;
use crate::error::{Error, Result};

/// How long a whole-context wait, or a capture's start, waits for the other side before it
/// gives up with [`Error::Timeout`] (a capture that runs this long is waiting for something
/// else; a synchronization this long has a kernel that does not end). At process exit, the
/// exit hook's patience for captures instead.
pub(crate) fn patience() -> Duration {
    if super::lifetime::exiting() {
        super::lifetime::EXIT_CAPTURE_PATIENCE
    } else {
        Duration::from_secs(30)
    }
}

/// The key under which global-mode captures are counted as well: they forbid a whole-context
/// wait in every context of the process.
const GLOBAL: usize = usize::MAX;

/// graph-rt's captures and whole-context waits under way in one context (or [`GLOBAL`]).
struct Gate {
    ctx: usize,
    captures: usize,
    syncs: usize,
}

/// The gates with a capture or a wait under way (a handful: one per context).
#[cfg(not(loom))]
static GATES: Mutex<Vec<Gate>> = Mutex::new(Vec::new());
/// Signalled whenever a capture or a wait ends.
#[cfg(not(loom))]
static CHANGED: Condvar = Condvar::new();

#[cfg(loom)]
loom::lazy_static! {
    static ref GATES: Mutex<Vec<Gate>> = Mutex::new(Vec::new());
    static ref CHANGED: Condvar = Condvar::new();
}

thread_local! {
    /// This thread's captures under way: their context, and whether in relaxed mode (once per
    /// capture: captures may nest).
    static CAPTURING: RefCell<Vec<(usize, bool)>> = const { RefCell::new(Vec::new()) };
}

fn gate<'a>(gates: &'a mut MutexGuard<'_, Vec<Gate>>, ctx: usize) -> &'a mut Gate {
    if let Some(i) = gates.iter().position(|g| g.ctx == ctx) {
        return &mut gates[i];
    }
    gates.push(Gate {
        ctx,
        captures: 0,
        syncs: 0,
    });
    gates.last_mut().expect("just pushed")
}

/// Lowers one of the counts of the gates of `ctxs`, forgets the idle ones, wakes the waiters.
fn leave(ctxs: &[usize], capture: bool) {
    let mut gates = GATES.lock();
    for &ctx in ctxs {
        let g = gate(&mut gates, ctx);
        let count = if capture {
            &mut g.captures
        } else {
            &mut g.syncs
        };
        debug_assert!(*count > 0, "a gate left more often than entered");
        *count = count.saturating_sub(1);
    }
    gates.retain(|g| g.captures > 0 || g.syncs > 0);
    drop(gates);
    CHANGED.notify_all();
}

/// Whether a whole-context wait of `ctx` on this thread must go to the driver at once: this
/// thread captures in `ctx`, or in a mode that forbids its own waits anywhere.
fn this_thread_cannot_wait(ctx: usize) -> bool {
    CAPTURING
        .try_with(|c| c.borrow().iter().any(|&(x, relaxed)| x == ctx || !relaxed))
        .unwrap_or(false)
}

/// Whether this thread is capturing (in any context, any mode).
pub(crate) fn this_thread_captures() -> bool {
    CAPTURING
        .try_with(|c| !c.borrow().is_empty())
        .unwrap_or(false)
}

/// A capture of graph-rt under way in a context, on this thread; dropped when it has ended.
pub(crate) struct CaptureEntry {
    ctx: usize,
    global: bool,
    // Dropped on the thread that entered (the thread-local record is this thread's).
    _not_send: PhantomData<*const ()>,
}

impl Drop for CaptureEntry {
    fn drop(&mut self) {
        let _ = CAPTURING.try_with(|c| {
            let mut c = c.borrow_mut();
            if let Some(i) = c.iter().rposition(|&(x, _)| x == self.ctx) {
                c.remove(i);
            }
        });
        if self.global {
            leave(&[self.ctx, GLOBAL], true);
        } else {
            leave(&[self.ctx], true);
        }
    }
}

/// Waits, up to `patience`, until `busy` no longer holds of the gates, then counts this side in
/// (`enter`) under the same lock. Past the patience, how long it waited.
fn pass(
    patience: Duration,
    busy: impl Fn(&mut MutexGuard<'_, Vec<Gate>>) -> bool,
    enter: impl FnOnce(&mut MutexGuard<'_, Vec<Gate>>),
) -> std::result::Result<(), Duration> {
    let start = Instant::now();
    let mut gates = GATES.lock();
    while busy(&mut gates) {
        if CHANGED.wait_until(&mut gates, start + patience).timed_out() && busy(&mut gates) {
            gates.retain(|g| g.captures > 0 || g.syncs > 0);
            return Err(start.elapsed());
        }
    }
    enter(&mut gates);
    gates.retain(|g| g.captures > 0 || g.syncs > 0);
    Ok(())
}

/// Records a capture about to begin in context `ctx` (its raw handle), once no whole-context
/// wait of graph-rt is under way there, nor, for a global-mode capture, in any context (up to
/// `patience`; `call` names the capture's call in the timeout). A wait of this very thread
/// cannot be under way: it would be in the driver.
pub(crate) fn enter_capture(
    ctx: usize,
    mode: CaptureMode,
    call: &'static str,
    patience: Duration,
) -> Result<CaptureEntry> {
    let global = mode == CaptureMode::Global;
    pass(
        patience,
        // A global-mode capture breaks on a wait of any context, as a wait of any context
        // waits for it.
        |g| {
            if global {
                g.iter().any(|g| g.syncs > 0)
            } else {
                gate(g, ctx).syncs > 0
            }
        },
        |g| {
            gate(g, ctx).captures += 1;
            if global {
                gate(g, GLOBAL).captures += 1;
            }
        },
    )
    .map_err(|after| Error::Timeout {
        call,
        after,
        reason: "a wait for the whole context (cuCtxSynchronize) on another thread did not \
                 finish, and a capture cannot begin during it: a kernel of the context does not \
                 end"
        .into(),
    })?;
    let _ = CAPTURING.try_with(|c| c.borrow_mut().push((ctx, mode == CaptureMode::Relaxed)));
    Ok(CaptureEntry {
        ctx,
        global,
        _not_send: PhantomData,
    })
}

/// [`synchronize`] with the current [`patience`]: how graph-rt waits for a whole context.
pub(crate) fn whole_context_wait<R>(ctx: usize, wait: impl FnOnce() -> Result<R>) -> Result<R> {
    synchronize(ctx, patience(), wait)
}

/// A whole-context wait under way; dropped when it is done (also on a panic).
struct SyncEntry(usize);

impl Drop for SyncEntry {
    fn drop(&mut self) {
        leave(&[self.0], false);
    }
}

/// Runs `wait`, which waits for the whole context `ctx` (its raw handle) and may do what must
/// follow that wait before any capture begins, once graph-rt's captures of the context and its
/// global-mode captures on other threads have ended (up to `patience`, else [`Error::Timeout`]
/// and `wait` is not run); captures of the context wait for it to finish before they begin. On a
/// thread that cannot wait (see [`this_thread_cannot_wait`]), `wait` runs at once.
pub(crate) fn synchronize<R>(
    ctx: usize,
    patience: Duration,
    wait: impl FnOnce() -> Result<R>,
) -> Result<R> {
    if this_thread_cannot_wait(ctx) {
        return wait();
    }
    pass(
        patience,
        |g| gate(g, ctx).captures > 0 || gate(g, GLOBAL).captures > 0,
        |g| gate(g, ctx).syncs += 1,
    )
    .map_err(|after| Error::Timeout {
        call: "cuCtxSynchronize",
        after,
        reason: "a capture of this context by graph-rt (or a global-mode one of any context) on \
                 another thread did not end, and waiting for the whole context would break it \
                 (CUDA refuses cuCtxSynchronize while any stream of the context captures): make \
                 the call after the capture, or, beside a capture that is not global-mode, copy \
                 in the order of a stream of your own (DeviceBuffer::read_on, write_on)"
            .into(),
    })?;
    let _entry = SyncEntry(ctx);
    wait()
}

#[cfg(all(test, loom))]
mod loom_models;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    const SHORT: Duration = Duration::from_millis(100);
    const LONG: Duration = Duration::from_secs(30);

    fn captures_in(ctx: usize) -> bool {
        CAPTURING.with(|c| c.borrow().iter().any(|&(x, _)| x == ctx))
    }

    // Each test uses contexts of its own (the gates are process-wide).

    #[test]
    fn a_wait_lets_a_capture_on_another_thread_end_first() {
        let ctx = 0x1001;
        let ended = AtomicBool::new(false);
        let (entered, go) = mpsc::channel();
        std::thread::scope(|t| {
            t.spawn(|| {
                let entry = enter_capture(ctx, CaptureMode::ThreadLocal, "test", SHORT).unwrap();
                entered.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                ended.store(true, Ordering::SeqCst);
                drop(entry);
            });
            go.recv().unwrap();
            synchronize(ctx, LONG, || {
                assert!(ended.load(Ordering::SeqCst), "ran during the capture");
                Ok(())
            })
            .unwrap();
        });
        assert!(
            GATES.lock().iter().all(|g| g.ctx != ctx),
            "an idle gate stays"
        );
    }

    /// A capture of `capture` in `mode`, asked for while a wait of `wait` is under way on
    /// another thread, begins only once that wait has finished.
    fn begins_after_a_wait(wait: usize, capture: usize, mode: CaptureMode) {
        let done = AtomicBool::new(false);
        let (waiting, go) = mpsc::channel();
        std::thread::scope(|t| {
            t.spawn(|| {
                synchronize(wait, LONG, || {
                    waiting.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                    done.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            });
            go.recv().unwrap();
            let _entry = enter_capture(capture, mode, "test", LONG).unwrap();
            assert!(done.load(Ordering::SeqCst), "began during the wait");
        });
    }

    #[test]
    fn a_capture_begins_once_a_wait_under_way_has_finished() {
        begins_after_a_wait(0x1002, 0x1002, CaptureMode::ThreadLocal);
    }

    #[test]
    fn a_global_capture_begins_once_a_wait_of_another_context_has_finished() {
        begins_after_a_wait(0x100c, 0x100b, CaptureMode::Global);
    }

    #[test]
    fn a_wait_on_the_capturing_thread_goes_to_the_driver_at_once() {
        let ctx = 0x1003;
        let outer = enter_capture(ctx, CaptureMode::ThreadLocal, "test", SHORT).unwrap();
        let inner = enter_capture(ctx, CaptureMode::ThreadLocal, "test", SHORT).unwrap();
        let mut ran = false;
        synchronize(ctx, SHORT, || {
            ran = true;
            Ok(())
        })
        .unwrap();
        assert!(ran);
        drop(inner);
        // Still capturing (the outer capture): still at once.
        synchronize(ctx, Duration::ZERO, || Ok(())).unwrap();
        drop(outer);
        assert!(!captures_in(ctx));
    }

    /// Runs `body` while another thread holds a capture of `ctx`.
    fn while_another_thread_captures(ctx: usize, mode: CaptureMode, body: impl FnOnce()) {
        let (entered, go) = mpsc::channel();
        let (release, hold) = mpsc::channel::<()>();
        std::thread::scope(|t| {
            t.spawn(move || {
                let _entry = enter_capture(ctx, mode, "test", SHORT).unwrap();
                entered.send(()).unwrap();
                let _ = hold.recv();
            });
            go.recv().unwrap();
            body();
            release.send(()).unwrap();
        });
    }

    #[test]
    fn a_capture_that_does_not_end_times_the_wait_out_without_running_it() {
        let ctx = 0x1004;
        while_another_thread_captures(ctx, CaptureMode::ThreadLocal, || {
            let e = synchronize(ctx, SHORT, || -> Result<()> {
                panic!("ran during the capture")
            })
            .unwrap_err();
            assert!(
                matches!(e, Error::Timeout { call: "cuCtxSynchronize", after, .. } if after >= SHORT),
                "{e}"
            );
        });
        synchronize(ctx, SHORT, || Ok(())).unwrap();
    }

    #[test]
    fn a_wait_that_does_not_finish_times_a_capture_out() {
        let ctx = 0x1005;
        let (waiting, go) = mpsc::channel();
        let (release, hold) = mpsc::channel::<()>();
        std::thread::scope(|t| {
            t.spawn(move || {
                synchronize(ctx, SHORT, || {
                    waiting.send(()).unwrap();
                    let _ = hold.recv();
                    Ok(())
                })
                .unwrap();
            });
            go.recv().unwrap();
            let e = enter_capture(ctx, CaptureMode::ThreadLocal, "cuStreamBeginCapture", SHORT)
                .err()
                .unwrap();
            assert!(
                matches!(
                    e,
                    Error::Timeout {
                        call: "cuStreamBeginCapture",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(!captures_in(ctx));
            release.send(()).unwrap();
        });
        assert!(
            GATES.lock().iter().all(|g| g.ctx != ctx),
            "an idle gate stays"
        );
    }

    #[test]
    fn other_contexts_do_not_wait_unless_the_capture_is_global_mode() {
        let (a, b) = (0x1006, 0x1007);
        for mode in [CaptureMode::ThreadLocal, CaptureMode::Relaxed] {
            while_another_thread_captures(a, mode, || {
                synchronize(b, Duration::ZERO, || Ok(())).unwrap();
            });
        }
        while_another_thread_captures(a, CaptureMode::Global, || {
            let e = synchronize(b, SHORT, || -> Result<()> {
                panic!("ran during a global capture")
            })
            .unwrap_err();
            assert!(matches!(e, Error::Timeout { .. }), "{e}");
        });
        synchronize(b, Duration::ZERO, || Ok(())).unwrap();
        assert!(GATES.lock().iter().all(|g| g.ctx != a && g.ctx != GLOBAL));
    }

    #[test]
    fn a_relaxed_capture_waits_for_other_contexts_others_go_to_the_driver() {
        let (a, b) = (0x1009, 0x100a);
        let relaxed = enter_capture(a, CaptureMode::Relaxed, "test", SHORT).unwrap();
        // Its own context: at once (the driver refuses it).
        synchronize(a, Duration::ZERO, || Ok(())).unwrap();
        // Another context: through the gate, which is open.
        synchronize(b, Duration::ZERO, || Ok(())).unwrap();
        drop(relaxed);
        let local = enter_capture(a, CaptureMode::ThreadLocal, "test", SHORT).unwrap();
        let mut ran = false;
        synchronize(b, Duration::ZERO, || {
            ran = true;
            Ok(())
        })
        .unwrap();
        assert!(ran);
        drop(local);
        assert!(!this_thread_captures());
    }

    #[test]
    fn a_panicking_wait_leaves_the_gate_open() {
        let ctx = 0x1008;
        let r = std::panic::catch_unwind(|| {
            synchronize(ctx, SHORT, || -> Result<()> { panic!("in the wait") })
        });
        assert!(r.is_err());
        let _entry = enter_capture(ctx, CaptureMode::ThreadLocal, "test", Duration::ZERO).unwrap();
    }
}
