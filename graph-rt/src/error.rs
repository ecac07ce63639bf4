//! The one error type of graph-rt, and the helper that turns a driver result into it.

use graph_rt_sys::{CUresult, LoadError};

mod misuse;
pub use misuse::Misuse;

/// Everything that can go wrong in graph-rt.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A driver call returned an error code.
    #[error("{call} failed: {name} ({text}){}", hint_suffix(.hint))]
    Driver {
        /// The driver function, e.g. `cuLaunchKernel`.
        call: &'static str,
        /// The raw result code.
        code: CUresult,
        /// The code's name, e.g. `CUDA_ERROR_INVALID_VALUE`.
        name: String,
        /// The driver's description of the code.
        text: String,
        /// What the caller can do about it, when graph-rt knows.
        hint: Option<String>,
    },
    /// Stream capture failed: an operation capture does not allow (synchronize, a synchronous
    /// copy, a plain allocation, querying an event of the capture, …), or a capture that such an
    /// operation invalidated. The capture has been ended and the stream is usable again.
    #[error("stream capture failed at {call}: {name} ({text}): {hint}")]
    Capture {
        /// The call that broke the capture (or `cuStreamEndCapture` when the failing call's error
        /// was not returned from the capture closure).
        call: &'static str,
        /// The raw result code.
        code: CUresult,
        /// The code's name.
        name: String,
        /// The driver's description of the code.
        text: String,
        /// What to do instead.
        hint: String,
    },
    /// The driver library, or a function of it, is not available.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A per-node change names a node whose counterpart in the exec is not known: after an
    /// in-place update from a graph whose nodes cannot be paired with certainty (see
    /// `GraphExec::update`). Nothing was changed.
    #[error("{call}: {reason}")]
    NodeIdentityUnknown {
        /// The graph-rt or driver function the node was for.
        call: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A misuse graph-rt recognizes and names: [`Misuse`] says which (match on it, not on the
    /// text), `reason` says it in words with what to do. Nothing the call was to do was done
    /// (graph-rt may have asked the driver what it needed to know, e.g. a kernel's parameters).
    #[error("{call}: {reason}")]
    Misuse {
        /// The graph-rt or driver function that was misused.
        call: &'static str,
        /// Which misuse.
        misuse: Misuse,
        /// What is wrong and what would be right.
        reason: String,
    },
    /// An NCCL call failed ([`NcclCode`] says how; `detail` is NCCL's own message).
    #[error("{call} failed: {code} ({detail}): {hint}")]
    Nccl {
        /// The NCCL function, e.g. `ncclAllReduce`.
        call: &'static str,
        /// Its result.
        code: NcclCode,
        /// NCCL's description of the result, and its last message (`ncclGetLastError`).
        detail: String,
        /// What the caller can do about it.
        hint: &'static str,
    },
    /// An operation that did not complete in the time it was given: a communicator whose peers
    /// did not all join, a collective whose peers never came. What could be aborted was (an
    /// NCCL communicator is then unusable: make a new one on every rank).
    #[error("{call}: not done after {after:?}: {reason}")]
    Timeout {
        /// The graph-rt or library function that waited.
        call: &'static str,
        /// How long it waited.
        after: std::time::Duration,
        /// What it waited for and what was done about it.
        reason: String,
    },
    /// A failure graph-rt says in words only, which is not a misuse it names (those are
    /// [`Error::Misuse`]): another library's free-form failure (a cuBLAS status, a library that
    /// does not load, a file that cannot be read), or something the driver or the device gave
    /// back that graph-rt cannot use.
    #[error("{call}: {reason}")]
    InvalidArgument {
        /// The graph-rt, driver or library function that failed.
        call: &'static str,
        /// What went wrong, and what to do where graph-rt knows.
        reason: String,
    },
    /// A framework's own error, met inside graph-rt's work (a candle op failing inside a step's
    /// closure): the framework's error is the source.
    #[error("{framework}: {source}")]
    Framework {
        /// The framework, e.g. `"candle"`.
        framework: &'static str,
        /// The driver's result its error carries, where it carries one.
        code: Option<CUresult>,
        /// Its error.
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(": {h}")).unwrap_or_default()
}

/// How an NCCL call failed: its `ncclResult_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NcclCode {
    /// `ncclUnhandledCudaError` (1): a CUDA call inside NCCL failed.
    UnhandledCudaError,
    /// `ncclSystemError` (2): a system call failed.
    SystemError,
    /// `ncclInternalError` (3).
    InternalError,
    /// `ncclInvalidArgument` (4).
    InvalidArgument,
    /// `ncclInvalidUsage` (5).
    InvalidUsage,
    /// `ncclRemoteError` (6): another rank failed.
    RemoteError,
    /// `ncclInProgress` (7), where a completed operation was expected.
    InProgress,
    /// A result this version of graph-rt does not know.
    Other(i32),
}

