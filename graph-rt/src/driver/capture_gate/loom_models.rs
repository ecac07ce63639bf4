//! Loom models of the gate: the library's own `enter_capture` and `synchronize` on loom's
//! primitives (`driver/sync.rs`), every interleaving of two or three threads. A capture's
//! section and a wait's touch one `UnsafeCell`: loom fails the model if the two can ever run
//! without one happening before the other, and on any deadlock.

use std::time::Duration;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use super::{enter_capture, synchronize, this_thread_captures, CaptureMode, GATES};

// Loom has no clock: the gate's timed waits wait untimed (see `driver/sync.rs`).
const PATIENCE: Duration = Duration::from_secs(30);

/// What a capture and a wait must never touch at the same time.
#[derive(Clone)]
struct Section(Arc<UnsafeCell<u32>>);

impl Section {
    fn new() -> Self {
        Self(Arc::new(UnsafeCell::new(0)))
    }

    fn enter(&self) {
        // SAFETY: loom checks the claim under test, that no other access is concurrent.
        self.0.with_mut(|n| unsafe { *n += 1 });
    }

    fn count(&self) -> u32 {
        // SAFETY: as in `enter`.
        self.0.with(|n| unsafe { *n })
    }
}

fn capture(ctx: usize, mode: CaptureMode, section: &Section) {
    let entry = enter_capture(ctx, mode, "model", PATIENCE).unwrap();
    section.enter();
    drop(entry);
}

fn wait(ctx: usize, section: &Section) {
    synchronize(ctx, PATIENCE, || {
        section.enter();
        Ok(())
    })
    .unwrap();
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

#[test]
fn loom_a_capture_and_a_wait_of_one_context_never_overlap() {
    model(|| {
        let section = Section::new();
        let s = section.clone();
        let t = thread::spawn(move || capture(1, CaptureMode::ThreadLocal, &s));
        wait(1, &section);
        t.join().unwrap();
        assert_eq!(section.count(), 2);
        assert!(GATES.lock().is_empty(), "an idle gate stays");
    });
}

#[test]
fn loom_two_waits_and_a_capture_of_one_context_never_overlap() {
    model(|| {
        // The two waits may overlap: each shares a section with the capture alone.
        let (a, b) = (Section::new(), Section::new());
        let (a1, b1, b2) = (a.clone(), b.clone(), b.clone());
        let t1 = thread::spawn(move || {
            let entry = enter_capture(1, CaptureMode::Relaxed, "model", PATIENCE).unwrap();
            a1.enter();
            b1.enter();
            drop(entry);
        });
        let t2 = thread::spawn(move || wait(1, &b2));
        wait(1, &a);
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!((a.count(), b.count()), (2, 2));
        assert!(GATES.lock().is_empty(), "an idle gate stays");
    });
}

/// Either way round: the wait of the other context may be under way when the capture begins.
#[test]
fn loom_a_global_capture_excludes_waits_of_every_context() {
    model(|| {
        let section = Section::new();
        let s = section.clone();
        let t = thread::spawn(move || capture(1, CaptureMode::Global, &s));
        wait(2, &section);
        t.join().unwrap();
        assert!(GATES.lock().is_empty(), "an idle gate stays");
    });
}

/// A thread-local capture does not hold up a wait of another context: the capture holds on
/// until that wait has run, which would deadlock if the gate made the wait wait for it.
#[test]
fn loom_a_thread_local_capture_lets_waits_of_other_contexts_run() {
    model(|| {
        let waited = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let w = waited.clone();
        let t = thread::spawn(move || {
            let entry = enter_capture(1, CaptureMode::ThreadLocal, "model", PATIENCE).unwrap();
            while !w.load(loom::sync::atomic::Ordering::Acquire) {
                thread::yield_now();
            }
            drop(entry);
        });
        synchronize(2, PATIENCE, || {
            waited.store(true, loom::sync::atomic::Ordering::Release);
            Ok(())
        })
        .unwrap();
        t.join().unwrap();
        assert!(GATES.lock().is_empty(), "an idle gate stays");
    });
}

/// A wait on the capturing thread goes to the driver at once (it cannot wait for its own
/// capture), while a wait on another thread still waits for that capture.
#[test]
fn loom_a_wait_on_the_capturing_thread_bypasses_the_gate_others_do_not() {
    model(|| {
        let section = Section::new();
        let s = section.clone();
        let t = thread::spawn(move || {
            let entry = enter_capture(1, CaptureMode::ThreadLocal, "model", PATIENCE).unwrap();
            // Would deadlock if it waited for its own capture.
            synchronize(1, PATIENCE, || {
                s.enter();
                Ok(())
            })
            .unwrap();
            drop(entry);
            assert!(!this_thread_captures());
        });
        wait(1, &section);
        t.join().unwrap();
        assert_eq!(section.count(), 2);
        assert!(GATES.lock().is_empty(), "an idle gate stays");
    });
}
