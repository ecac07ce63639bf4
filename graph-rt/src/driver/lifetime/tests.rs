//! CPU tests of the queue's logic, with fake points (flags) and no context: release order,
//! the release thread working on its own, reclaims, teardown (also by the release thread,
//! dropping the last holder of its own queue, as a context's last parked batch does) and exit
//! (released by the release thread, or a thread started for it, never by the exiting thread),
//! with several queues at once (points waited for without the capture lock).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use graph_rt_sys::CUresult;
use parking_lot::Mutex;

use super::lock::CAPTURE_LOCK;
use super::point::{event_passed, Point};
use super::{capture_lock, Parked, Reclaim, Tracker};

/// The tests share [`CAPTURE_LOCK`] (some hold it, as a capture would): one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// What was released, in order.
type Log = Arc<Mutex<Vec<u32>>>;

/// Logs its number when dropped (released).
struct Item(u32, Log);

impl Drop for Item {
    fn drop(&mut self) {
        self.1.lock().push(self.0);
    }
}

/// A fake point, passed once set.
fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

fn park(queue: &Tracker, point: &Arc<AtomicBool>, item: impl std::any::Any + Send) {
    let parked: Vec<Parked> = vec![Box::new(item)];
    queue.retire(Point::Fake(point.clone()), parked);
}

/// A queue of no context (its driver calls are skipped), with its thread not started.
fn quiet_queue() -> Tracker {
    let q = Tracker::new(std::ptr::null_mut());
    // Counted as started without a thread: only the calls under test release.
    q.shared.state.lock().started = true;
    q
}

/// Sets `points`, in order, from another thread after 30 ms (while the caller waits on them).
fn pass_later(points: &[&Arc<AtomicBool>]) -> std::thread::JoinHandle<()> {
    let points: Vec<Arc<AtomicBool>> = points.iter().map(|f| Arc::clone(f)).collect();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        for f in points {
            f.store(true, Ordering::Release);
        }
    })
}

/// Waits up to 2 s for `done`.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !done() {
        assert!(Instant::now() < deadline, "not within 2 s: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn poll_releases_what_passed_and_keeps_the_rest_in_order() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let points: Vec<_> = (0..4).map(|_| flag()).collect();
    for (i, f) in points.iter().enumerate() {
        park(&q, f, Item(i as u32, log.clone()));
    }
    points[2].store(true, Ordering::Release);
    points[0].store(true, Ordering::Release);
    assert_eq!(q.poll(), 2);
    assert_eq!(*log.lock(), [0, 2]);
    points[3].store(true, Ordering::Release);
    points[1].store(true, Ordering::Release);
    assert_eq!(q.poll(), 0);
    assert_eq!(*log.lock(), [0, 2, 1, 3]);
}

#[test]
fn synchronized_releases_what_was_parked_before_its_mark() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let (before, after) = (flag(), flag());
    park(&q, &before, Item(0, log.clone()));
    let mark = q.mark();
    park(&q, &after, Item(1, log.clone()));
    // Neither point passed: the context was idle at the mark, so the first batch may go.
    assert_eq!(q.synchronized(mark), 1);
    assert_eq!(*log.lock(), [0]);
    after.store(true, Ordering::Release);
    assert_eq!(q.poll(), 0);
}

#[test]
fn nothing_is_released_while_a_global_capture_runs() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let f = flag();
    f.store(true, Ordering::Release);
    park(&q, &f, Item(0, log.clone()));
    let capture = capture_lock();
    assert_eq!(q.poll(), 1);
    assert_eq!(
        q.reclaim(),
        Reclaim::Nothing,
        "a reclaim during a capture must not wait"
    );
    drop(capture);
    assert_eq!(q.poll(), 0);
    assert_eq!(*log.lock(), [0]);
}

/// A parked batch whose release parks again (an exec's buffers), released in the same round.
struct Reparks(Arc<Tracker>, Log);

impl Drop for Reparks {
    fn drop(&mut self) {
        self.0.release_later(Box::new(Item(7, self.1.clone())));
    }
}