impl NcclCode {
    /// The code of a raw `ncclResult_t` (not `ncclSuccess`).
    pub fn from_raw(raw: i32) -> Self {
        match raw {
            1 => NcclCode::UnhandledCudaError,
            2 => NcclCode::SystemError,
            3 => NcclCode::InternalError,
            4 => NcclCode::InvalidArgument,
            5 => NcclCode::InvalidUsage,
            6 => NcclCode::RemoteError,
            7 => NcclCode::InProgress,
            other => NcclCode::Other(other),
        }
    }

    /// The raw `ncclResult_t`.
    pub fn raw(self) -> i32 {
        match self {
            NcclCode::UnhandledCudaError => 1,
            NcclCode::SystemError => 2,
            NcclCode::InternalError => 3,
            NcclCode::InvalidArgument => 4,
            NcclCode::InvalidUsage => 5,
            NcclCode::RemoteError => 6,
            NcclCode::InProgress => 7,
            NcclCode::Other(raw) => raw,
        }
    }
}

impl std::fmt::Display for NcclCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            NcclCode::UnhandledCudaError => "ncclUnhandledCudaError",
            NcclCode::SystemError => "ncclSystemError",
            NcclCode::InternalError => "ncclInternalError",
            NcclCode::InvalidArgument => "ncclInvalidArgument",
            NcclCode::InvalidUsage => "ncclInvalidUsage",
            NcclCode::RemoteError => "ncclRemoteError",
            NcclCode::InProgress => "ncclInProgress",
            NcclCode::Other(_) => "an unknown ncclResult_t",
        };
        write!(f, "{name} ({})", self.raw())
    }
}

