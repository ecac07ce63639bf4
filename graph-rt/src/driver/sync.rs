//! The synchronization primitives of the capture gate and the lifetime tracker, swapped for
//! loom's under `cfg(loom)` so that its models run the library's own state machines
//! (`capture_gate::loom_models`, `lifetime::loom_models`).
//!
//! Normally these are parking_lot's and std's, at no cost. Under loom they are thin wrappers
//! with parking_lot's interface over loom's types: a timed wait waits untimed (loom has no
//! clock; a model never relies on a timeout), a timed try-lock tries once and yields (giving up
//! at once is one of its outcomes), and a pause yields to the other threads. Statics that need a
//! `const` constructor are `loom::lazy_static!` there, fresh in every execution.
//!
//! Run the models with `RUSTFLAGS="--cfg loom" cargo test -p graph-rt --lib --release loom` (in
//! a target directory of their own: the flag rebuilds everything).

#[cfg(not(loom))]
pub(crate) use parking_lot::{
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicUsize;
// Fake completion points (tests).
#[cfg(all(test, not(loom)))]
pub(crate) use std::sync::atomic::AtomicBool;
#[cfg(not(loom))]
pub(crate) use std::thread_local;

#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::AtomicBool;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicUsize;
// Loom's macro takes no `const` initializer (the std one's fast path).
#[cfg(loom)]
macro_rules! loom_thread_local {
    ($(#[$attr:meta])* static $name:ident: $t:ty = const { $init:expr };) => {
        loom::thread_local!($(#[$attr])* static $name: $t = $init);
    };
}
#[cfg(loom)]
pub(crate) use loom_shim::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(loom)]
pub(crate) use loom_thread_local as thread_local;

/// Lets other threads run for about `d` (a thread polling for something that does not signal).
#[cfg(not(loom))]
pub(crate) fn pause(d: std::time::Duration) {
    std::thread::sleep(d);
}

#[cfg(loom)]
pub(crate) fn pause(_: std::time::Duration) {
    loom::thread::yield_now();
}

#[cfg(loom)]
mod loom_shim {
    use std::ops::{Deref, DerefMut};
    use std::time::{Duration, Instant};

    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(crate) struct MutexGuard<'a, T> {
        // Taken while the guard waits on a condvar or is unlocked.
        guard: Option<loom::sync::MutexGuard<'a, T>>,
        mutex: &'a loom::sync::Mutex<T>,
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard {
                guard: Some(self.0.lock().expect("a model thread panicked")),
                mutex: &self.0,
            }
        }
    }

    impl<T> MutexGuard<'_, T> {
        pub(crate) fn unlocked<U>(s: &mut Self, f: impl FnOnce() -> U) -> U {
            drop(s.guard.take());
            let out = f();
            s.guard = Some(s.mutex.lock().expect("a model thread panicked"));
            out
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.guard.as_ref().expect("held")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.guard.as_mut().expect("held")
        }
    }

    pub(crate) struct Condvar(loom::sync::Condvar);

    pub(crate) struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            false
        }
    }

    impl Condvar {
        pub(crate) fn new() -> Self {
            Self(loom::sync::Condvar::new())
        }

        pub(crate) fn wait<T>(&self, g: &mut MutexGuard<'_, T>) {
            let held = g.guard.take().expect("held");
            g.guard = Some(self.0.wait(held).expect("a model thread panicked"));
        }

        pub(crate) fn wait_until<T>(
            &self,
            g: &mut MutexGuard<'_, T>,
            _: Instant,
        ) -> WaitTimeoutResult {
            self.wait(g);
            WaitTimeoutResult
        }

        pub(crate) fn wait_for<T>(
            &self,
            g: &mut MutexGuard<'_, T>,
            _: Duration,
        ) -> WaitTimeoutResult {
            self.wait(g);
            WaitTimeoutResult
        }

        pub(crate) fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
    }

    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    pub(crate) type RwLockReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
    pub(crate) type RwLockWriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read_recursive(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().expect("a model thread panicked")
        }

        pub(crate) fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
            self.0.try_write().ok()
        }

        pub(crate) fn try_write_for(&self, _: Duration) -> Option<RwLockWriteGuard<'_, T>> {
            let guard = self.try_write();
            if guard.is_none() {
                loom::thread::yield_now();
            }
            guard
        }

        pub(crate) fn is_locked(&self) -> bool {
            self.0.try_write().is_err()
        }

        pub(crate) fn is_locked_exclusive(&self) -> bool {
            self.0.try_read().is_err()
        }
    }
}