#[test]
fn the_release_thread_releases_as_fences_pass_without_any_call() {
    let _serial = SERIAL.lock();
    let q = Arc::new(Tracker::new(std::ptr::null_mut()));
    let log = Log::default();
    let (a, b) = (flag(), flag());
    park(&q, &a, Reparks(q.clone(), log.clone()));
    park(&q, &b, Item(1, log.clone()));
    assert!(
        q.shared.state.lock().running,
        "the first park starts the thread"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(log.lock().is_empty(), "released before its point passed");
    b.store(true, Ordering::Release);
    eventually("the passed batch released", || *log.lock() == [1]);
    a.store(true, Ordering::Release);
    eventually("the other and what it parked released", || {
        *log.lock() == [1, 7] && q.parked() == 0
    });
    // `Reparks` held the queue; it is gone, so this is the last holder.
    let watch = q.watch();
    drop(Arc::into_inner(q).expect("nothing else holds the queue"));
    eventually("the thread stopped", || watch.is_gone());
}

/// A panic in a parked drop neither kills the thread nor loses the batches after it.
struct Panics;

impl Drop for Panics {
    fn drop(&mut self) {
        panic!("a parked drop that panics (on purpose)");
    }
}

#[test]
fn a_panicking_release_leaves_the_thread_running() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    let log = Log::default();
    let f = flag();
    park(&q, &f, Panics);
    park(&q, &f, Item(0, log.clone()));
    f.store(true, Ordering::Release);
    eventually("released past the panic", || *log.lock() == [0]);
    assert!(q.shared.state.lock().running);
    q.release_later(Box::new(Item(1, log.clone())));
    eventually("the thread still releases", || *log.lock() == [0, 1]);
}

#[test]
fn a_reclaim_waits_for_the_fences_of_what_is_parked() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    assert_eq!(
        q.reclaim(),
        Reclaim::Nothing,
        "nothing parked: nothing to retry for"
    );
    let log = Log::default();
    let points: Vec<_> = (0..3).map(|_| flag()).collect();
    for (i, f) in points.iter().enumerate() {
        park(&q, f, Item(i as u32, log.clone()));
    }
    let setter = {
        let points = points.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            // The release thread waits for the points without the capture lock.
            let free = !CAPTURE_LOCK.is_locked();
            for f in points.iter().rev() {
                f.store(true, Ordering::Release);
            }
            free
        })
    };
    assert_eq!(q.reclaim(), Reclaim::Released);
    assert_eq!(q.parked(), 0, "the reclaim returned before the release");
    assert_eq!(log.lock().len(), 3);
    assert_eq!(q.reclaims(), 1);
    assert!(
        setter.join().unwrap(),
        "the capture lock was held while waiting for the points"
    );
}

#[test]
fn a_reclaim_for_work_that_never_ends_gives_up_at_its_deadline() {
    let _serial = SERIAL.lock();
    let q = Arc::new(Tracker::new(std::ptr::null_mut()));
    q.start();
    let log = Log::default();
    let never = flag();
    park(&q, &never, Item(0, log.clone()));
    let started = Instant::now();
    assert_eq!(
        q.reclaim_within(Duration::from_millis(50)),
        Reclaim::TimedOut(Duration::from_millis(50))
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(log.lock().is_empty(), "released before its point passed");
    // The point passes later: the batch goes then.
    never.store(true, Ordering::Release);
    eventually("released once its point passed", || *log.lock() == [0]);
}

#[test]
fn a_reclaim_waits_for_batches_another_thread_is_releasing() {
    let _serial = SERIAL.lock();
    let q = Arc::new(Tracker::new(std::ptr::null_mut()));
    q.start();
    // A batch taken by a `poll` on another thread, being released there.
    q.shared.state.lock().in_progress += 1;
    let reclaim = {
        let q = q.clone();
        std::thread::spawn(move || q.reclaim())
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !reclaim.is_finished(),
        "the reclaim returned while a batch was still being released"
    );
    // That release parks something again, and ends.
    let log = Log::default();
    let f = flag();
    f.store(true, Ordering::Release);
    park(&q, &f, Item(7, log.clone()));
    q.shared.state.lock().in_progress -= 1;
    q.shared.changed.notify_all();
    assert_eq!(reclaim.join().unwrap(), Reclaim::Released);
    assert_eq!(
        *log.lock(),
        [7],
        "what the release parked again was not released"
    );
    assert_eq!(q.parked(), 0);
}

/// Holds the queue, as a parked batch holds its context (whose teardown tears the queue down).
struct Owner(Tracker);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.teardown();
    }
}

struct HoldsOwner {
    _owner: Arc<Owner>,
    log: Log,
}

impl Drop for HoldsOwner {
    fn drop(&mut self) {
        self.log.lock().push(9);
    }
}

