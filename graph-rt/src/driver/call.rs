//! The one checked-call layer of the driver API: [`cu!`] calls a driver function and turns its
//! result into this crate's [`Result`](crate::error::Result), the error named after the function
//! called (the macro stringifies it: no name typed by hand, none drifting from the call).
//!
//! Driver calls live only in `driver/`, `launch/` and `graph/` (CI checks it); everything else
//! goes through their safe wrappers.

/// `cu!(cuFoo(args..))`: calls `graph_rt_sys::cuFoo(args..)` (inside the caller's `unsafe` block,
/// whose SAFETY note covers the call) and checks the result with
/// [`check`](crate::error::check), named `"cuFoo"`. In a build with fault injection
/// (`--cfg graph_rt_fault`, see `driver/fault.rs`) an armed call returns its code instead of
/// running, but `cuStreamEndCapture` runs first (it ends the capture whatever it returns, and its
/// caller destroys what it made, as after any failure of it).
macro_rules! cu {
    (cuStreamEndCapture ( $($arg:expr),* $(,)? )) => {{
        let call = stringify!(cuStreamEndCapture);
        let ended = ::graph_rt_sys::cuStreamEndCapture($($arg),*);
        $crate::error::check(call, $crate::driver::injected(call).map_or(ended, Ok))
    }};
    ($f:ident ( $($arg:expr),* $(,)? )) => {
        match $crate::driver::injected(stringify!($f)) {
            Some(code) => $crate::error::check(stringify!($f), Ok(code)),
            None => $crate::error::check(stringify!($f), ::graph_rt_sys::$f($($arg),*)),
        }
    };
}

pub(crate) use cu;

/// `cu_code!(cuFoo(args..))`: calls `graph_rt_sys::cuFoo(args..)` (inside the caller's `unsafe`
/// block) and gives what it returned as a [`Returned`], for callers that handle some result
/// codes themselves (`CUDA_ERROR_NOT_READY` of a query, say); a driver that cannot be loaded is
/// an [`Error::Load`](crate::Error::Load). Faults are injected as in `cu!`.
macro_rules! cu_code {
    ($f:ident ( $($arg:expr),* $(,)? )) => {
        match $crate::driver::injected(stringify!($f)) {
            Some(code) => $crate::driver::Returned::of(stringify!($f), Ok(code)),
            None => $crate::driver::Returned::of(stringify!($f), ::graph_rt_sys::$f($($arg),*)),
        }
    };
}

pub(crate) use cu_code;

/// The code a call of `call` made now returns instead of running: a fault armed for it in a
/// build with fault injection; never otherwise (and then the check costs nothing).
#[inline(always)]
pub(crate) fn injected(call: &str) -> Option<graph_rt_sys::CUresult> {
    #[cfg(graph_rt_fault)]
    return super::fault::injected(call);
    #[cfg(not(graph_rt_fault))]
    {
        let _ = call;
        None
    }
}

/// What a driver call returned, with the call's name (from [`cu_code!`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Returned {
    pub(crate) call: &'static str,
    pub(crate) code: graph_rt_sys::CUresult,
}

impl Returned {
    #[inline]
    pub(crate) fn of(
        call: &'static str,
        result: std::result::Result<graph_rt_sys::CUresult, graph_rt_sys::LoadError>,
    ) -> crate::error::Result<Self> {
        result
            .map(|code| Self { call, code })
            .map_err(crate::Error::Load)
    }

    /// The call's error for its code (named after the call).
    pub(crate) fn error(self) -> crate::Error {
        crate::Error::driver(self.call, self.code)
    }

    /// `Ok` on `CUDA_SUCCESS`, else the call's error.
    #[inline]
    pub(crate) fn check(self) -> crate::error::Result<()> {
        if self.code == graph_rt_sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    /// Whether the call returned `CUDA_SUCCESS`.
    #[inline]
    pub(crate) fn ok(self) -> bool {
        self.code == graph_rt_sys::CUresult::CUDA_SUCCESS
    }
}
