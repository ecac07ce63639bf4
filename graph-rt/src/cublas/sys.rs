//! Hand-written cuBLAS v2 bindings, resolved at run time: the few types, constants and functions
//! [`Cublas`](super::Cublas) uses, and the process-wide library they come from.
//!
//! Signatures follow `cublas_api.h` of cuBLAS 12 and 13 (unchanged between them): enums are
//! `int`, `cudaStream_t` is the driver's `CUstream`, `size_t` is `usize`, `long long` is `i64`.

use std::ffi::{c_int, c_longlong, c_void, OsStr, OsString};
use std::sync::OnceLock;

use graph_rt_sys::CUstream;
use libloading::Library;

use crate::dylib::Candidate;
use crate::error::{Error, Result};

/// `cublasHandle_t`: an opaque pointer to cuBLAS's context.
pub(crate) type Handle = *mut c_void;
/// `cublasStatus_t`.
pub(crate) type Status = c_int;

/// The environment variable naming the cuBLAS library to load (a full path), tried first.
pub(crate) const ENV_VAR: &str = "GRAPH_RT_CUBLAS";
/// The library names tried after [`ENV_VAR`], found by the dynamic loader's usual rules.
pub(crate) const LIBRARY_NAMES: [&str; 2] = ["libcublas.so.13", "libcublas.so.12"];

pub(crate) const CUBLAS_STATUS_SUCCESS: Status = 0;

/// `cublasOperation_t`.
pub(crate) const CUBLAS_OP_N: c_int = 0;
pub(crate) const CUBLAS_OP_T: c_int = 1;

/// `cudaDataType_t`.
pub(crate) const CUDA_R_16F: c_int = 2;
pub(crate) const CUDA_R_16BF: c_int = 14;
/// `CUDA_R_32F`: f32 (`cudaDataType_t`).
pub(crate) const CUDA_R_32F: c_int = 0;

/// `cublasComputeType_t`: f32 accumulation (alpha and beta are `float`).
pub(crate) const CUBLAS_COMPUTE_32F: c_int = 68;
/// `cublasGemmAlgo_t`: let cuBLAS choose.
pub(crate) const CUBLAS_GEMM_DEFAULT: c_int = -1;

/// `cublasMath_t`.
pub(crate) const CUBLAS_DEFAULT_MATH: c_int = 0;
pub(crate) const CUBLAS_TF32_TENSOR_OP_MATH: c_int = 3;

// The pointer mode is left at its default, CUBLAS_POINTER_MODE_HOST (0): alpha and beta are read
// from host memory when the call is made (so a capture records their values).

type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
type DestroyFn = unsafe extern "C" fn(Handle) -> Status;
type SetStreamFn = unsafe extern "C" fn(Handle, CUstream) -> Status;
type GetStreamFn = unsafe extern "C" fn(Handle, *mut CUstream) -> Status;
type SetWorkspaceFn = unsafe extern "C" fn(Handle, *mut c_void, usize) -> Status;
type SetMathModeFn = unsafe extern "C" fn(Handle, c_int) -> Status;
type GetVersionFn = unsafe extern "C" fn(Handle, *mut c_int) -> Status;
/// `cublasSgemm_v2(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)`.
type SgemmFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    *const f32,
    *mut f32,
    c_int,
) -> Status;
/// `cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,
/// strideB, beta, C, ldc, strideC, batchCount)`.
type SgemmStridedBatchedFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    c_longlong,
    *const f32,
    c_int,
    c_longlong,
    *const f32,
    *mut f32,
    c_int,
    c_longlong,
    c_int,
) -> Status;
/// `cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
/// Ctype, ldc, computeType, algo)`.
type GemmExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
) -> Status;

/// An opened cuBLAS and the functions graph-rt uses, resolved from it. The library is kept in
/// the same value as the pointers, so they stay valid as long as it lives.
pub(crate) struct CublasLib {
    pub(crate) create: CreateFn,
    pub(crate) destroy: DestroyFn,
    pub(crate) set_stream: SetStreamFn,
    pub(crate) get_stream: GetStreamFn,
    pub(crate) set_workspace: SetWorkspaceFn,
    pub(crate) set_math_mode: SetMathModeFn,
    pub(crate) get_version: GetVersionFn,
    pub(crate) sgemm: SgemmFn,
    pub(crate) sgemm_strided_batched: SgemmStridedBatchedFn,
    pub(crate) gemm_ex: GemmExFn,
    /// The name or path it was opened by.
    pub(crate) path: OsString,
    // Keeps the code behind every pointer above mapped.
    _library: Library,
}

impl std::fmt::Debug for CublasLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CublasLib")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

static LIBRARY: OnceLock<CublasLib> = OnceLock::new();

/// The process-wide cuBLAS, opened on first use from [`candidates`]. A failure is not cached:
/// a later call tries again.
pub(crate) fn library() -> Result<&'static CublasLib> {
    if let Some(lib) = LIBRARY.get() {
        return Ok(lib);
    }
    let lib = load_from(&candidates(std::env::var_os(ENV_VAR)))?;
    // Two threads may both have opened it; the loser's copy is dropped (dlclose only lowers the
    // loader's reference count).
    Ok(LIBRARY.get_or_init(|| lib))
}