#[test]
fn the_last_parked_holder_tears_the_queue_down_on_its_release_thread() {
    let _serial = SERIAL.lock();
    let owner = Arc::new(Owner(Tracker::new(std::ptr::null_mut())));
    let log = Log::default();
    let (f, later) = (flag(), flag());
    let holder = HoldsOwner {
        _owner: owner.clone(),
        log: log.clone(),
    };
    park(&owner.0, &f, holder);
    // Parked without a holder: left for the teardown, which waits for its point.
    park(&owner.0, &later, Item(3, log.clone()));
    let watch = owner.0.watch();
    drop(owner);
    assert!(!watch.is_gone(), "the parked batch keeps the queue");
    let setter = pass_later(&[&later]);
    f.store(true, Ordering::Release);
    eventually("the queue and its thread gone", || watch.is_gone());
    assert_eq!(*log.lock(), [9, 3]);
    setter.join().unwrap();
}

#[test]
fn teardown_stops_the_thread_and_releases_everything() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    let log = Log::default();
    let f = flag();
    park(&q, &f, Item(0, log.clone()));
    let setter = pass_later(&[&f]);
    q.teardown();
    assert_eq!(*log.lock(), [0]);
    assert!(!q.shared.state.lock().running);
    // Closed: a later park is released where it is made, once its point has passed.
    park(&q, &f, Item(1, log.clone()));
    q.release_later(Box::new(Item(2, log.clone())));
    assert_eq!(*log.lock(), [0, 1, 2]);
    assert_eq!(q.parked(), 0);
    setter.join().unwrap();
}

#[test]
fn exit_stops_the_thread_and_releases_what_is_parked() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    let log = Log::default();
    let (f, g) = (flag(), flag());
    park(&q, &f, Item(0, log.clone()));
    park(&q, &g, Item(1, log.clone()));
    g.store(true, Ordering::Release);
    f.store(true, Ordering::Release);
    super::exit::close(&q.shared);
    assert!(!q.shared.state.lock().running);
    assert_eq!(q.parked(), 0);
    let mut released = log.lock().clone();
    released.sort();
    assert_eq!(released, [0, 1]);
    // Exit during a global capture: the thread stops, nothing is freed (the batch is leaked,
    // not released later with the queue).
    let q = Tracker::new(std::ptr::null_mut());
    let h = flag();
    park(&q, &h, Item(2, log.clone()));
    let capture = capture_lock();
    h.store(true, Ordering::Release);
    let start = Instant::now();
    super::exit::close(&q.shared);
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(!q.shared.state.lock().running);
    drop(capture);
    drop(q);
    assert!(!log.lock().contains(&2), "released during a capture");
}

/// Logs the name of the thread that drops (releases) it.
struct Where(Arc<Mutex<Vec<Option<String>>>>);

impl Drop for Where {
    fn drop(&mut self) {
        let name = std::thread::current().name().map(str::to_owned);
        self.0.lock().push(name);
    }
}

#[test]
fn exit_releases_on_the_release_thread_not_on_the_exiting_one() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    let names = Arc::new(Mutex::new(Vec::new()));
    let (f, g) = (flag(), flag());
    park(&q, &f, Where(names.clone()));
    park(&q, &g, Where(names.clone()));
    // The points pass while the hook waits.
    let setter = pass_later(&[&g, &f]);
    super::exit::close(&q.shared);
    assert_eq!(q.parked(), 0);
    assert!(!q.shared.state.lock().running);
    let release = Some("graph-rt-release".to_owned());
    assert_eq!(*names.lock(), [release.clone(), release]);
    setter.join().unwrap();
}

/// Sets its flag from a thread-local destructor of the thread that dropped it, 50 ms after that
/// thread has returned from its work (as the driver's per-thread state is torn down when a
/// thread that called it ends).
struct EndsSlowly(Arc<AtomicBool>);

struct SlowEnd(Arc<AtomicBool>);

impl Drop for SlowEnd {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(50));
        self.0.store(true, Ordering::Release);
    }
}

thread_local! {
    static SLOW_END: std::cell::RefCell<Option<SlowEnd>> = const { std::cell::RefCell::new(None) };
}

impl Drop for EndsSlowly {
    fn drop(&mut self) {
        SLOW_END.with(|e| *e.borrow_mut() = Some(SlowEnd(self.0.clone())));
    }
}

#[test]
fn exit_waits_for_the_release_thread_to_end_not_only_to_stop() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    let (f, ended) = (flag(), flag());
    park(&q, &f, EndsSlowly(ended.clone()));
    f.store(true, Ordering::Release);
    eventually("released", || q.parked() == 0);
    super::exit::close(&q.shared);
    assert!(
        ended.load(Ordering::Acquire),
        "the hook returned before the release thread's thread-locals were destroyed"
    );
}

