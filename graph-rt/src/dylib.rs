//! Libraries loaded at run time (cuBLAS, NCCL): the first of a list of candidates that opens,
//! and the functions resolved from it.

use std::ffi::{OsStr, OsString};

use graph_rt_sys::with_sources;
use libloading::Library;

/// Opens the first of `candidates` that `open` accepts. `Err` lists every candidate with why it
/// failed (`"nothing"` for an empty list), for the caller's error. `what` names the library in
/// the warning logged when a later candidate is taken.
pub(crate) fn first_that_opens<L>(
    what: &str,
    candidates: &[OsString],
    open: impl Fn(&OsStr) -> Result<L, String>,
) -> Result<L, String> {
    let mut failed = Vec::new();
    for candidate in candidates {
        match open(candidate) {
            Ok(lib) => {
                if !failed.is_empty() {
                    tracing::warn!(
                        loaded = %candidate.to_string_lossy(),
                        failed = %failed.join("; "),
                        "graph-rt: {what} loaded from a later candidate"
                    );
                }
                return Ok(lib);
            }
            Err(reason) => failed.push(format!("{}: {reason}", candidate.to_string_lossy())),
        }
    }
    Err(if failed.is_empty() {
        "nothing".to_owned()
    } else {
        failed.join("; ")
    })
}

/// Opens `path` (runs its initialisers), or says why not.
///
/// # Safety
/// The library's initialisers must be safe to run: a library graph-rt knows (cuBLAS, NCCL)
/// under the name or path the user or the loader gave.
pub(crate) unsafe fn open(path: &OsStr) -> Result<Library, String> {
    // SAFETY: forwarded to the caller.
    unsafe { Library::new(path) }.map_err(|e| with_sources(&e))
}

/// The function `name` (NUL-terminated) of `library`, copied out of its `Symbol`; `what` names
/// the library in the error (`not <what>: no symbol …`).
///
/// # Safety
/// `T` must be the type of the symbol.
pub(crate) unsafe fn symbol<T: Copy>(
    library: &Library,
    what: &str,
    name: &[u8],
) -> Result<T, String> {
    // SAFETY: forwarded to the caller.
    match unsafe { library.get::<T>(name) } {
        Ok(s) => Ok(*s),
        Err(e) => Err(format!(
            "not {what}: no symbol {} ({})",
            String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name)),
            with_sources(&e)
        )),
    }
}
