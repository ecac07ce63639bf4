//! The release thread of a context's queue: it releases each parked batch as soon as its point
//! has passed, backing off up to a millisecond while none has, sleeps while nothing is parked,
//! serves reclaims (an allocation out of memory), and at exit releases everything left.

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::lock::Exclusive;
use super::point::Point;
use super::{exit, Entry, Shared};
use crate::driver::sync::{thread_local, MutexGuard};

/// The release thread's shortest and longest pause between polls while nothing has passed.
const BACKOFF: (Duration, Duration) = (Duration::from_micros(20), Duration::from_millis(1));
/// How long a reclaim waits for the batches other threads are releasing (`poll`,
/// `synchronize`) to be released, past its own points.
pub(super) const RECLAIM_PATIENCE: Duration = Duration::from_secs(1);
/// How long a reclaim waits for the device to finish the work what is parked waits for: an
/// allocation out of memory gives up then ([`Error::Timeout`](crate::Error::Timeout)) rather
/// than wait for a kernel that may never end (a collective whose peer died).
pub(crate) const DEVICE_PATIENCE: Duration = Duration::from_secs(30);

thread_local! {
    /// The queue this thread is the release thread of (its address; 0 on other threads): a
    /// release thread must not wait for its own releases.
    static RELEASE_THREAD: Cell<usize> = const { Cell::new(0) };
}

pub(crate) fn on_release_thread() -> bool {
    RELEASE_THREAD.try_with(Cell::get).unwrap_or(0) != 0
}

/// Whether this thread is the release thread of `shared`.
pub(super) fn is_release_thread_of(shared: &Shared) -> bool {
    RELEASE_THREAD.try_with(Cell::get).unwrap_or(0) == shared as *const Shared as usize
}

/// The points to wait for before releasing what was parked before `mark` (a reclaim).
fn waits_before(entries: &VecDeque<Entry>, mark: u64) -> Vec<Point> {
    entries
        .iter()
        .filter(|e| e.seq < mark)
        .filter_map(|e| e.point.waitable())
        .collect()
}

/// Marks the thread's end, however it ends.
struct Stopped<'a>(&'a Shared);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.state.lock().running = false;
        self.0.changed.notify_all();
    }
}

pub(super) fn release_thread(shared: &Shared) {
    let _ = RELEASE_THREAD.try_with(|t| t.set(shared as *const Shared as usize));
    let _stopped = Stopped(shared);
    shared.relax_capture_interaction();
    let exit = release_until_closed(shared);
    // The process exits: everything left is released here, not on the exiting thread.
    if let Some(deadline) = exit {
        shared.release_everything(exit::CAPTURE_PATIENCE, Some(deadline));
    }
}

/// The release thread's work until the queue is closed. Returns the deadline for the device at
/// exit, if the queue was closed for the process's exit.
fn release_until_closed(shared: &Shared) -> Option<Instant> {
    let mut backoff = BACKOFF.0;
    // The reclaim waiting for other threads' releases, and until when it waits for them.
    let mut others: Option<(u64, Instant)> = None;
    let mut state = shared.state.lock();
    while !state.closed {
        let drain = (state.drained < state.drain_ticket).then_some(state.drain_ticket);
        let mut released = 0;
        if !state.entries.is_empty() {
            let waits = match drain {
                Some(_) => waits_before(&state.entries, state.drain_mark),
                None => Vec::new(),
            };
            let round = MutexGuard::unlocked(&mut state, || {
                shared.make_current();
                // A reclaim: wait for the device first, without the capture lock (holding it
                // would keep graph-rt's global-mode captures, and other contexts' releases,
                // waiting for the device too).
                let deadline = Instant::now() + DEVICE_PATIENCE;
                for mut point in waits {
                    if !point.wait_until(deadline) {
                        break;
                    }
                }
                // Waits for graph-rt's global-mode captures to end, checking for closing
                // meanwhile (the context may be torn down by a thread that captures).
                let _no_capture = Exclusive::take(Duration::from_millis(1))?;
                Some(shared.release_round(None))
            });
            let Some(round) = round else {
                continue;
            };
            released = round;
        } else if drain.is_none() {
            shared.changed.wait(&mut state);
            continue;
        }
        if let Some(ticket) = drain {
            // Batches other threads are releasing (`poll`, `synchronize`) were parked before
            // the reclaim too: it waits for them, and for what they park in turn, for a while.
            if state.in_progress > 0 {
                let until = match others {
                    Some((t, until)) if t == ticket => until,
                    _ => {
                        let until = Instant::now() + RECLAIM_PATIENCE;
                        others = Some((ticket, until));
                        until
                    }
                };
                if Instant::now() < until {
                    shared.changed.wait_until(&mut state, until);
                    continue;
                }
            }
            state.drained = ticket;
            shared.changed.notify_all();
        }
        if released > 0 {
            backoff = BACKOFF.0;
        } else if drain.is_none() && !state.closed {
            shared.changed.wait_for(&mut state, backoff);
            backoff = (backoff * 2).min(BACKOFF.1);
        }
    }
    state.exit_deadline
}
