//! The gate between graph-rt's stream captures and its waits for a whole context
//! (`cuCtxSynchronize`).
//!
//! CUDA refuses `cuCtxSynchronize` while any stream of the context captures, in every capture
//! mode (thread-local and relaxed included), and the refusal breaks that capture: its end then
//! fails with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`. (`wip/capture-modes/probe.c`, H100, driver
//! 580: of eleven calls made on another thread during a capture, this is the only one a
//! thread-local or relaxed capture does not survive.) graph-rt waits for a whole context where a
//! copy or fill must not race with any stream (`DeviceBuffer::to_vec`, `from_host`, …), in
//! [`Context::synchronize`](super::Context::synchronize) and on the release thread; so that
//! another thread's capture of the context, such as one rank's step in thread-local mode, is not
//! broken by them, such a wait first lets graph-rt's captures of the context on other threads
//! end, and a capture does not begin while such a wait is under way. A wait made on the thread
//! that is capturing goes to the driver at once (which refuses it: the capture cannot wait for
//! itself). A capture another library began is not seen.
//!
//! Host-only bookkeeping (keyed by the raw context), tested without a GPU.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// How long a whole-context wait, or a capture's start, waits for the other side before it
/// gives up with [`Error::Timeout`] (a capture that runs this long is waiting for something
/// else; a synchronization this long has a kernel that does not end).
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// graph-rt's captures and whole-context waits under way in one context.
struct Gate {
    ctx: usize,
    captures: usize,
    syncs: usize,
}

/// The gates of contexts with a capture or a wait under way (a handful: one per context).
static GATES: Mutex<Vec<Gate>> = Mutex::new(Vec::new());
/// Signalled whenever a capture or a wait ends.
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// The contexts this thread is capturing in (once per capture: captures may nest).
    static CAPTURING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
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

/// Lowers one of the counts of `ctx`'s gate, forgets an idle gate, and wakes the waiters.
fn leave(ctx: usize, capture: bool) {
    let mut gates = GATES.lock();
    if let Some(i) = gates.iter().position(|g| g.ctx == ctx) {
        let g = &mut gates[i];
        let count = if capture {
            &mut g.captures
        } else {
            &mut g.syncs
        };
        *count = count.saturating_sub(1);
        if g.captures == 0 && g.syncs == 0 {
            gates.swap_remove(i);
        }
    }
    drop(gates);
    CHANGED.notify_all();
}

fn this_thread_captures(ctx: usize) -> bool {
    CAPTURING
        .try_with(|c| c.borrow().contains(&ctx))
        .unwrap_or(false)
}

/// A capture of graph-rt under way in a context, on this thread; dropped when it has ended.
pub(crate) struct CaptureEntry {
    ctx: usize,
    // Dropped on the thread that entered (the thread-local record is this thread's).
    _not_send: PhantomData<*const ()>,
}

impl Drop for CaptureEntry {
    fn drop(&mut self) {
        let _ = CAPTURING.try_with(|c| {
            let mut c = c.borrow_mut();
            if let Some(i) = c.iter().rposition(|&x| x == self.ctx) {
                c.remove(i);
            }
        });
        leave(self.ctx, true);
    }
}

/// Waits, up to `patience`, until the other side no longer holds `ctx`'s gate (`busy`), then
/// counts this side in (`enter`) under the same lock. Past the patience, how long it waited.
fn pass(
    ctx: usize,
    patience: Duration,
    busy: fn(&Gate) -> bool,
    enter: fn(&mut Gate),
) -> std::result::Result<(), Duration> {
    let start = Instant::now();
    let mut gates = GATES.lock();
    while busy(gate(&mut gates, ctx)) {
        if CHANGED.wait_until(&mut gates, start + patience).timed_out()
            && busy(gate(&mut gates, ctx))
        {
            return Err(start.elapsed());
        }
    }
    enter(gate(&mut gates, ctx));
    Ok(())
}

/// Records a capture about to begin in context `ctx` (its raw handle), once no whole-context
/// wait of graph-rt is under way there (up to `patience`; `call` names the capture's call in the
/// timeout). A wait of this very thread cannot be under way: it would be in the driver.
pub(crate) fn enter_capture(
    ctx: usize,
    call: &'static str,
    patience: Duration,
) -> Result<CaptureEntry> {
    pass(ctx, patience, |g| g.syncs > 0, |g| g.captures += 1).map_err(|after| Error::Timeout {
        call,
        after,
        reason: "a wait for the whole context (cuCtxSynchronize) on another thread did not \
                     finish, and a capture cannot begin during it: a kernel of the context does \
                     not end"
            .into(),
    })?;
    let _ = CAPTURING.try_with(|c| c.borrow_mut().push(ctx));
    Ok(CaptureEntry {
        ctx,
        _not_send: PhantomData,
    })
}

