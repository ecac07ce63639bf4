//! Hand-written NCCL bindings, resolved at run time: the few types, constants and functions the
//! communicators and collectives use, the process-wide library they come from, and what a
//! `ncclResult_t` means.
//!
//! Signatures follow `nccl.h` of NCCL 2.14 to 2.28 (unchanged between them): enums are `int`,
//! `cudaStream_t` is the driver's `CUstream`, `size_t` is `usize`. The communicator's
//! configuration is passed as the 2.14 layout of `ncclConfig_t` with `version` saying so: NCCL
//! reads the fields of the version the caller names, and leaves the later ones at their
//! defaults.

use std::ffi::{c_char, c_int, c_void, CStr, OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use graph_rt_sys::CUstream;
use libloading::Library;

use crate::dylib::Candidate;
use crate::error::{Error, NcclCode, Result};

/// `ncclComm_t`: an opaque pointer to a communicator.
pub(crate) type Comm = *mut c_void;
/// `ncclResult_t`.
pub(crate) type Status = c_int;

/// The environment variable naming the NCCL library to load (a full path), tried first.
pub(crate) const ENV_VAR: &str = "GRAPH_RT_NCCL";
/// Where PyTorch's wheels put NCCL, below a `site-packages` folder.
pub(crate) const WHEEL_PATH: &str = "nvidia/nccl/lib/libnccl.so.2";
/// The library name tried last, found by the dynamic loader's usual rules.
pub(crate) const LIBRARY_NAME: &str = "libnccl.so.2";
/// The oldest NCCL graph-rt takes: the first with non-blocking communicators
/// (`ncclConfig_t.blocking`), `ncclCommFinalize` and `ncclGetLastError`.
pub(crate) const MIN_VERSION: (u32, u32) = (2, 14);

pub(crate) const NCCL_SUCCESS: Status = 0;
pub(crate) const NCCL_IN_PROGRESS: Status = 7;

/// `ncclUniqueId`: 128 opaque bytes.
pub(crate) const UNIQUE_ID_BYTES: usize = 128;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct UniqueIdRaw {
    pub(crate) internal: [c_char; UNIQUE_ID_BYTES],
}

/// `ncclConfig_t` as NCCL 2.14 laid it out (`ncclConfig_v21400`).
#[repr(C)]
pub(crate) struct Config {
    pub(crate) size: usize,
    pub(crate) magic: u32,
    pub(crate) version: u32,
    pub(crate) blocking: c_int,
    pub(crate) cga_cluster_size: c_int,
    pub(crate) min_ctas: c_int,
    pub(crate) max_ctas: c_int,
    pub(crate) net_name: *const c_char,
}

/// `NCCL_CONFIG_UNDEF_INT`: a field left at NCCL's default.
const UNDEF_INT: c_int = c_int::MIN;

impl Config {
    /// A non-blocking configuration, every other field at NCCL's default: calls return at
    /// once (`ncclInProgress` while they complete), so a peer that never comes cannot hang the
    /// caller, and the communicator can be aborted.
    pub(crate) fn non_blocking() -> Self {
        Self {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 21400,
            blocking: 0,
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
        }
    }
}

/// `ncclDataType_t`.
pub(crate) mod dtype {
    use std::ffi::c_int;
    pub(crate) const INT8: c_int = 0;
    pub(crate) const UINT8: c_int = 1;
    pub(crate) const INT32: c_int = 2;
    pub(crate) const UINT32: c_int = 3;
    pub(crate) const INT64: c_int = 4;
    pub(crate) const UINT64: c_int = 5;
    pub(crate) const FLOAT16: c_int = 6;
    pub(crate) const FLOAT32: c_int = 7;
    pub(crate) const FLOAT64: c_int = 8;
    pub(crate) const BFLOAT16: c_int = 9;
}

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> Status;
type GetUniqueIdFn = unsafe extern "C" fn(*mut UniqueIdRaw) -> Status;
type InitRankConfigFn =
    unsafe extern "C" fn(*mut Comm, c_int, UniqueIdRaw, c_int, *mut Config) -> Status;
type CommFn = unsafe extern "C" fn(Comm) -> Status;
type AsyncErrorFn = unsafe extern "C" fn(Comm, *mut Status) -> Status;
type CommIntFn = unsafe extern "C" fn(Comm, *mut c_int) -> Status;
type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;
type LastErrorFn = unsafe extern "C" fn(Comm) -> *const c_char;
type GroupFn = unsafe extern "C" fn() -> Status;
/// `ncclAllReduce(send, recv, count, datatype, op, comm, stream)`.
type AllReduceFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, CUstream) -> Status;
/// `ncclAllGather(send, recv, sendcount, datatype, comm, stream)`.
type AllGatherFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, CUstream) -> Status;
/// `ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream)`.
type ReduceScatterFn = AllReduceFn;
/// `ncclSend(send, count, datatype, peer, comm, stream)`.
type SendFn = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, CUstream) -> Status;
/// `ncclRecv(recv, count, datatype, peer, comm, stream)`.
type RecvFn = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, CUstream) -> Status;

