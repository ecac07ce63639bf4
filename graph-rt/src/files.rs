//! Files other programs, other users or earlier runs wrote, read without trusting them: opened
//! without following a final symbolic link and without blocking (a FIFO is refused, not waited
//! on), checked through the opened handle (a regular file, within a size cap), read with a
//! bound; and the owner and permission checks a library's path passes before it is loaded.
//!
//! Depends on `error` only.

use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Misuse};

/// The most bytes graph-rt reads from each kind of file: far above what a real one holds, so
/// that only a file that is not what it should be (or a device, or a sparse giant) is refused.
pub(crate) mod cap {
    /// Triton's metadata JSON.
    pub(crate) const TRITON_METADATA: u64 = 16 << 20;
    /// A Triton kernel's PTX, cubin or TTIR.
    pub(crate) const TRITON_CODE: u64 = 256 << 20;
    /// A decisions file or a cost model.
    pub(crate) const JSON_STATE: u64 = 64 << 20;
    /// An NCCL unique id file (128 bytes).
    pub(crate) const UNIQUE_ID: u64 = 4 << 10;
}

/// How a file is read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The most bytes read ([`cap`]).
    pub(crate) cap: u64,
    /// A secret (an NCCL unique id): the file must be the process's user's, with no access for
    /// group or others.
    pub(crate) private: bool,
}

/// Why a file was not read.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// No file at the path.
    Missing,
    /// The file system's failure.
    Io(std::io::Error),
    /// A symbolic link where a file was expected (not followed).
    Symlink,
    /// Not a regular file: what it is.
    NotRegular(&'static str),
    /// Larger than the cap.
    TooLarge { size: u64, cap: u64 },
    /// Owned by a user other than the process's (and, where allowed, root's).
    Owner { uid: u32 },
    /// Writable by group or others (`mode` is the permission bits).
    Writable { mode: u32 },
    /// Readable by group or others, for a secret.
    Readable { mode: u32 },
}

impl Refusal {
    /// What is wrong with `path`, in words.
    pub(crate) fn describe(&self, path: &Path) -> String {
        let p = path.display();
        match self {
            Refusal::Missing => format!("{p} does not exist"),
            Refusal::Io(e) => format!("cannot read {p}: {e}"),
            Refusal::Symlink => format!("{p} is a symbolic link, which graph-rt does not follow here: give the file itself"),
            Refusal::NotRegular(kind) => format!("{p} is {kind}, not a regular file"),
            Refusal::TooLarge { size, cap } => {
                format!("{p} holds {size} bytes, more than the {cap} graph-rt reads from such a file")
            }
            Refusal::Owner { uid } => format!(
                "{p} is owned by uid {uid}, not by this process's user ({}) or root: another user could have written it",
                euid()
            ),
            Refusal::Writable { mode } => format!(
                "{p} is writable by others (mode {mode:o}): another user could have written it; remove their write permission (chmod go-w)"
            ),
            Refusal::Readable { mode } => format!(
                "{p} is readable or writable by others (mode {mode:o}): it holds a secret; make it private (chmod 600)"
            ),
        }
    }

    /// The error of `call` refusing `path`: the file system's failure is
    /// [`Error::InvalidArgument`], a file too large [`Misuse::TooLarge`], any other refusal
    /// [`Misuse::UntrustedFile`].
    pub(crate) fn into_error(self, call: &'static str, path: &Path) -> Error {
        let reason = self.describe(path);
        match self {
            Refusal::Missing | Refusal::Io(_) => Error::invalid(call, reason),
            Refusal::TooLarge { .. } => {
                Error::misuse(call, Misuse::TooLarge { what: "file" }, reason)
            }
            _ => Error::misuse(call, Misuse::UntrustedFile, reason),
        }
    }
}

/// Writes `bytes` to `path` whole or not at all: into a new file of a random name in the same
/// folder, created with permissions `mode` (less the umask) and never through a symbolic link,
/// flushed to disk, then renamed over `path`. A reader sees the old file or the new one, never
/// a part; a symbolic link at `path` is replaced, its target never written; nothing is left
/// behind on failure.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let Some(name) = path.file_name() else {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            "the path names no file",
        ));
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.{:016x}.tmp", name.to_string_lossy(), random()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        // Best effort: the write failed already, and that failure is what is reported.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A random number for a temporary file's name, so that no other user can plant a file there
/// first (std's hasher keys are random for each process).
fn random() -> u64 {
    use std::hash::BuildHasher;
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::hash::RandomState::new().hash_one((std::process::id(), n, now))
}