/// A whole-context wait under way; dropped when it is done (also on a panic).
struct SyncEntry(usize);

impl Drop for SyncEntry {
    fn drop(&mut self) {
        leave(self.0, false);
    }
}

/// Runs `sync`, a wait for the whole context `ctx` (its raw handle), once graph-rt's captures of
/// the context on other threads have ended (up to `patience`, else [`Error::Timeout`] and `sync`
/// is not run); captures of the context wait for it to finish before they begin. On a thread
/// that captures in the context itself, `sync` runs at once.
pub(crate) fn synchronize(
    ctx: usize,
    patience: Duration,
    sync: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if this_thread_captures(ctx) {
        return sync();
    }
    pass(ctx, patience, |g| g.captures > 0, |g| g.syncs += 1).map_err(|after| Error::Timeout {
        call: "cuCtxSynchronize",
        after,
        reason: "a capture of this context by graph-rt on another thread did not end, and \
                     waiting for the whole context would break it (CUDA refuses \
                     cuCtxSynchronize while any stream of the context captures): make the call \
                     after the capture, or copy in the order of a stream of your own \
                     (DeviceBuffer::read_on, write_on)"
            .into(),
    })?;
    let _entry = SyncEntry(ctx);
    sync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    const SHORT: Duration = Duration::from_millis(100);

    // Each test uses contexts of its own (the gates are process-wide).

    #[test]
    fn a_wait_lets_a_capture_on_another_thread_end_first() {
        let ctx = 0x1001;
        let ended = AtomicBool::new(false);
        let (entered, go) = mpsc::channel();
        std::thread::scope(|t| {
            t.spawn(|| {
                let entry = enter_capture(ctx, "test", SHORT).unwrap();
                entered.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                ended.store(true, Ordering::SeqCst);
                drop(entry);
            });
            go.recv().unwrap();
            synchronize(ctx, PATIENCE, || {
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

    #[test]
    fn a_capture_begins_once_a_wait_under_way_has_finished() {
        let ctx = 0x1002;
        let done = AtomicBool::new(false);
        let (waiting, go) = mpsc::channel();
        std::thread::scope(|t| {
            t.spawn(|| {
                synchronize(ctx, PATIENCE, || {
                    waiting.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                    done.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            });
            go.recv().unwrap();
            let _entry = enter_capture(ctx, "test", PATIENCE).unwrap();
            assert!(done.load(Ordering::SeqCst), "began during the wait");
        });
    }

    #[test]
    fn a_wait_on_the_capturing_thread_goes_to_the_driver_at_once() {
        let ctx = 0x1003;
        let outer = enter_capture(ctx, "test", SHORT).unwrap();
        let inner = enter_capture(ctx, "test", SHORT).unwrap();
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
        assert!(!this_thread_captures(ctx));
    }

    /// Runs `body` while another thread holds a capture of `ctx`.
    fn while_another_thread_captures(ctx: usize, body: impl FnOnce()) {
        let (entered, go) = mpsc::channel();
        let (release, hold) = mpsc::channel::<()>();
        std::thread::scope(|t| {
            t.spawn(move || {
                let _entry = enter_capture(ctx, "test", SHORT).unwrap();
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
        while_another_thread_captures(ctx, || {
            let e = synchronize(ctx, SHORT, || panic!("ran during the capture")).unwrap_err();
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
            let e = enter_capture(ctx, "cuStreamBeginCapture", SHORT)
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
            assert!(!this_thread_captures(ctx));
            release.send(()).unwrap();
        });
        assert!(
            GATES.lock().iter().all(|g| g.ctx != ctx),
            "an idle gate stays"
        );
    }

    #[test]
    fn other_contexts_do_not_wait() {
        let (a, b) = (0x1006, 0x1007);
        while_another_thread_captures(a, || {
            synchronize(b, Duration::ZERO, || Ok(())).unwrap();
        });
    }

    #[test]
    fn a_panicking_wait_leaves_the_gate_open() {
        let ctx = 0x1008;
        let r = std::panic::catch_unwind(|| synchronize(ctx, SHORT, || panic!("in the wait")));
        assert!(r.is_err());
        let _entry = enter_capture(ctx, "test", Duration::ZERO).unwrap();
    }
}