#[test]
fn exit_joins_a_release_thread_that_tore_its_own_queue_down() {
    let _serial = SERIAL.lock();
    let owner = Arc::new(Owner(Tracker::new(std::ptr::null_mut())));
    let shared = owner.0.shared.clone();
    let (f, ended) = (flag(), flag());
    park(&owner.0, &f, (owner.clone(), EndsSlowly(ended.clone())));
    drop(owner);
    f.store(true, Ordering::Release);
    // The release drops the last holder: teardown on the release thread, which then stops.
    eventually("the thread stopped", || {
        let state = shared.state.lock();
        state.closed && !state.running
    });
    super::exit::close(&shared);
    assert!(
        ended.load(Ordering::Acquire),
        "the hook returned before the release thread had ended"
    );
}

#[test]
fn exit_without_a_release_thread_releases_on_a_thread_started_for_it() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let names = Arc::new(Mutex::new(Vec::new()));
    let f = flag();
    park(&q, &f, Where(names.clone()));
    f.store(true, Ordering::Release);
    super::exit::close(&q.shared);
    assert_eq!(q.parked(), 0);
    assert_eq!(*names.lock(), [Some("graph-rt-exit".to_owned())]);
    // That thread has ended, not only released, when the hook returns.
    let (g, ended) = (flag(), flag());
    let q = quiet_queue();
    park(&q, &g, EndsSlowly(ended.clone()));
    g.store(true, Ordering::Release);
    super::exit::close(&q.shared);
    assert!(ended.load(Ordering::Acquire));
}

#[test]
fn exit_leaks_what_the_device_still_uses_past_its_patience() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let (done, never) = (flag(), flag());
    done.store(true, Ordering::Release);
    park(&q, &never, Item(0, log.clone()));
    park(&q, &done, Item(1, log.clone()));
    q.shared.close();
    let start = Instant::now();
    let deadline = start + Duration::from_millis(20);
    q.shared
        .release_everything(Duration::from_millis(100), Some(deadline));
    assert!(start.elapsed() < Duration::from_secs(1), "the exit hung");
    assert_eq!(q.parked(), 0);
    drop(q);
    // The batch still in use is leaked (never dropped), the other released.
    assert_eq!(*log.lock(), [1]);
}

/// Sets `points` after `after`; returns whether the capture lock was free just before (nobody
/// waited for a point while holding it).
fn set_later(points: &[Arc<AtomicBool>], after: Duration) -> std::thread::JoinHandle<bool> {
    let points = points.to_vec();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let free = !CAPTURE_LOCK.is_locked();
        for f in &points {
            f.store(true, Ordering::Release);
        }
        free
    })
}

#[test]
fn queues_closed_at_exit_at_once_all_release_everything() {
    let _serial = SERIAL.lock();
    let log = Log::default();
    let queues: Vec<_> = (0..3).map(|_| Tracker::new(std::ptr::null_mut())).collect();
    let points: Vec<_> = (0..3).map(|_| flag()).collect();
    for (i, (q, f)) in queues.iter().zip(&points).enumerate() {
        park(q, f, Item(i as u32, log.clone()));
        assert!(q.shared.state.lock().running);
    }
    // Longer than a release waits for a capture to end: the threads wait for one another's
    // points in vain if they wait holding the lock.
    let setter = set_later(
        &points,
        super::exit::CAPTURE_PATIENCE + Duration::from_millis(100),
    );
    let shared: Vec<_> = queues.iter().map(|q| q.shared.clone()).collect();
    super::exit::close_queues(&shared);
    assert!(
        setter.join().unwrap(),
        "a point was waited for holding the capture lock"
    );
    let mut released = log.lock().clone();
    released.sort();
    assert_eq!(released, [0, 1, 2]);
    for q in &queues {
        assert_eq!(q.parked(), 0);
        assert!(!q.shared.state.lock().running);
        assert_eq!(q.shared.exit_released.load(Ordering::Relaxed), 1);
        assert_eq!(q.shared.exit_leaked.load(Ordering::Relaxed), 0);
    }
}