/// The effective user id of the process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// What a file that is not regular is, for a message.
fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Reads the file at `path` by `rules`: never follows a final symbolic link, never blocks on a
/// FIFO, checks the opened file (not the path, which may change in between) and reads at most
/// `rules.cap` bytes.
pub(crate) fn read(path: &Path, rules: Rules) -> Result<Vec<u8>, Refusal> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => Refusal::Missing,
            _ if e.raw_os_error() == Some(libc::ELOOP) => Refusal::Symlink,
            _ => Refusal::Io(e),
        })?;
    let meta = file.metadata().map_err(Refusal::Io)?;
    if !meta.file_type().is_file() {
        return Err(Refusal::NotRegular(kind(&meta)));
    }
    if rules.private {
        check_private(&meta)?;
    }
    if meta.len() > rules.cap {
        return Err(Refusal::TooLarge {
            size: meta.len(),
            cap: rules.cap,
        });
    }
    read_bounded(file, meta.len(), rules.cap)
}

/// Reads `file` to its end, at most `cap` bytes (it may have grown since it was checked).
fn read_bounded(file: File, len: u64, cap: u64) -> Result<Vec<u8>, Refusal> {
    let mut out = Vec::with_capacity(len as usize);
    file.take(cap + 1)
        .read_to_end(&mut out)
        .map_err(Refusal::Io)?;
    if out.len() as u64 > cap {
        return Err(Refusal::TooLarge {
            size: out.len() as u64,
            cap,
        });
    }
    Ok(out)
}

/// A secret's file: the process's user's, with no permission for group or others.
pub(crate) fn check_private(meta: &Metadata) -> Result<(), Refusal> {
    if meta.uid() != euid() {
        return Err(Refusal::Owner { uid: meta.uid() });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Refusal::Readable { mode });
    }
    Ok(())
}

/// A file or folder no other user could have changed: owned by root or the process's user, not
/// writable by group or others (a folder that is, with the sticky bit, as `/tmp`, lets no other
/// user replace what it holds, and passes).
pub(crate) fn check_not_shared(meta: &Metadata) -> Result<(), Refusal> {
    owner_and_mode_allowed(meta.uid(), meta.mode(), meta.is_dir())
}