/// An opened NCCL and the functions graph-rt uses, resolved from it. The library is kept in the
/// same value as the pointers, so they stay valid as long as it lives.
pub(crate) struct NcclLib {
    pub(crate) get_unique_id: GetUniqueIdFn,
    pub(crate) init_rank_config: InitRankConfigFn,
    pub(crate) finalize: CommFn,
    pub(crate) destroy: CommFn,
    pub(crate) abort: CommFn,
    pub(crate) async_error: AsyncErrorFn,
    pub(crate) count: CommIntFn,
    pub(crate) cu_device: CommIntFn,
    pub(crate) user_rank: CommIntFn,
    pub(crate) error_string: ErrorStringFn,
    pub(crate) last_error: LastErrorFn,
    pub(crate) group_start: GroupFn,
    pub(crate) group_end: GroupFn,
    pub(crate) all_reduce: AllReduceFn,
    pub(crate) all_gather: AllGatherFn,
    pub(crate) reduce_scatter: ReduceScatterFn,
    pub(crate) send: SendFn,
    pub(crate) recv: RecvFn,
    /// `ncclGetVersion`'s code, e.g. 22809 for 2.28.9.
    pub(crate) version: i32,
    /// The path or name it was opened by.
    pub(crate) path: OsString,
    // Keeps the code behind every pointer above mapped.
    _library: Library,
}

impl std::fmt::Debug for NcclLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclLib")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

static LIBRARY: OnceLock<NcclLib> = OnceLock::new();

/// The environment variable that, set to `1`, lets graph-rt ask the `python3` on the path (or
/// `$PYTHON`) where it installs packages, when no usual folder has PyTorch's NCCL. Off by
/// default: it runs a program found through `PATH`.
pub(crate) const PYTHON_SEARCH_VAR: &str = "GRAPH_RT_PYTHON_SEARCH";
/// How long that Python may take before it is killed and its answer ignored.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(10);

/// NCCL's variables that must be `0` for rebinding to follow a captured collective's buffers,
/// and why. NCCL reads them when it makes its first communicator; graph-rt does not set them (a
/// library writing the environment races with any thread reading it), and `ncclConfig_t` has no
/// field for them.
pub(crate) const REBINDING_VARS: [(&str, &str); 2] = [
    (
        "NCCL_NVLS_ENABLE",
        "NVLink multicast maps the buffers of a collective into a multicast object (cuMulticastCreate)",
    ),
    (
        "NCCL_GRAPH_REGISTER",
        "a captured collective's buffers are registered with the graph and read and written by its peers directly",
    ),
];

/// The process-wide NCCL, opened on first use from [`candidates`]. A failure is not cached: a
/// later call tries again.
pub(crate) fn library() -> Result<&'static NcclLib> {
    if let Some(lib) = LIBRARY.get() {
        return Ok(lib);
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        for w in environment_warnings(|v| std::env::var_os(v)) {
            tracing::warn!("graph-rt: {w}");
        }
    });
    let env = std::env::var_os(ENV_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let mut roots = python_roots(|v| std::env::var_os(v));
    if env.is_none()
        && python_search_wanted(std::env::var_os(PYTHON_SEARCH_VAR).as_deref())
        && !roots.iter().any(|r| r.join(WHEEL_PATH).is_file())
    {
        // PyTorch may live where no usual folder says (a virtual environment not activated):
        // ask the Python on the path where it installs packages.
        roots.extend(ask_python(PYTHON_TIMEOUT));
    }
    let lib = load_from(&candidates(env, &roots))?;
    Ok(LIBRARY.get_or_init(|| lib))
}

/// What to warn of about [`REBINDING_VARS`], as `get` reads the environment: a variable unset
/// (NCCL's default may turn the mechanism on) or set to anything but `0`.
pub(crate) fn environment_warnings(get: impl Fn(&str) -> Option<OsString>) -> Vec<String> {
    REBINDING_VARS
        .iter()
        .filter_map(|(var, why)| match get(var) {
            Some(v) if v == "0" => None,
            None => Some(format!(
                "{var} is unset, and NCCL may turn it on: {why}, which rebinding a captured \
                 collective cannot follow; set {var}=0 in the environment before the process starts"
            )),
            Some(v) => Some(format!(
                "{var}={}: {why}, which rebinding a captured collective cannot follow; set \
                 {var}=0 in the environment before the process starts",
                v.to_string_lossy()
            )),
        })
        .collect()
}

/// Whether [`PYTHON_SEARCH_VAR`]'s value `v` asks for the search (`1`).
pub(crate) fn python_search_wanted(v: Option<&OsStr>) -> bool {
    v == Some(OsStr::new("1"))
}

