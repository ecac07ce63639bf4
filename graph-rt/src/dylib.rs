//! Libraries loaded at run time (cuBLAS, NCCL): the first of a list of candidates that opens,
//! and the functions resolved from it.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use graph_rt_sys::with_sources;
use libloading::Library;

/// A library to try, and how much of it graph-rt checks before opening it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Candidate {
    /// The file the user named (`GRAPH_RT_NCCL`, `GRAPH_RT_CUBLAS`): their choice, but an
    /// absolute path to a regular file.
    Named(PathBuf),
    /// A file found below a folder an environment variable or Python named: it and every
    /// folder above it must be root's or the process's user's, and not writable by others.
    Found(PathBuf),
    /// A soname (`libnccl.so.2`), left to the dynamic loader's own search rules.
    Soname(&'static str),
}

impl Candidate {
    /// What to hand to `dlopen` once the checks pass: the path as given, the real path of a
    /// found file (the one checked), or the soname. Checked without opening anything, so that
    /// a refused candidate's initialisers never run.
    pub(crate) fn vet(&self) -> Result<OsString, String> {
        match self {
            Candidate::Named(p) => {
                crate::files::check_named_library(p)?;
                Ok(p.clone().into_os_string())
            }
            Candidate::Found(p) => crate::files::check_library(p).map(PathBuf::into_os_string),
            Candidate::Soname(name) => Ok(OsString::from(name)),
        }
    }

    /// The path or name, for messages.
    pub(crate) fn display(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Candidate::Named(p) | Candidate::Found(p) => p.to_string_lossy(),
            Candidate::Soname(name) => (*name).into(),
        }
    }
}

/// Opens the first of `candidates` that passes its checks ([`Candidate::vet`]) and that `open`
/// accepts, and logs what loaded. `Err` lists every candidate with why it failed (`"nothing"`
/// for an empty list), for the caller's error. `what` names the library in the logs.
pub(crate) fn first_that_opens<L>(
    what: &str,
    candidates: &[Candidate],
    open: impl Fn(&OsStr) -> Result<L, String>,
) -> Result<L, String> {
    let mut failed = Vec::new();
    for candidate in candidates {
        match candidate
            .vet()
            .and_then(|path| open(&path).map(|lib| (lib, path)))
        {
            Ok((lib, path)) => {
                if !failed.is_empty() {
                    tracing::warn!(
                        loaded = %path.to_string_lossy(),
                        failed = %failed.join("; "),
                        "graph-rt: {what} loaded from a later candidate"
                    );
                }
                tracing::info!(path = %path.to_string_lossy(), "graph-rt: {what} loaded");
                return Ok(lib);
            }
            Err(reason) => {
                tracing::debug!(candidate = %candidate.display(), %reason, "graph-rt: {what} candidate refused");
                failed.push(format!("{}: {reason}", candidate.display()));
            }
        }
    }
    Err(if failed.is_empty() {
        "nothing".to_owned()
    } else {
        failed.join("; ")
    })
}

/// The absolute folders of `value` (a `PATH`-like list, e.g. `PYTHONPATH`), each as
/// [`absolute_root`] takes it.
pub(crate) fn absolute_roots(var: &str, value: &OsStr) -> Vec<PathBuf> {
    std::env::split_paths(value)
        .filter_map(|p| absolute_root(var, p))
        .collect()
}

/// `root` when it is absolute. An empty root (the working folder, to Python) or a relative one
/// would let whoever controls the working folder supply a library: none is searched, with a
/// warning naming `var`.
pub(crate) fn absolute_root(var: &str, root: PathBuf) -> Option<PathBuf> {
    if root.is_absolute() {
        return Some(root);
    }
    tracing::warn!(
        entry = %root.display(),
        "graph-rt: an empty or relative entry of {var} is not searched for libraries"
    );
    None
}

/// The standard output of `command` (its input and errors go nowhere), at most 1 MiB, if it
/// ends with success within `timeout`; killed past it. Its output is read while it runs, without
/// blocking, so that neither a full pipe nor a process it leaves behind holding the pipe can
/// hold the caller.
pub(crate) fn output_within(
    mut command: std::process::Command,
    timeout: std::time::Duration,
) -> Result<Vec<u8>, String> {
    use std::io::{ErrorKind, Read};
    use std::os::fd::AsRawFd;
    use std::process::Stdio;
    const MAX: usize = 1 << 20;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let stop = |child: &mut std::process::Child, why: String| {
        let _ = child.kill();
        let _ = child.wait();
        Err(why)
    };
    let Some(mut stdout) = child.stdout.take() else {
        return stop(&mut child, "no pipe to its output".to_owned());
    };
    // SAFETY: `stdout` holds the descriptor open; F_SETFL with O_NONBLOCK only changes how
    // reads of it wait.
    if unsafe { libc::fcntl(stdout.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
        let e = std::io::Error::last_os_error();
        return stop(&mut child, format!("cannot read its output: {e}"));
    }
    let deadline = std::time::Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let exited = match child.try_wait() {
            Ok(status) => status,
            Err(e) => return stop(&mut child, format!("cannot wait for it: {e}")),
        };
        loop {
            match stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if out.len() + n > MAX => {
                    return stop(&mut child, format!("it wrote more than {MAX} bytes"));
                }
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return stop(&mut child, format!("cannot read its output: {e}")),
            }
        }
        match exited {
            Some(status) if status.success() => return Ok(out),
            Some(status) => return Err(format!("it ended with {status}")),
            None if std::time::Instant::now() >= deadline => {
                return stop(
                    &mut child,
                    format!("still running after {timeout:?}: killed"),
                );
            }
            None => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_program_that_runs_too_long_is_killed_at_its_deadline() {
        let start = Instant::now();
        let mut c = std::process::Command::new("sh");
        c.args(["-c", "echo partial; exec sleep 30"]);
        let e = output_within(c, Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("killed"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(10));
        // A process it leaves behind holding the pipe does not hold the caller.
        let start = Instant::now();
        let mut c = std::process::Command::new("sh");
        c.args(["-c", "echo /usr; sleep 30 &"]);
        assert_eq!(output_within(c, Duration::from_secs(5)).unwrap(), b"/usr\n");
        assert!(start.elapsed() < Duration::from_secs(5));
        let e = output_within(std::process::Command::new("false"), Duration::from_secs(5));
        assert!(e.unwrap_err().contains("ended with"));
        let e = output_within(
            std::process::Command::new("/nonexistent/python3"),
            Duration::from_secs(5),
        );
        assert!(e.unwrap_err().contains("cannot start it"));
    }

    #[test]
    fn relative_roots_are_dropped() {
        let roots = absolute_roots("PYTHONPATH", OsStr::new(":a:/b::./c:/d/e:"));
        assert_eq!(roots, [PathBuf::from("/b"), PathBuf::from("/d/e")]);
        assert_eq!(absolute_root("HOME", PathBuf::from("home")), None);
    }
}
