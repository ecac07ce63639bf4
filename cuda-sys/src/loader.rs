//! Opens `libcuda.so.1` and resolves driver entry points through `cuGetProcAddress`.
//!
//! This is the only module of the crate with hand-written `unsafe` code: it turns symbol
//! addresses into function pointers. The rest is generated.

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::bindings::{
    cuuint64_t, CUdriverProcAddressQueryResult, CUdriverProcAddress_flags, CUresult,
};

/// The file the driver is loaded from.
pub const LIBRARY_NAME: &str = "libcuda.so.1";
/// `CUDA_VERSION` of the `cuda.h` these bindings were generated from (12.9).
pub const HEADER_VERSION: i32 = 12090;
/// The oldest driver this crate supports: CUDA 12.4.
pub const MIN_DRIVER_VERSION: i32 = 12040;
/// Environment variable that makes the process-wide [`driver()`] behave as a driver of the given
/// version (`12040` = CUDA 12.4) when resolving functions: a way to check on a new driver that a
/// program only uses what an older one has. It can only lower the version, never raise it.
pub const SIMULATE_VERSION_ENV: &str = "CUDA_SYS_SIMULATE_DRIVER_VERSION";

/// Formats a CUDA version number (`12040`) as the driver documentation does (`12.4`).
pub fn format_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// Why the driver, or one of its functions, is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// `libcuda.so.1` could not be opened.
    #[error(
        "could not load {LIBRARY_NAME}: {reason}; install the NVIDIA driver (CUDA {} or newer) \
         or make {LIBRARY_NAME} findable by the dynamic loader (LD_LIBRARY_PATH)",
        format_version(MIN_DRIVER_VERSION)
    )]
    Library {
        /// What the dynamic loader said.
        reason: String,
    },
    /// The library opened but lacks an entry point every supported driver exports.
    #[error(
        "{LIBRARY_NAME} has no `{symbol}`: it is not an NVIDIA driver of CUDA {} or newer",
        format_version(MIN_DRIVER_VERSION)
    )]
    NotADriver {
        /// The missing entry point.
        symbol: &'static str,
    },
    /// The driver is older than [`MIN_DRIVER_VERSION`].
    #[error(
        "the NVIDIA driver supports CUDA {}, graph-rt needs CUDA {} or newer: update the driver",
        format_version(*found),
        format_version(MIN_DRIVER_VERSION)
    )]
    DriverTooOld {
        /// `cuDriverGetVersion` of the installed driver.
        found: i32,
    },
    /// The function was added in a driver newer than the installed one.
    #[error(
        "`{symbol}` needs a driver of CUDA {} or newer; this driver supports CUDA {}{}",
        format_version(*needed),
        format_version(*found),
        if *simulated { " (simulated)" } else { "" }
    )]
    Unsupported {
        /// The function, as `cuda.h` names it.
        symbol: &'static str,
        /// The driver version that introduced the ABI these bindings use.
        needed: i32,
        /// The installed (or simulated) driver version.
        found: i32,
        /// Whether `found` comes from [`SIMULATE_VERSION_ENV`] or [`Driver::simulate_version`].
        simulated: bool,
    },
    /// The driver does not export the function at all.
    #[error("the driver (CUDA {}) has no `{symbol}`", format_version(*found))]
    NotFound {
        /// The function, as `cuda.h` names it.
        symbol: &'static str,
        /// The installed driver version.
        found: i32,
    },
    /// `cuGetProcAddress` itself failed.
    #[error("cuGetProcAddress(\"{symbol}\") failed with CUresult {code}")]
    Resolve {
        /// The function, as `cuda.h` names it.
        symbol: &'static str,
        /// The raw `CUresult`.
        code: u32,
    },
}

type GetProcAddress = unsafe extern "C" fn(
    *const std::ffi::c_char,
    *mut *mut c_void,
    c_int,
    cuuint64_t,
    *mut CUdriverProcAddressQueryResult,
) -> CUresult;