/// Folders Python installs packages into, where PyTorch's wheels put NCCL, as `get` reads the
/// environment: each absolute entry of `PYTHONPATH`, and `lib/python3*/site-packages` (or
/// `dist-packages`) below the active virtual environment, conda environment, the user's
/// `~/.local`, `/usr/local`, `/usr` and `/opt/conda`. Empty and relative entries are skipped
/// (with a warning): they would search the working folder.
pub(crate) fn python_roots(get: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    use crate::dylib::{absolute_root, absolute_roots};
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .into_iter()
        .filter_map(|var| {
            let v = get(var).filter(|v| !v.is_empty())?;
            absolute_root(var, PathBuf::from(v))
        })
        .collect();
    if let Some(home) = get("HOME").filter(|v| !v.is_empty()) {
        prefixes.extend(absolute_root("HOME", Path::new(&home).join(".local")));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    let mut roots: Vec<PathBuf> = get("PYTHONPATH")
        .map(|p| absolute_roots("PYTHONPATH", &p))
        .unwrap_or_default();
    for prefix in prefixes {
        roots.extend(site_folders(&prefix));
    }
    roots
}

/// The package folders of the `python3` on the path (or of `$PYTHON`): `site.getsitepackages()`,
/// the user's, and `sys.path`, the absolute ones. Empty when there is no Python, or it fails or
/// takes longer than `timeout` (it is killed then).
fn ask_python(timeout: Duration) -> Vec<PathBuf> {
    const ASK: &str = "import site, sys; print(chr(10).join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))";
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let mut command = std::process::Command::new(&python);
    command.args(["-I", "-c", ASK]);
    match crate::dylib::output_within(command, timeout) {
        Ok(out) => String::from_utf8_lossy(&out)
            .lines()
            .filter(|l| !l.is_empty())
            .filter_map(|l| crate::dylib::absolute_root("python's sys.path", PathBuf::from(l)))
            .collect(),
        Err(why) => {
            tracing::warn!(python = %python.to_string_lossy(), %why, "graph-rt: asking Python for its package folders failed");
            Vec::new()
        }
    }
}

/// `prefix/lib/python3*/{site,dist}-packages` and `prefix/lib/python3/dist-packages` that exist,
/// newest Python first.
pub(crate) fn site_folders(prefix: &Path) -> Vec<PathBuf> {
    let lib = prefix.join("lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path())
        .collect();
    pythons.sort_by(|a, b| b.cmp(a));
    pythons
        .into_iter()
        .flat_map(|p| [p.join("site-packages"), p.join("dist-packages")])
        .filter(|p| p.is_dir())
        .collect()
}

/// What to try, in order: `env` (the value of [`ENV_VAR`]) when set, then [`WHEEL_PATH`] below
/// each of `roots` where it exists (checked before it is opened: see [`Candidate::Found`]),
/// then [`LIBRARY_NAME`].
pub(crate) fn candidates(env: Option<PathBuf>, roots: &[PathBuf]) -> Vec<Candidate> {
    let wheels = roots
        .iter()
        .map(|r| r.join(WHEEL_PATH))
        .filter(|p| p.is_file())
        .map(Candidate::Found);
    let mut out: Vec<Candidate> = env
        .filter(|v| !v.as_os_str().is_empty())
        .map(Candidate::Named)
        .into_iter()
        .collect();
    for c in wheels.chain(std::iter::once(Candidate::Soname(LIBRARY_NAME))) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// Opens the first of `candidates` that passes its checks, loads, has every function and is
/// recent enough, without touching the process-wide library. The error lists every candidate
/// and why it failed.
pub(crate) fn load_from(candidates: &[Candidate]) -> Result<NcclLib> {
    let (major, minor) = MIN_VERSION;
    crate::dylib::first_that_opens("NCCL", candidates, open).map_err(|tried| {
        Error::invalid(
            "dlopen(libnccl)",
            format!(
                "could not load NCCL {major}.{minor} or later (tried {tried}): set {ENV_VAR} to the \
                 full path of libnccl.so.2, e.g. PyTorch's site-packages/{WHEEL_PATH}"
            ),
        )
    })
}

/// Opens `path`, resolves every function and checks the version, or says why not.
fn open(path: &OsStr) -> Result<NcclLib, String> {
    // SAFETY: loading NCCL runs its initialisers, which have no preconditions; the path is the
    // user's choice (GRAPH_RT_NCCL), a wheel's libnccl.so.2 that passed the owner and mode checks
    // (Candidate::vet), or the soname the loader finds.
    let library = unsafe { crate::dylib::open(path) }?;
    // SAFETY: the type is ncclGetVersion's C signature.
    let get_version: GetVersionFn = unsafe { symbol(&library, b"ncclGetVersion\0")? };
    let mut version = 0;
    // SAFETY: a valid out-pointer; the call reads no state.
    let status = unsafe { get_version(&mut version) };
    if status != NCCL_SUCCESS {
        return Err(format!("ncclGetVersion returned {status}"));
    }
    let (major, minor, patch) = split_version(version);
    if (major, minor) < MIN_VERSION {
        return Err(format!(
            "NCCL {major}.{minor}.{patch} is older than {}.{}, the first with non-blocking communicators",
            MIN_VERSION.0, MIN_VERSION.1
        ));
    }
    // SAFETY: each type is the function's C signature in NCCL 2.14 to 2.28 (nccl.h).
    unsafe {
        Ok(NcclLib {
            get_unique_id: symbol(&library, b"ncclGetUniqueId\0")?,
            init_rank_config: symbol(&library, b"ncclCommInitRankConfig\0")?,
            finalize: symbol(&library, b"ncclCommFinalize\0")?,
            destroy: symbol(&library, b"ncclCommDestroy\0")?,
            abort: symbol(&library, b"ncclCommAbort\0")?,
            async_error: symbol(&library, b"ncclCommGetAsyncError\0")?,
            count: symbol(&library, b"ncclCommCount\0")?,
            cu_device: symbol(&library, b"ncclCommCuDevice\0")?,
            user_rank: symbol(&library, b"ncclCommUserRank\0")?,
            error_string: symbol(&library, b"ncclGetErrorString\0")?,
            last_error: symbol(&library, b"ncclGetLastError\0")?,
            group_start: symbol(&library, b"ncclGroupStart\0")?,
            group_end: symbol(&library, b"ncclGroupEnd\0")?,
            all_reduce: symbol(&library, b"ncclAllReduce\0")?,
            all_gather: symbol(&library, b"ncclAllGather\0")?,
            reduce_scatter: symbol(&library, b"ncclReduceScatter\0")?,
            send: symbol(&library, b"ncclSend\0")?,
            recv: symbol(&library, b"ncclRecv\0")?,
            version,
            path: path.to_owned(),
            _library: library,
        })
    }
}

/// `ncclGetVersion`'s code as (major, minor, patch): `X·1000 + Y·100 + Z` up to 2.8, then
/// `X·10000 + Y·100 + Z`.
pub(crate) fn split_version(code: i32) -> (u32, u32, u32) {
    let code = code.max(0) as u32;
    if code < 10000 {
        (code / 1000, code % 1000 / 100, code % 100)
    } else {
        (code / 10000, code % 10000 / 100, code % 100)
    }
}

/// The function `name` (NUL-terminated) of `library`, copied out of its `Symbol`.
///
/// # Safety
/// `T` must be the type of the symbol.
unsafe fn symbol<T: Copy>(library: &Library, name: &[u8]) -> Result<T, String> {
    // SAFETY: forwarded to the caller.
    unsafe { crate::dylib::symbol(library, "NCCL", name) }
}

/// What the caller can do about a `ncclResult_t`.
pub(crate) fn hint(code: NcclCode) -> &'static str {
    match code {
        NcclCode::UnhandledCudaError => "a CUDA call inside NCCL failed: look for an earlier error on the stream or the context",
        NcclCode::SystemError => "a system call failed (sockets, shared memory, /dev/shm too small): see NCCL_DEBUG=WARN",
        NcclCode::InternalError => "NCCL failed internally: run with NCCL_DEBUG=WARN for its reason",
        NcclCode::InvalidArgument => "an argument NCCL refuses (a buffer, count, type, rank or peer)",
        NcclCode::InvalidUsage => "a call in the wrong order or state (two ranks on one GPU, a collective during another rank's init, a group left open)",
        NcclCode::RemoteError => "another rank failed or left: abort every communicator of the clique",
        NcclCode::InProgress => "the operation has not completed",
        NcclCode::Other(_) => "a result this version of graph-rt does not know: see the NCCL documentation",
    }
}

/// The error of `call`'s result `status` on `comm` (null when the call has none), with NCCL's
/// own last message when it has one.
pub(crate) fn error(lib: &NcclLib, call: &'static str, status: Status, comm: Comm) -> Error {
    let code = NcclCode::from_raw(status);
    // SAFETY: ncclGetErrorString returns a static string for any value; ncclGetLastError takes
    // a live communicator or null and returns a string NCCL keeps (copied at once).
    let text = unsafe { c_str((lib.error_string)(status)) };
    // SAFETY: as above.
    let last = unsafe { c_str((lib.last_error)(comm)) };
    Error::Nccl {
        call,
        code,
        detail: if last.is_empty() {
            text
        } else {
            format!("{text}: {last}")
        },
        hint: hint(code),
    }
}

/// Copies a C string NCCL returned (empty for null).
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: forwarded to the caller.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
