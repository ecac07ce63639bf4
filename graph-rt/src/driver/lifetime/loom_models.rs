//! Loom models of the tracker: the library's own `retire`, `poll` and `teardown` on loom's
//! primitives (`driver/sync.rs`), with fake points (flags) and no context, every interleaving of
//! a parking thread, pollers and the tearing-down thread. The tracker's release thread is not
//! modelled (it backs off on a clock and polls points that signal nothing): a poller runs the
//! same release round. Each batch checks, as it is dropped, that its point has passed, and
//! counts its releases: exactly one by the end.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

use super::point::Point;
use super::{Parked, Tracker};

/// A parked batch: released only once its point has passed, and counted.
struct Batch {
    point: Arc<AtomicBool>,
    released: Arc<AtomicUsize>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        assert!(
            self.point.load(Ordering::Acquire),
            "released before its point passed"
        );
        self.released.fetch_add(1, Ordering::AcqRel);
    }
}

/// A point not passed yet, and the count of releases of what is parked behind it.
struct Parking {
    point: Arc<AtomicBool>,
    released: Arc<AtomicUsize>,
}

impl Parking {
    fn new() -> Self {
        Self {
            point: Arc::new(AtomicBool::new(false)),
            released: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn park_on(&self, q: &Tracker) {
        let batch: Parked = Box::new(Batch {
            point: self.point.clone(),
            released: self.released.clone(),
        });
        q.retire(Point::Fake(self.point.clone()), vec![batch]);
    }

    fn pass(&self) {
        self.point.store(true, Ordering::Release);
    }

    fn releases(&self) -> usize {
        self.released.load(Ordering::Acquire)
    }
}

/// A queue of no context with its release thread counted as started but not running: only
/// the calls of the model release.
fn quiet_queue() -> Arc<Tracker> {
    let q = Tracker::new(std::ptr::null_mut());
    q.shared.state.lock().started = true;
    Arc::new(q)
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

#[test]
fn loom_a_batch_parked_while_a_poller_passes_its_point_is_released_once() {
    model(|| {
        let q = quiet_queue();
        let p = Arc::new(Parking::new());
        let (q1, p1) = (q.clone(), p.clone());
        let parker = thread::spawn(move || p1.park_on(&q1));
        let (q2, p2) = (q.clone(), p.clone());
        let poller = thread::spawn(move || {
            p2.pass();
            q2.poll();
        });
        q.poll();
        parker.join().unwrap();
        poller.join().unwrap();
        // What no poll took, teardown does.
        q.teardown();
        assert_eq!(p.releases(), 1);
        assert_eq!(q.parked(), 0);
    });
}

#[test]
fn loom_two_pollers_release_each_batch_once_after_its_point() {
    model(|| {
        let q = quiet_queue();
        let (a, b) = (Arc::new(Parking::new()), Arc::new(Parking::new()));
        a.park_on(&q);
        b.park_on(&q);
        let (qa, pa) = (q.clone(), a.clone());
        let ta = thread::spawn(move || {
            pa.pass();
            qa.poll();
        });
        let (qb, pb) = (q.clone(), b.clone());
        let tb = thread::spawn(move || {
            pb.pass();
            qb.poll();
        });
        ta.join().unwrap();
        tb.join().unwrap();
        // A poll that finds the other one releasing releases nothing: teardown takes the rest.
        q.teardown();
        assert_eq!(q.parked(), 0);
        assert_eq!((a.releases(), b.releases()), (1, 1));
    });
}

#[test]
fn loom_teardown_racing_a_park_releases_it_once() {
    model(|| {
        let q = quiet_queue();
        let p = Arc::new(Parking::new());
        let (q1, p1) = (q.clone(), p.clone());
        // Parked before the queue closes (teardown releases it) or after (released in place).
        let parker = thread::spawn(move || p1.park_on(&q1));
        let p2 = p.clone();
        let passer = thread::spawn(move || p2.pass());
        q.teardown();
        parker.join().unwrap();
        passer.join().unwrap();
        assert_eq!(p.releases(), 1);
        assert_eq!(q.parked(), 0);
    });
}