/// Result of graph-rt operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The driver's result code, if this error came from a driver call.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            Error::Driver { code, .. } | Error::Capture { code, .. } => Some(*code),
            Error::Framework { code, .. } => *code,
            _ => None,
        }
    }

    /// A framework's error `source` (its driver result `code`, where it carries one) as
    /// [`Error::Framework`].
    pub fn framework(
        framework: &'static str,
        code: Option<CUresult>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Framework {
            framework,
            code,
            source: std::sync::Arc::new(source),
        }
    }

    /// Whether stream capture caused this error: a capture that broke, or a framework's call
    /// that the driver refused during one.
    pub fn is_capture_error(&self) -> bool {
        match self {
            Error::Capture { .. } => true,
            Error::Framework { code: Some(c), .. } => is_capture_code(*c),
            _ => false,
        }
    }

    /// The driver call that failed, if this error came from one.
    pub fn call(&self) -> Option<&'static str> {
        match self {
            Error::Driver { call, .. }
            | Error::Capture { call, .. }
            | Error::InvalidArgument { call, .. }
            | Error::Misuse { call, .. }
            | Error::NodeIdentityUnknown { call, .. }
            | Error::Nccl { call, .. }
            | Error::Timeout { call, .. } => Some(call),
            Error::Load(_) | Error::Framework { .. } => None,
        }
    }

    /// Builds the error of a failed driver call, with the code's name, text and a hint.
    #[cold]
    pub fn driver(call: &'static str, code: CUresult) -> Self {
        let (name, text) = describe(code);
        Error::Driver {
            call,
            code,
            name,
            text,
            hint: hint(code).map(str::to_owned),
        }
    }

    /// Replaces the hint of a driver error with a more precise one (e.g. a launch diagnosis).
    pub fn with_hint(mut self, new: impl Into<String>) -> Self {
        if let Error::Driver { hint, .. } = &mut self {
            *hint = Some(new.into());
        }
        self
    }

    /// Turns a driver error that stream capture caused into [`Error::Capture`]; other errors
    /// pass through.
    pub(crate) fn into_capture(self) -> Self {
        match self {
            Error::Driver {
                call,
                code,
                name,
                text,
                hint,
            } if is_capture_code(code) => Error::Capture {
                call,
                code,
                name,
                text,
                hint: hint.unwrap_or_else(|| {
                    "this operation is not allowed during stream capture".into()
                }),
            },
            e => e,
        }
    }

    /// The error of misuse `misuse` of `call`, said in words by `reason`.
    pub(crate) fn misuse(call: &'static str, misuse: Misuse, reason: impl Into<String>) -> Self {
        Error::Misuse {
            call,
            misuse,
            reason: reason.into(),
        }
    }

    /// The misuse [`Misuse::Ptx`] of `call`: `what` failed in the PTX pass, whose `error` says why.
    pub(crate) fn ptx(call: &'static str, what: &str, error: graph_rt_ptx::PtxError) -> Self {
        let reason = format!("{what}: {error}");
        Error::misuse(call, Misuse::Ptx { error }, reason)
    }

    /// Which misuse this is, if graph-rt named it.
    pub fn misuse_kind(&self) -> Option<&Misuse> {
        match self {
            Error::Misuse { misuse, .. } => Some(misuse),
            _ => None,
        }
    }

    /// The error [`Error::InvalidArgument`] of `call`: only for what is not a misuse (see
    /// there); a misuse is [`Error::misuse`] with its [`Misuse`].
    pub(crate) fn invalid(call: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            call,
            reason: reason.into(),
        }
    }
}

/// Turns the outcome of a generated driver function into a [`Result`].
#[inline]
pub fn check(call: &'static str, result: Result<CUresult, LoadError>) -> Result<()> {
    match result {
        Ok(CUresult::CUDA_SUCCESS) => Ok(()),
        Ok(code) => Err(Error::driver(call, code)),
        Err(e) => Err(Error::Load(e)),
    }
}

fn is_capture_code(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            | CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
            | CUresult::CUDA_ERROR_STREAM_CAPTURE_MERGE
            | CUresult::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
            | CUresult::CUDA_ERROR_STREAM_CAPTURE_UNJOINED
            | CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION
            | CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
            | CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
            | CUresult::CUDA_ERROR_CAPTURED_EVENT
    )
}

fn describe(code: CUresult) -> (String, String) {
    let (name, text) = graph_rt_sys::describe_result(code);
    (
        name.unwrap_or_else(|| format!("CUresult {}", code.0)),
        text.unwrap_or_else(|| "unknown error code".to_owned()),
    )
}