#[test]
fn queues_torn_down_at_once_all_release_everything() {
    let _serial = SERIAL.lock();
    let log = Log::default();
    let queues: Vec<_> = (0..3)
        .map(|_| Arc::new(Tracker::new(std::ptr::null_mut())))
        .collect();
    let points: Vec<_> = (0..3).map(|_| flag()).collect();
    for (i, (q, f)) in queues.iter().zip(&points).enumerate() {
        park(q, f, Item(i as u32, log.clone()));
    }
    // Longer than teardown waits for a capture to end.
    let setter = set_later(
        &points,
        super::TEARDOWN_PATIENCE + Duration::from_millis(100),
    );
    let teardowns: Vec<_> = queues
        .iter()
        .map(|q| {
            let q = q.clone();
            std::thread::spawn(move || q.teardown())
        })
        .collect();
    teardowns.into_iter().for_each(|t| t.join().unwrap());
    assert!(
        setter.join().unwrap(),
        "a point was waited for holding the capture lock"
    );
    let mut released = log.lock().clone();
    released.sort();
    assert_eq!(released, [0, 1, 2]);
}

#[test]
fn a_batch_parked_on_a_queue_closed_at_exit_waits_until_the_deadline() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let (done, never) = (flag(), flag());
    done.store(true, Ordering::Release);
    // Closed at exit with no release thread: what is parked now (as by a parked drop that parks
    // again) is released where it is parked.
    let start = Instant::now();
    assert!(!q
        .shared
        .close_for_exit(start + Duration::from_millis(20), true));
    park(&q, &never, Item(0, log.clone()));
    assert!(start.elapsed() < Duration::from_secs(1), "the exit hung");
    park(&q, &done, Item(1, log.clone()));
    assert_eq!(q.parked(), 0);
    assert_eq!(q.shared.exit_leaked.load(Ordering::Relaxed), 1);
    assert_eq!(q.shared.exit_released.load(Ordering::Relaxed), 1);
    drop(q);
    // The batch still in use is leaked (never dropped), the other released.
    assert_eq!(*log.lock(), [1]);
}

#[test]
fn release_later_starts_the_release_thread_and_frees_nothing_during_a_capture() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    let names = Arc::new(Mutex::new(Vec::new()));
    let capture = capture_lock();
    q.release_later(Box::new(Where(names.clone())));
    assert!(
        q.shared.state.lock().running,
        "release_later starts the thread"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(names.lock().is_empty(), "released during a capture");
    drop(capture);
    eventually("released", || !names.lock().is_empty());
    assert_eq!(*names.lock(), [Some("graph-rt-release".to_owned())]);
    // Where no thread runs: dropped here, but not during a capture (then left for `poll`).
    let q = quiet_queue();
    let log = Log::default();
    q.release_later(Box::new(Item(0, log.clone())));
    assert_eq!(*log.lock(), [0]);
    let capture = capture_lock();
    q.release_later(Box::new(Item(1, log.clone())));
    assert_eq!(*log.lock(), [0]);
    assert_eq!(q.parked(), 1);
    drop(capture);
    assert_eq!(q.poll(), 0);
    assert_eq!(*log.lock(), [0, 1]);
}

#[cfg(target_os = "linux")]
#[test]
fn the_exit_hook_is_registered_again_once_a_library_was_loaded() {
    use super::exit::{arm, armed_at, loaded_objects};
    let _serial = SERIAL.lock();
    let before = loaded_objects().expect("the loader counts the objects it loaded");
    arm();
    let armed = armed_at();
    assert!(armed >= before);
    arm();
    assert_eq!(
        armed_at(),
        armed,
        "registered again with nothing loaded since"
    );
    // A library the process has not loaded yet, where the system has one.
    for name in [
        "libanl.so.1",
        "libutil.so.1",
        "libresolv.so.2",
        "libnsl.so.1",
    ] {
        // SAFETY: glibc's small libraries, whose initialisers have no preconditions.
        let Ok(lib) = (unsafe { libloading::Library::new(name) }) else {
            continue;
        };
        let now = loaded_objects().unwrap();
        if now > armed {
            arm();
            assert_eq!(armed_at(), now, "not registered again after loading {name}");
            drop(lib);
            return;
        }
    }
    eprintln!("every candidate library was loaded already: the re-registration is not exercised");
}

/// A timeline advanced by hand (a table's acknowledgements, in the tests).
struct Counter(std::sync::atomic::AtomicU64);

impl super::Progress for Counter {
    fn reached(&self, at: u64) -> bool {
        self.0.load(Ordering::Acquire) >= at
    }
}

