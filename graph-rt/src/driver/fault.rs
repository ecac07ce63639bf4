//! Fault injection for tests (compiled only with `--cfg graph_rt_fault`, never by a feature,
//! so no `--all-features` build holds it): the n-th call of a named driver entry point made by
//! the calling thread returns an error code instead of running, through the one checked-call
//! layer ([`cu!`](super::call::cu), [`cu_code!`](super::call::cu_code)).
//!
//! A call that fails leaves the driver's state as the driver would: it does nothing, except
//! `cuStreamEndCapture`, which ends the capture whatever it returns: an injected failure of it
//! runs it, then returns the code (its caller destroys the graph it made).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use graph_rt_sys::CUresult;

struct Armed {
    id: u64,
    call: &'static str,
    left: u32,
    code: CUresult,
    fired: Rc<Cell<bool>>,
}

thread_local! {
    static ARMED: RefCell<Vec<Armed>> = const { RefCell::new(Vec::new()) };
    static NEXT: Cell<u64> = const { Cell::new(0) };
}

/// A fault armed by [`fail`] on this thread; disarmed when dropped.
#[derive(Debug)]
pub struct Fault {
    id: u64,
    fired: Rc<Cell<bool>>,
}

impl Fault {
    /// Whether the call failed.
    pub fn fired(&self) -> bool {
        self.fired.get()
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        let id = self.id;
        // A thread's storage is gone only at its exit, after its faults.
        let _ = ARMED.try_with(|a| a.borrow_mut().retain(|f| f.id != id));
    }
}

/// Makes the `nth` call (from 1) of the driver entry point `call` (its name in `cuda.h`, such
/// as `"cuGraphLaunch"`) that this thread makes from now on return `code` without running, once.
pub fn fail(call: &'static str, nth: u32, code: CUresult) -> Fault {
    let id = NEXT.with(|n| {
        n.set(n.get() + 1);
        n.get()
    });
    let fired = Rc::new(Cell::new(false));
    ARMED.with(|a| {
        a.borrow_mut().push(Armed {
            id,
            call,
            left: nth.max(1),
            code,
            fired: fired.clone(),
        })
    });
    Fault { id, fired }
}

/// The code a call of `call` made now returns instead of running, if a fault is armed for it.
pub(crate) fn injected(call: &str) -> Option<CUresult> {
    ARMED
        .try_with(|a| {
            let mut armed = a.borrow_mut();
            let at = armed.iter().position(|f| f.call == call)?;
            let f = &mut armed[at];
            f.left -= 1;
            if f.left > 0 {
                return None;
            }
            f.fired.set(true);
            Some(armed.remove(at).code)
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_call_fails_once_and_a_dropped_fault_never() {
        let code = CUresult::CUDA_ERROR_UNKNOWN;
        let f = fail("cuGraphLaunch", 2, code);
        assert_eq!(injected("cuGraphLaunch"), None);
        assert_eq!(injected("cuGraphUpload"), None);
        assert_eq!(injected("cuGraphLaunch"), Some(code));
        assert!(f.fired());
        assert_eq!(injected("cuGraphLaunch"), None);
        let g = fail("cuEventRecord", 1, code);
        drop(g);
        assert_eq!(injected("cuEventRecord"), None);
        std::thread::spawn(move || assert_eq!(injected("cuGraphLaunch"), None))
            .join()
            .unwrap();
    }
}