/// An error's message followed by its sources' (libloading 0.9 keeps what `dlerror` said in the
/// source of its `DlOpen` error; 0.8 in the message). Also used by graph-rt's other run-time
/// loaded libraries (cuBLAS).
pub fn with_sources(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

/// An opened driver library.
///
/// Most code never touches this: the generated functions use the process-wide [`driver()`].
pub struct Driver {
    get_proc_address: GetProcAddress,
    version: i32,
    simulated: Option<i32>,
    // Keeps the code behind `get_proc_address` and every resolved pointer mapped.
    _library: libloading::Library,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("version", &self.version)
            .field("simulated", &self.simulated)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// Opens [`LIBRARY_NAME`] and checks it is a driver of CUDA 12.4 or newer.
    pub fn open() -> Result<Self, LoadError> {
        // SAFETY: loading libcuda runs its initialisers, which have no preconditions; the library
        // is the system's NVIDIA driver, found by the dynamic loader's usual rules.
        let library =
            unsafe { libloading::Library::new(LIBRARY_NAME) }.map_err(|e| LoadError::Library {
                reason: with_sources(&e),
            })?;
        type GetVersion = unsafe extern "C" fn(*mut c_int) -> CUresult;
        // SAFETY: both symbols have these C signatures in every driver since CUDA 12.0 (cuda.h).
        let (get_version, get_proc_address) = unsafe {
            let v = library
                .get::<GetVersion>(b"cuDriverGetVersion\0")
                .map_err(|_| LoadError::NotADriver {
                    symbol: "cuDriverGetVersion",
                })?;
            let p = library
                .get::<GetProcAddress>(b"cuGetProcAddress_v2\0")
                .map_err(|_| LoadError::NotADriver {
                    symbol: "cuGetProcAddress_v2",
                })?;
            (*v, *p)
        };
        let mut version = 0;
        // SAFETY: the pointer is valid for one write; the call needs no cuInit.
        let rc = unsafe { get_version(&mut version) };
        if rc != CUresult::CUDA_SUCCESS {
            return Err(LoadError::Resolve {
                symbol: "cuDriverGetVersion",
                code: rc.0,
            });
        }
        if version < MIN_DRIVER_VERSION {
            return Err(LoadError::DriverTooOld { found: version });
        }
        Ok(Self {
            get_proc_address,
            version,
            simulated: None,
            _library: library,
        })
    }

    /// Makes this driver refuse every function newer than `version`, as a driver of that version
    /// would. It can only lower the version.
    pub fn simulate_version(mut self, version: i32) -> Self {
        self.simulated = Some(version.min(self.version));
        self
    }

    /// The installed driver's CUDA version (`cuDriverGetVersion`), e.g. `13000`.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// The version functions are resolved against: the simulated one, if any.
    pub fn effective_version(&self) -> i32 {
        self.simulated.unwrap_or(self.version)
    }

    /// Resolves `symbol` (the name `cuda.h` writes, e.g. `cuMemAlloc`) at ABI version `abi`
    /// (the CUDA version whose signature the caller will use, e.g. `3020`).
    pub fn resolve(&self, symbol: &'static CStr, abi: i32) -> Result<*mut c_void, LoadError> {
        let name = symbol.to_str().unwrap_or("<non-UTF-8 symbol>");
        let found = self.effective_version();
        if abi > found {
            return Err(LoadError::Unsupported {
                symbol: name,
                needed: abi,
                found,
                simulated: self.simulated.is_some(),
            });
        }
        let mut ptr = std::ptr::null_mut();
        let mut status = CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
        let flags = CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_LEGACY_STREAM.0 as cuuint64_t;
        // SAFETY: `symbol` is NUL-terminated; `ptr` and `status` are valid for one write each.
        let rc =
            unsafe { (self.get_proc_address)(symbol.as_ptr(), &mut ptr, abi, flags, &mut status) };
        match status {
            CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT => {
                Err(LoadError::Unsupported {
                    symbol: name,
                    needed: abi,
                    found,
                    simulated: false,
                })
            }
            CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND => {
                Err(LoadError::NotFound {
                    symbol: name,
                    found,
                })
            }
            _ if rc != CUresult::CUDA_SUCCESS => Err(LoadError::Resolve {
                symbol: name,
                code: rc.0,
            }),
            _ if ptr.is_null() => Err(LoadError::NotFound {
                symbol: name,
                found,
            }),
            _ => Ok(ptr),
        }
    }
}

static DRIVER: OnceLock<Result<Driver, LoadError>> = OnceLock::new();

/// The process-wide driver, opened on first use. The outcome, success or failure, is kept for
/// the life of the process.
pub fn driver() -> Result<&'static Driver, LoadError> {
    DRIVER
        .get_or_init(|| {
            let driver = Driver::open()?;
            let simulated = std::env::var(SIMULATE_VERSION_ENV)
                .ok()
                .and_then(|v| v.trim().parse::<i32>().ok());
            Ok(match simulated {
                Some(v) => driver.simulate_version(v),
                None => driver,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// One driver entry point, resolved through the process-wide [`driver()`] on first use.
///
/// The generated functions hold one each in a `static`; after the first call, using it costs one
/// atomic load.
pub struct Symbol {
    name: &'static CStr,
    abi: i32,
    slot: OnceLock<Result<usize, LoadError>>,
}

impl Symbol {
    /// A symbol `name` (as `cuda.h` writes it, NUL-terminated) at ABI version `abi`.
    pub const fn new(name: &'static CStr, abi: i32) -> Self {
        Self {
            name,
            abi,
            slot: OnceLock::new(),
        }
    }

    /// The entry point's address.
    #[inline]
    pub fn address(&self) -> Result<*mut c_void, LoadError> {
        match self.slot.get_or_init(|| {
            driver()
                .and_then(|d| d.resolve(self.name, self.abi))
                .map(|p| p as usize)
        }) {
            Ok(p) => Ok(*p as *mut c_void),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Turns each line of `functions.rs` into an `unsafe fn` that resolves its entry point on first
/// use and calls it.
#[macro_export]
#[doc(hidden)]
macro_rules! driver_api {
    ($(fn $name:ident($sym:literal, $abi:literal, $exported:literal)($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        $(
            #[doc = concat!("Calls `", $exported, "` (`cuGetProcAddress(\"", $sym, "\")` at ABI version ",
                stringify!($abi), ").\n\n# Safety\nThe contract of `", $exported,
                "` in the CUDA driver API documentation.\n\n# Errors\n[`LoadError`](crate::LoadError) \
                when the driver cannot be loaded or lacks this function.")]
            #[inline]
            pub unsafe fn $name($($arg: $ty),*) -> ::core::result::Result<$ret, $crate::LoadError> {
                static SYMBOL: $crate::Symbol = $crate::Symbol::new(
                    match ::core::ffi::CStr::from_bytes_with_nul(concat!($sym, "\0").as_bytes()) {
                        Ok(name) => name,
                        Err(_) => panic!("symbol name with an interior NUL"),
                    },
                    $abi,
                );
                let address = SYMBOL.address()?;
                // SAFETY: cuGetProcAddress returned the entry point of this ABI version, whose
                // C signature bindgen translated into this one (checked by generate.py).
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { ::core::mem::transmute(address) };
                // SAFETY: the caller upholds the driver function's contract.
                Ok(unsafe { f($($arg),*) })
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_format_as_the_driver_documents_them() {
        assert_eq!(format_version(12040), "12.4");
        assert_eq!(format_version(13000), "13.0");
        assert_eq!(format_version(12090), "12.9");
    }

    #[test]
    fn without_a_driver_the_error_names_the_library() {
        // On a machine with a driver this checks the opposite: loading works and is recent enough.
        match Driver::open() {
            Ok(d) => assert!(d.version() >= MIN_DRIVER_VERSION),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains(LIBRARY_NAME) || msg.contains("CUDA"), "{msg}");
                // A generated function reports the same error instead of panicking.
                let mut v = 0;
                // SAFETY: valid out-pointer (the call does not happen: the driver is missing).
                let r = unsafe { crate::cuDriverGetVersion(&mut v) };
                assert_eq!(r, Err(e));
            }
        }
    }

    #[test]
    fn unsupported_names_symbol_and_both_versions() {
        let e = LoadError::Unsupported {
            symbol: "cuGraphConditionalHandleCreate",
            needed: 12030,
            found: 12020,
            simulated: true,
        };
        assert_eq!(
            e.to_string(),
            "`cuGraphConditionalHandleCreate` needs a driver of CUDA 12.3 or newer; this driver supports CUDA 12.2 (simulated)"
        );
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn resolves_lazily_at_the_header_abi() {
        let d = driver().expect("driver");
        let mut v = 0;
        // SAFETY: valid out-pointer.
        assert_eq!(
            unsafe { crate::cuDriverGetVersion(&mut v) },
            Ok(CUresult::CUDA_SUCCESS)
        );
        assert_eq!(v, d.version());
        // A symbol the header declares at a version newer than any driver is refused, named.
        let e = d.resolve(c"cuMemAlloc", 99_000).unwrap_err();
        assert!(
            matches!(
                e,
                LoadError::Unsupported {
                    symbol: "cuMemAlloc",
                    needed: 99_000,
                    ..
                }
            ),
            "{e}"
        );
        // A symbol no driver has.
        let e = d.resolve(c"cuNoSuchFunction", 12000).unwrap_err();
        assert!(
            matches!(
                e,
                LoadError::NotFound {
                    symbol: "cuNoSuchFunction",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn simulated_version_env_applies_to_the_process_driver() {
        // Run this test binary again, filtered to the child half below, with the variable set.
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--include-ignored",
                "--exact",
                "loader::tests::child_under_simulated_12_3",
                "--nocapture",
            ])
            .env(SIMULATE_VERSION_ENV, "12030")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn child_under_simulated_12_3() {
        if std::env::var(SIMULATE_VERSION_ENV).is_err() {
            return;
        }
        let (mut offset, mut size) = (0, 0);
        // SAFETY: the call never reaches the driver: the simulated driver lacks it.
        let r =
            unsafe { crate::cuFuncGetParamInfo(std::ptr::null_mut(), 0, &mut offset, &mut size) };
        let e = r.unwrap_err();
        assert_eq!(
            e.to_string(),
            "`cuFuncGetParamInfo` needs a driver of CUDA 12.4 or newer; this driver supports CUDA 12.3 (simulated)"
        );
    }
}