/// What to try, in order: `env` (the value of [`ENV_VAR`]) when set and not empty (an absolute
/// path to a regular file: see [`Candidate::Named`]), then [`LIBRARY_NAMES`].
pub(crate) fn candidates(env: Option<OsString>) -> Vec<Candidate> {
    env.filter(|v| !v.is_empty())
        .map(|v| Candidate::Named(v.into()))
        .into_iter()
        .chain(LIBRARY_NAMES.into_iter().map(Candidate::Soname))
        .collect()
}

/// Opens the first of `candidates` that passes its checks, loads and has every function,
/// without touching the process-wide library. The error lists every candidate and why it failed.
pub(crate) fn load_from(candidates: &[Candidate]) -> Result<CublasLib> {
    crate::dylib::first_that_opens("cuBLAS", candidates, open).map_err(|tried| {
        Error::invalid(
            "dlopen(libcublas)",
            format!(
                "could not load cuBLAS (tried {tried}): set {ENV_VAR} to the full path of \
                 libcublas.so.13 or libcublas.so.12, e.g. PyTorch's \
                 site-packages/nvidia/cu13/lib/libcublas.so.13 (libcublasLt must be in the same \
                 folder or on the loader's path)"
            ),
        )
    })
}

/// Opens `path` and resolves every function, or says why not.
fn open(path: &OsStr) -> Result<CublasLib, String> {
    // SAFETY: loading cuBLAS runs its initialisers, which have no preconditions; the path is the
    // user's choice (GRAPH_RT_CUBLAS) or a cuBLAS soname found by the dynamic loader.
    let library = unsafe { crate::dylib::open(path) }?;
    // SAFETY: each type is the function's C signature in cuBLAS 12 and 13 (cublas_api.h).
    unsafe {
        Ok(CublasLib {
            create: symbol(&library, b"cublasCreate_v2\0")?,
            destroy: symbol(&library, b"cublasDestroy_v2\0")?,
            set_stream: symbol(&library, b"cublasSetStream_v2\0")?,
            get_stream: symbol(&library, b"cublasGetStream_v2\0")?,
            set_workspace: symbol(&library, b"cublasSetWorkspace_v2\0")?,
            set_math_mode: symbol(&library, b"cublasSetMathMode\0")?,
            get_version: symbol(&library, b"cublasGetVersion_v2\0")?,
            sgemm: symbol(&library, b"cublasSgemm_v2\0")?,
            sgemm_strided_batched: symbol(&library, b"cublasSgemmStridedBatched\0")?,
            gemm_ex: symbol(&library, b"cublasGemmEx\0")?,
            path: path.to_owned(),
            _library: library,
        })
    }
}

/// The function `name` (NUL-terminated) of `library`, copied out of its `Symbol`.
///
/// # Safety
/// `T` must be the type of the symbol.
unsafe fn symbol<T: Copy>(library: &Library, name: &[u8]) -> Result<T, String> {
    // SAFETY: forwarded to the caller.
    unsafe { crate::dylib::symbol(library, "cuBLAS", name) }
}

/// The name of a `cublasStatus_t`.
pub(crate) fn status_name(status: Status) -> &'static str {
    match status {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => "CUBLAS_STATUS_UNKNOWN",
    }
}

/// What the caller can do about a `cublasStatus_t`.
fn status_hint(status: Status) -> &'static str {
    match status {
        1 => "cuBLAS is not initialised: the handle is invalid or the CUDA runtime could not start in this context",
        3 => "cuBLAS could not allocate device memory: free memory, or (inside a capture) give the handle a larger workspace with Cublas::with_workspace",
        7 => "an argument is out of range for cuBLAS (a size, leading dimension, type combination or workspace alignment)",
        8 => "the GPU lacks a feature this call needs (e.g. fp16/bf16 tensor cores)",
        11 => "cuBLAS could not access GPU memory",
        13 => "the kernel failed to run: look for an earlier error on the stream, or an operation the capture forbids",
        14 => "an internal cuBLAS operation failed (often a capture was invalidated, or the context is unusable after an earlier error)",
        15 => "this combination of types, compute type and algorithm is not supported on this GPU",
        16 => "cuBLAS reported a license error",
        _ => "a status this version of graph-rt does not know: see the cuBLAS documentation",
    }
}

/// Turns a cuBLAS status into a [`Result`]: failures are [`Error::InvalidArgument`] naming
/// `call`, with the status's name, code and a hint.
pub(crate) fn check_status(call: &'static str, status: Status) -> Result<()> {
    if status == CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        // Not a misuse graph-rt names: cuBLAS's own failure, said as cuBLAS says it.
        Err(Error::invalid(
            call,
            format!(
                "{} ({status}): {}",
                status_name(status),
                status_hint(status)
            ),
        ))
    }
}