fn hint(code: CUresult) -> Option<&'static str> {
    Some(match code {
        CUresult::CUDA_ERROR_NO_DEVICE => "no CUDA device is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES",
        CUresult::CUDA_ERROR_INVALID_DEVICE => "the device ordinal is out of range: see `graph-rt info` for the devices",
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => "the device is out of memory: free buffers or allocate less",
        CUresult::CUDA_ERROR_INVALID_CONTEXT => "no valid context is current on this thread: bind one with Context::bind",
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => "the PTX was made by a newer compiler than this driver: update the driver or compile for an older PTX ISA",
        CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU => "the module has no code for this GPU: ship PTX or a cubin for its compute capability",
        CUresult::CUDA_ERROR_INVALID_PTX | CUresult::CUDA_ERROR_INVALID_IMAGE => "the module image is malformed or for another target: see the JIT log",
        CUresult::CUDA_ERROR_NOT_FOUND => "no such symbol in the module: check the kernel's name (extern \"C\" avoids C++ name mangling)",
        CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => "the kernel needs more registers or shared memory than this block size allows: use smaller blocks",
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS => "a kernel accessed invalid memory; the context is now unusable: run under compute-sanitizer",
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED => "this operation is not allowed while a stream is capturing: move it out of the capture (synchronize, synchronous copies and plain allocations cannot be captured)",
        CUresult::CUDA_ERROR_CAPTURED_EVENT => "the event belongs to an active capture: it cannot be queried or synchronized until the capture ends",
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNJOINED => "a stream forked from the capture was not joined back: record an event on it and wait on it from the capturing stream",
        CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD => "the capture was begun on another thread in thread-local mode: end it on that thread",
        CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => "an earlier illegal operation invalidated the capture: end it and capture again",
        CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION => "the capture depends on work outside it: join other streams with events before ending the capture",
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => "a legacy-stream operation would synchronize with the capture: use non-blocking streams",
        CUresult::CUDA_ERROR_NOT_PERMITTED => "this operation is not permitted here (e.g. during stream capture)",
        CUresult::CUDA_ERROR_NOT_SUPPORTED => "the device or driver does not support this operation",
        CUresult::CUDA_ERROR_INVALID_HANDLE => "a handle is invalid or belongs to another context",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frameworks_error_is_the_source_and_its_capture_code_a_capture_error() {
        #[derive(Debug, thiserror::Error)]
        #[error("op failed")]
        struct Op;
        let e = Error::framework("candle", None, Op);
        assert_eq!(e.to_string(), "candle: op failed");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "op failed");
        assert!(!e.is_capture_error());
        let refused = CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        let e = Error::framework("candle", Some(refused), Op);
        assert_eq!((e.code(), e.is_capture_error()), (Some(refused), true));
        let e = Error::framework("candle", Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY), Op);
        assert!(!e.is_capture_error());
    }

    #[test]
    fn load_errors_say_what_to_do() {
        let e = Error::from(LoadError::Library {
            reason: "libcuda.so.1: cannot open shared object file".into(),
        });
        let msg = e.to_string();
        assert!(msg.contains("libcuda.so.1"), "{msg}");
        assert!(msg.contains("install the NVIDIA driver"), "{msg}");
        let e = Error::from(LoadError::Unsupported {
            symbol: "cuFuncGetParamInfo",
            needed: 12040,
            found: 12030,
            simulated: false,
        });
        assert_eq!(
            e.to_string(),
            "`cuFuncGetParamInfo` needs a driver of CUDA 12.4 or newer; this driver supports CUDA 12.3"
        );
    }

    #[test]
    fn check_passes_success_and_maps_load_errors() {
        assert!(check("cuInit", Ok(CUresult::CUDA_SUCCESS)).is_ok());
        let e = check(
            "cuInit",
            Err(LoadError::NotADriver {
                symbol: "cuDriverGetVersion",
            }),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Load(_)));
    }

    #[test]
    fn invalid_argument_names_the_call() {
        // What is left to `Error::invalid`: failures that are not misuses, e.g. another
        // library's, said in its words.
        let e = Error::invalid("cublasGemmEx", "CUBLAS_STATUS_INVALID_VALUE (7)");
        assert_eq!(e.call(), Some("cublasGemmEx"));
        assert_eq!(
            e.to_string(),
            "cublasGemmEx: CUBLAS_STATUS_INVALID_VALUE (7)"
        );
    }

    #[test]
    fn a_misuse_names_the_call_says_which_and_says_it_in_words() {
        let e = Error::misuse(
            "DeviceBuffer::copy_from_host",
            Misuse::LengthMismatch { ours: 4, theirs: 3 },
            "the buffer holds 4 elements, the other side 3",
        );
        assert_eq!(e.call(), Some("DeviceBuffer::copy_from_host"));
        assert_eq!(
            e.misuse_kind(),
            Some(&Misuse::LengthMismatch { ours: 4, theirs: 3 })
        );
        assert_eq!(e.code(), None);
        assert_eq!(
            e.to_string(),
            "DeviceBuffer::copy_from_host: the buffer holds 4 elements, the other side 3"
        );
        assert_eq!(Error::invalid("x", "y").misuse_kind(), None);
    }
}