/// [`check_not_shared`] on the owner `uid` and the `mode` bits of a folder (`dir`) or a file.
pub(crate) fn owner_and_mode_allowed(uid: u32, mode: u32, dir: bool) -> Result<(), Refusal> {
    if uid != 0 && uid != euid() {
        return Err(Refusal::Owner { uid });
    }
    let sticky = dir && mode & libc::S_ISVTX != 0;
    if mode & 0o022 != 0 && !sticky {
        return Err(Refusal::Writable {
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// The real path of a library found below a folder an environment variable named, once it and
/// every folder above it pass [`check_not_shared`], and it is a regular file: checked without
/// opening it, so that a refused library's initialisers never run.
pub(crate) fn check_library(path: &Path) -> Result<PathBuf, String> {
    if !path.is_absolute() {
        return Err("not an absolute path".to_owned());
    }
    let real = std::fs::canonicalize(path).map_err(|e| Refusal::Io(e).describe(path))?;
    let meta = std::fs::metadata(&real).map_err(|e| Refusal::Io(e).describe(&real))?;
    if !meta.is_file() {
        return Err(Refusal::NotRegular(kind(&meta)).describe(&real));
    }
    check_not_shared(&meta).map_err(|r| r.describe(&real))?;
    for folder in real.ancestors().skip(1) {
        let m = std::fs::metadata(folder).map_err(|e| Refusal::Io(e).describe(folder))?;
        check_not_shared(&m).map_err(|r| r.describe(folder))?;
    }
    Ok(real)
}

/// A library the user named (an environment variable): taken as their choice, but it must be
/// an absolute path to a regular file (a relative one would depend on the working folder).
pub(crate) fn check_named_library(path: &Path) -> Result<(), String> {
    if !path.is_absolute() {
        return Err("not an absolute path: name the library by its full path".to_owned());
    }
    let meta = std::fs::metadata(path).map_err(|e| Refusal::Io(e).describe(path))?;
    if !meta.is_file() {
        return Err(Refusal::NotRegular(kind(&meta)).describe(path));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    /// A fresh folder of the temporary folder.
    pub(crate) fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("graph-rt-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    const RULES: Rules = Rules {
        cap: 1 << 20,
        private: false,
    };

    #[test]
    fn a_fifo_is_refused_at_once_not_waited_on() {
        let dir = temp("fifo");
        let fifo = dir.join("k.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        std::thread::spawn(move || tx.send(read(&f, RULES).map(|_| ())));
        // No writer ever comes: a blocking open would never return.
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the read blocked on a FIFO");
        assert!(matches!(got, Err(Refusal::NotRegular("a FIFO"))), "{got:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_over_its_cap_is_refused_before_it_is_read() {
        let dir = temp("large");
        let path = dir.join("big");
        // Sparse: a terabyte that takes no disk.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let e = read(&path, RULES).unwrap_err();
        assert!(
            matches!(e, Refusal::TooLarge { size, cap } if size == 1 << 40 && cap == 1 << 20),
            "{e:?}"
        );
        let e = e.into_error("x", &path);
        assert_eq!(e.misuse_kind(), Some(&Misuse::TooLarge { what: "file" }));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_a_folder_and_a_missing_file_are_told_apart() {
        let dir = temp("kinds");
        let link = dir.join("link");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert!(matches!(read(&link, RULES), Err(Refusal::Symlink)));
        let e = read(&link, RULES).unwrap_err().into_error("x", &link);
        assert_eq!(e.misuse_kind(), Some(&Misuse::UntrustedFile));
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(matches!(
            read(&dir, RULES),
            Err(Refusal::NotRegular("a folder"))
        ));
        assert!(matches!(
            read(&dir.join("none"), RULES),
            Err(Refusal::Missing)
        ));
        std::fs::write(dir.join("ok"), b"abc").unwrap();
        assert_eq!(read(&dir.join("ok"), RULES).unwrap(), b"abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_secret_must_be_private_and_ours() {
        let dir = temp("secret");
        let path = dir.join("id");
        write_atomic(&path, b"secret", 0o600).unwrap();
        let private = Rules {
            cap: 64,
            private: true,
        };
        assert_eq!(read(&path, private).unwrap(), b"secret");
        for mode in [0o644, 0o640, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read(&path, private).unwrap_err();
            assert!(
                matches!(e, Refusal::Readable { mode: m } if m == mode),
                "{e:?}"
            );
        }
        if euid() == 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&path, Some(1), None).unwrap();
            assert!(matches!(
                read(&path, private),
                Err(Refusal::Owner { uid: 1 })
            ));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn owners_and_modes_that_let_another_user_write_are_refused() {
        let me = euid();
        assert!(owner_and_mode_allowed(me, 0o644, false).is_ok());
        assert!(owner_and_mode_allowed(0, 0o755, true).is_ok());
        // A sticky folder writable by all (/tmp) lets no one replace another's entries.
        assert!(owner_and_mode_allowed(0, 0o1777, true).is_ok());
        assert!(matches!(
            owner_and_mode_allowed(0, 0o1777, false),
            Err(Refusal::Writable { .. })
        ));
        assert!(matches!(
            owner_and_mode_allowed(me, 0o775, true),
            Err(Refusal::Writable { mode: 0o775 })
        ));
        assert!(matches!(
            owner_and_mode_allowed(me, 0o646, false),
            Err(Refusal::Writable { .. })
        ));
        let other = if me == 4242 { 4243 } else { 4242 };
        assert!(matches!(
            owner_and_mode_allowed(other, 0o644, false),
            Err(Refusal::Owner { .. })
        ));
    }

    #[test]
    fn an_atomic_write_replaces_a_planted_symlink_and_never_writes_its_target() {
        let dir = temp("atomic");
        let target = dir.join("precious");
        std::fs::write(&target, b"keep").unwrap();
        let path = dir.join("state.json");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        write_atomic(&path, b"new", 0o644).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // Nothing left beside it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_library_path_is_checked_without_opening_it() {
        let dir = temp("library");
        assert_eq!(
            check_library(Path::new("lib/libx.so")).unwrap_err(),
            "not an absolute path"
        );
        let lib = dir.join("libx.so");
        std::fs::write(&lib, b"not a library").unwrap();
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            check_library(&lib).unwrap(),
            std::fs::canonicalize(&lib).unwrap()
        );
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check_library(&lib)
            .unwrap_err()
            .contains("writable by others"));
        assert!(check_library(&dir).unwrap_err().contains("a folder"));
        assert!(check_named_library(Path::new("./libx.so")).is_err());
        assert!(
            check_named_library(&lib).is_ok(),
            "the user's choice: no owner check"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