#[test]
fn timeline_points_pass_as_their_timeline_advances_and_synchronize_releases_them() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let timeline = Arc::new(Counter(std::sync::atomic::AtomicU64::new(0)));
    for at in 1..=3u32 {
        let point = Point::Progress(timeline.clone(), u64::from(at));
        q.retire(point, vec![Box::new(Item(at, log.clone()))]);
    }
    assert_eq!(q.poll(), 3);
    timeline.0.store(2, Ordering::Release);
    assert_eq!(q.poll(), 1, "the first two launches finished");
    assert_eq!(*log.lock(), [1, 2]);
    // A timeline that will not advance (its owner stopped launching): a synchronized context
    // releases what was retired before it waited.
    let mark = q.mark();
    assert_eq!(q.synchronized(mark), 0);
    assert_eq!(*log.lock(), [1, 2, 3]);
}

/// A fake event whose query and wait answer `code` until told otherwise.
fn answering(code: CUresult) -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(code.0))
}

/// The refusals another library's global-mode capture brings, and other errors that say
/// nothing about the work: none of them is the work's end.
const NOT_PASSED: [CUresult; 7] = [
    CUresult::CUDA_ERROR_NOT_READY,
    CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
    CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
    CUresult::CUDA_ERROR_INVALID_HANDLE,
    CUresult::CUDA_ERROR_INVALID_CONTEXT,
    CUresult::CUDA_ERROR_UNKNOWN,
];

#[test]
fn an_event_counts_as_passed_on_success_or_a_sticky_error_only() {
    let passed = [
        CUresult::CUDA_SUCCESS,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        CUresult::CUDA_ERROR_LAUNCH_FAILED,
        CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
        CUresult::CUDA_ERROR_ASSERT,
        CUresult::CUDA_ERROR_LAUNCH_TIMEOUT,
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
        CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED,
        CUresult::CUDA_ERROR_DEINITIALIZED,
    ];
    for code in passed {
        assert!(event_passed(&Ok(code)), "{code:?} must count as passed");
        assert!(Point::FakeEvent(answering(code)).passed(), "{code:?}");
    }
    for code in NOT_PASSED {
        assert!(
            !event_passed(&Ok(code)),
            "{code:?} must not count as passed"
        );
        assert!(!Point::FakeEvent(answering(code)).passed(), "{code:?}");
    }
}

#[test]
fn a_batch_whose_event_query_is_refused_stays_parked_until_it_passes() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let answer = answering(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    q.retire(
        Point::FakeEvent(answer.clone()),
        vec![Box::new(Item(0, log.clone()))],
    );
    for code in NOT_PASSED {
        answer.store(code.0, Ordering::Release);
        assert_eq!(q.poll(), 1, "released on {code:?}");
    }
    assert!(log.lock().is_empty());
    answer.store(CUresult::CUDA_SUCCESS.0, Ordering::Release);
    assert_eq!(q.poll(), 0);
    assert_eq!(*log.lock(), [0]);
}

#[test]
fn the_release_thread_keeps_a_batch_whose_event_query_is_refused() {
    let _serial = SERIAL.lock();
    let q = Tracker::new(std::ptr::null_mut());
    let log = Log::default();
    let answer = answering(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    q.retire(
        Point::FakeEvent(answer.clone()),
        vec![Box::new(Item(0, log.clone()))],
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(log.lock().is_empty(), "released on a refused query");
    assert_eq!(q.len(), 1);
    answer.store(CUresult::CUDA_SUCCESS.0, Ordering::Release);
    eventually("the batch released once its event passed", || {
        *log.lock() == [0]
    });
}

#[test]
fn a_refused_wait_polls_until_the_event_passes() {
    let answer = answering(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    let mut point = Point::FakeEvent(answer.clone());
    let start = Instant::now();
    let setter = {
        let answer = answer.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            answer.store(CUresult::CUDA_SUCCESS.0, Ordering::Release);
        })
    };
    assert!(point.wait());
    assert!(
        start.elapsed() >= Duration::from_millis(25),
        "the refused wait ended before the event passed"
    );
    setter.join().expect("the setter ran");
}

#[test]
fn a_batch_whose_event_is_refused_is_leaked_at_exit_never_released() {
    let _serial = SERIAL.lock();
    let q = quiet_queue();
    let log = Log::default();
    let answer = answering(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    q.retire(
        Point::FakeEvent(answer.clone()),
        vec![Box::new(Item(0, log.clone()))],
    );
    // At exit the wait gives up at the deadline: the batch is leaked, never released early.
    q.shared.release_everything(
        Duration::ZERO,
        Some(Instant::now() + Duration::from_millis(20)),
    );
    assert!(
        log.lock().is_empty(),
        "released while its event was refused"
    );
}
