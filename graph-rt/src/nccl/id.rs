//! The unique id every rank of one communicator is made with, and how ranks of other processes
//! get it: a file written whole, or a Unix-domain socket that one rank serves.

use std::io::{ErrorKind, Read};
use std::path::Path;
use std::time::{Duration, Instant};

use super::comm::check;
use super::sys::{self, UniqueIdRaw, UNIQUE_ID_BYTES};
use crate::error::{Error, Misuse, Result};
use crate::files;

/// What [`UniqueId::serve`] sends before the id: a peer that connects to any other socket gets
/// an error naming it, never 128 bytes of something else taken for an id.
const GREETING: &[u8; 16] = b"graph-rt nccl 1\n";

/// What [`UniqueId::receive`] sends first: only a connection that asks is served (and counted),
/// so that a connection that only probes whether the socket is live takes no peer's place.
const ASK: u8 = b'?';

/// Writes all of `buf` to `s` with `MSG_NOSIGNAL`: a peer gone is an error (`EPIPE`), never a
/// `SIGPIPE`, which ends a process that does not ignore it (a Python host's, say).
fn send_all(s: &std::os::unix::net::UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: `s` holds the socket open; `buf` is `buf.len()` readable bytes.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// The user id of the process at the other end of `s` (`SO_PEERCRED`: its credentials when it
/// connected, or made the socket).
fn peer_uid(s: &std::os::unix::net::UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `s` holds the socket open; `cred` and `len` are valid for writes of the sizes
    // given, and SO_PEERCRED writes a `ucred`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Refuses a peer of the id's socket that runs as `uid`, another user than this process: it
/// could serve a forged id, or take a rank's place.
fn check_peer(call: &'static str, uid: u32) -> Result<()> {
    let ours = files::euid();
    if uid == ours {
        return Ok(());
    }
    let reason = format!(
        "the other end of the socket runs as uid {uid}, not as this process's user ({ours}): \
         put the socket in a folder only this user can reach ($XDG_RUNTIME_DIR), and run every \
         rank as one user"
    );
    Err(Error::misuse(call, Misuse::ForeignPeer { uid }, reason))
}

/// Waits for something another process does: pauses from 0.1 ms, doubling up to 20 ms, until
/// `timeout` has passed since it was made.
struct Poll {
    call: &'static str,
    timeout: Duration,
    deadline: Instant,
    pause: Duration,
}

impl Poll {
    fn new(call: &'static str, timeout: Duration) -> Self {
        Self {
            call,
            timeout,
            deadline: Instant::now() + timeout,
            pause: Duration::from_micros(100),
        }
    }

    /// Pauses before the next try; past the deadline, [`Error::Timeout`] with `reason`.
    fn pause(&mut self, reason: impl FnOnce() -> String) -> Result<()> {
        if Instant::now() >= self.deadline {
            return Err(Error::Timeout {
                call: self.call,
                after: self.timeout,
                reason: reason(),
            });
        }
        std::thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(Duration::from_millis(20));
        Ok(())
    }

    /// What is left of the timeout (zero past the deadline).
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// The id every rank of one communicator is made with (`ncclGetUniqueId`): made by one rank,
/// handed to the others (in memory within a process; across processes through
/// [`UniqueId::write_file`] and [`UniqueId::read_file`], or [`UniqueId::serve`] and
/// [`UniqueId::receive`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId(pub(super) [u8; UNIQUE_ID_BYTES]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The first bytes say enough to tell two apart.
        write!(f, "UniqueId({:02x?}…)", &self.0[..8])
    }
}

impl UniqueId {
    /// A new id (`ncclGetUniqueId`). Loads NCCL on first use (see the [module](super)).
    pub fn new() -> Result<Self> {
        let lib = sys::library()?;
        let mut raw = UniqueIdRaw {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: a valid out-pointer to 128 bytes.
        let status = unsafe { (lib.get_unique_id)(&mut raw) };
        check(lib, "ncclGetUniqueId", status, std::ptr::null_mut())?;
        Ok(Self(raw.internal.map(|c| c as u8)))
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8; UNIQUE_ID_BYTES] {
        &self.0
    }

    /// The id of `bytes` (another rank's [`UniqueId::as_bytes`]).
    pub fn from_bytes(bytes: [u8; UNIQUE_ID_BYTES]) -> Self {
        Self(bytes)
    }

    /// Writes the id to `path` for ranks of other processes: to a new temporary file of a random
    /// name beside it (created `0600`, never through a symbolic link), renamed into place, so
    /// that a reader never sees half of it and no other user can read it. A file or symbolic
    /// link left at `path` is replaced (a link's target is never written), but a reader that
    /// came first has read the old id: remove the file before the ranks start, or use
    /// [`UniqueId::serve`], which leaves nothing behind. Put it in a folder only this user can
    /// write, such as `$XDG_RUNTIME_DIR`.
    pub fn write_file(&self, path: &Path) -> Result<()> {
        const CALL: &str = "UniqueId::write_file";
        files::write_atomic(path, &self.0, 0o600)
            .map_err(|e| Error::invalid(CALL, format!("cannot write {}: {e}", path.display())))
    }

    /// Reads the id another process wrote to `path` with [`UniqueId::write_file`], waiting up to
    /// `timeout` for the file to appear ([`Error::Timeout`] then). The file must be a regular
    /// file (a symbolic link is not followed), of this process's user, with no permission for
    /// group or others, as `write_file` makes it: anything else is [`Misuse::UntrustedFile`],
    /// since another user could have planted a forged id.
    pub fn read_file(path: &Path, timeout: Duration) -> Result<Self> {
        const CALL: &str = "UniqueId::read_file";
        let rules = files::Rules {
            cap: files::cap::UNIQUE_ID,
            private: true,
        };
        let mut poll = Poll::new(CALL, timeout);
        loop {
            match files::read(path, rules) {
                Ok(bytes) => {
                    let bytes: [u8; UNIQUE_ID_BYTES] = bytes.try_into().map_err(|b: Vec<u8>| {
                        let reason = format!(
                            "{} holds {} bytes, not the {UNIQUE_ID_BYTES} of an NCCL unique id",
                            path.display(),
                            b.len()
                        );
                        Error::misuse(CALL, Misuse::Malformed, reason)
                    })?;
                    return Ok(Self(bytes));
                }
                Err(files::Refusal::Missing) => {}
                Err(refusal) => return Err(refusal.into_error(CALL, path)),
            }
            poll.pause(|| format!("no rank wrote {}", path.display()))?;
        }
    }

    /// Hands the id to `peers` ranks of other processes through a Unix-domain socket bound at
    /// `path` (each calls [`UniqueId::receive`] with the same path, before or after this call
    /// starts), then removes the socket. Returns once every peer has been sent the id, so a rank
    /// that serves calls [`Communicator::init_rank`](super::Communicator::init_rank) after it.
    ///
    /// A socket file left at `path` by a process that ended is replaced; one that a live process
    /// serves is not ([`Misuse::PathInUse`]), nor is a file of another kind. Fewer than `peers`
    /// connections within `timeout` is [`Error::Timeout`], saying how many came.
    ///
    /// The socket is made `0600`, and a peer that runs as another user (`SO_PEERCRED`) is not
    /// served nor counted (it is logged): put the path in a folder only this user can reach,
    /// such as `$XDG_RUNTIME_DIR`.
    pub fn serve(&self, path: &Path, peers: usize, timeout: Duration) -> Result<()> {
        use std::os::unix::fs::FileTypeExt;
        use std::os::unix::net::{UnixListener, UnixStream};
        const CALL: &str = "UniqueId::serve";
        let io = |e: std::io::Error| Error::invalid(CALL, format!("{}: {e}", path.display()));
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
            Ok(m) if !m.file_type().is_socket() => {
                let reason = format!("{} exists and is not a socket", path.display());
                return Err(Error::misuse(CALL, Misuse::PathInUse, reason));
            }
            Ok(_) => match UnixStream::connect(path) {
                Ok(_) => {
                    let reason = format!("a live process serves {} already", path.display());
                    return Err(Error::misuse(CALL, Misuse::PathInUse, reason));
                }
                // Nobody listens: a socket left by a process that ended.
                Err(_) => std::fs::remove_file(path).map_err(io)?,
            },
        }
        let listener = UnixListener::bind(path).map_err(io)?;
        // Connecting takes write permission on the socket: only this user (and root) may. A
        // connection made before this is checked by its credentials below.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        }
        // Removes the socket whatever happens below.
        struct Unlink<'a>(&'a Path);
        impl Drop for Unlink<'_> {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(self.0);
            }
        }
        let _unlink = Unlink(path);
        listener.set_nonblocking(true).map_err(io)?;
        let mut message = Vec::with_capacity(GREETING.len() + UNIQUE_ID_BYTES);
        message.extend_from_slice(GREETING);
        message.extend_from_slice(&self.0);
        let mut poll = Poll::new(CALL, timeout);
        let mut served = 0;
        while served < peers {
            match listener.accept() {
                Ok((mut peer, _)) => {
                    let wait = Some(
                        poll.left()
                            .clamp(Duration::from_millis(1), Duration::from_secs(5)),
                    );
                    if let Err(e) = peer_uid(&peer)
                        .map_err(io)
                        .and_then(|uid| check_peer(CALL, uid))
                    {
                        tracing::warn!(error = %e, "graph-rt: a connection to the unique id's socket refused");
                        continue;
                    }
                    peer.set_nonblocking(false).map_err(io)?;
                    peer.set_read_timeout(wait).map_err(io)?;
                    peer.set_write_timeout(wait).map_err(io)?;
                    // Only a peer that asks is served; one that probed, or went away before
                    // reading, counts for nothing.
                    let mut ask = [0u8; 1];
                    if peer.read_exact(&mut ask).is_ok()
                        && ask[0] == ASK
                        && send_all(&peer, &message).is_ok()
                    {
                        served += 1;
                    }
                    poll.pause = Duration::from_micros(100);
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            }
            poll.pause(|| {
                format!(
                    "{served} of {peers} ranks came for the id at {}",
                    path.display()
                )
            })?;
        }
        Ok(())
    }

    /// Receives the id a rank serves at `path` ([`UniqueId::serve`]), waiting up to `timeout`
    /// for the socket to appear and answer ([`Error::Timeout`] then). A socket that answers
    /// something else is [`Misuse::Malformed`]; one that a process of another user serves
    /// (`SO_PEERCRED`) is [`Misuse::ForeignPeer`], before anything is read from it.
    pub fn receive(path: &Path, timeout: Duration) -> Result<Self> {
        use std::os::unix::net::UnixStream;
        const CALL: &str = "UniqueId::receive";
        let mut poll = Poll::new(CALL, timeout);
        let mut peer = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                // Not there yet, or left by a process that ended and not yet replaced.
                Err(e)
                    if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {}
                Err(e) => return Err(Error::invalid(CALL, format!("{}: {e}", path.display()))),
            }
            poll.pause(|| format!("no rank served {}", path.display()))?;
        };
        let uid = peer_uid(&peer)
            .map_err(|e| Error::invalid(CALL, format!("{}: {e}", path.display())))?;
        check_peer(CALL, uid)?;
        let left = poll.left();
        let io = |e: std::io::Error| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout {
                call: CALL,
                after: timeout,
                reason: format!("{} did not send the id", path.display()),
            },
            _ => Error::invalid(CALL, format!("{}: {e}", path.display())),
        };
        let wait = Some(left.max(Duration::from_millis(1)));
        peer.set_read_timeout(wait).map_err(io)?;
        peer.set_write_timeout(wait).map_err(io)?;
        send_all(&peer, &[ASK]).map_err(io)?;
        let mut got = Vec::with_capacity(GREETING.len() + UNIQUE_ID_BYTES + 1);
        (&mut peer)
            .take((GREETING.len() + UNIQUE_ID_BYTES + 1) as u64)
            .read_to_end(&mut got)
            .map_err(io)?;
        match got.strip_prefix(GREETING.as_slice()) {
            Some(id) if id.len() == UNIQUE_ID_BYTES => {
                let mut bytes = [0u8; UNIQUE_ID_BYTES];
                bytes.copy_from_slice(id);
                Ok(Self(bytes))
            }
            _ => Err(Error::misuse(
                CALL,
                Misuse::Malformed,
                format!(
                    "{} answered {} bytes that are not graph-rt's NCCL id (is another program serving it?)",
                    path.display(),
                    got.len()
                ),
            )),
        }
    }

    pub(super) fn raw(&self) -> UniqueIdRaw {
        UniqueIdRaw {
            internal: self.0.map(|b| b as std::ffi::c_char),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;

    fn socket(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("graph-rt-id-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn id(seed: u8) -> UniqueId {
        UniqueId::from_bytes(std::array::from_fn(|i| seed.wrapping_add(i as u8)))
    }

    const SHORT: Duration = Duration::from_millis(300);
    const LONG: Duration = Duration::from_secs(20);

    #[test]
    fn every_peer_receives_the_served_id_whether_it_comes_before_or_after() {
        let path = socket("peers");
        let early: Vec<_> = (0..2)
            .map(|_| {
                let p = path.clone();
                std::thread::spawn(move || UniqueId::receive(&p, LONG))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let late = {
            let p = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                UniqueId::receive(&p, LONG)
            })
        };
        id(7).serve(&path, 3, LONG).unwrap();
        for peer in early.into_iter().chain([late]) {
            assert_eq!(peer.join().unwrap().unwrap(), id(7));
        }
        assert!(
            !path.exists(),
            "the socket is removed once every peer has the id"
        );
    }

    #[test]
    fn a_connection_that_does_not_ask_takes_no_peers_place() {
        let path = socket("probe");
        let p = path.clone();
        let peers = std::thread::spawn(move || {
            while std::os::unix::net::UnixStream::connect(&p).is_err() {
                std::thread::sleep(Duration::from_millis(5));
            }
            // That probe closed without asking; now the one peer.
            UniqueId::receive(&p, LONG)
        });
        id(5).serve(&path, 1, LONG).unwrap();
        assert_eq!(peers.join().unwrap().unwrap(), id(5));
    }

    #[test]
    fn receive_with_nobody_serving_times_out() {
        let path = socket("nobody");
        let start = Instant::now();
        let e = UniqueId::receive(&path, SHORT).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Timeout {
                    call: "UniqueId::receive",
                    ..
                }
            ),
            "{e}"
        );
        assert!(start.elapsed() < LONG);
    }

    #[test]
    fn serve_says_how_many_peers_came_when_too_few_do() {
        let path = socket("few");
        let p = path.clone();
        let peer = std::thread::spawn(move || UniqueId::receive(&p, LONG));
        let e = id(1)
            .serve(&path, 2, Duration::from_millis(500))
            .unwrap_err();
        match &e {
            Error::Timeout { call, reason, .. } => {
                assert_eq!(*call, "UniqueId::serve");
                assert!(reason.contains("1 of 2"), "{reason}");
            }
            other => panic!("{other}"),
        }
        assert_eq!(peer.join().unwrap().unwrap(), id(1));
        assert!(!path.exists(), "the socket is removed on a timeout too");
    }

    #[test]
    fn a_socket_left_by_an_ended_server_is_replaced() {
        let path = socket("stale");
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let p = path.clone();
        let peer = std::thread::spawn(move || UniqueId::receive(&p, LONG));
        id(3).serve(&path, 1, LONG).unwrap();
        assert_eq!(peer.join().unwrap().unwrap(), id(3));
    }

    #[test]
    fn a_path_in_use_is_refused() {
        let path = socket("live");
        let _live = UnixListener::bind(&path).unwrap();
        let e = id(4).serve(&path, 1, SHORT).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::PathInUse), "{e}");
        assert!(path.exists(), "the live server's socket stays");
        let file = socket("file");
        std::fs::write(&file, b"not a socket").unwrap();
        let e = id(4).serve(&file, 1, SHORT).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::PathInUse), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"not a socket");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn another_programs_answer_is_not_taken_for_an_id() {
        let path = socket("other");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // Reads what the peer sends first (closing with it unread would reset the
            // connection), then answers something that is not graph-rt's.
            let _ = s.read(&mut [0u8; 8]);
            s.write_all(&[0xab; GREETING.len() + UNIQUE_ID_BYTES])
                .unwrap();
        });
        let e = UniqueId::receive(&path, LONG).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::Malformed), "{e}");
        server.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }

    /// A fresh private folder.
    fn folder(name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("graph-rt-idf-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn an_id_file_is_private_and_a_planted_symlink_is_replaced_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = folder("symlink");
        let target = dir.join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let path = dir.join("id");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        // A reader refuses the link at once (no waiting for the timeout), reading nothing.
        let start = Instant::now();
        let e = UniqueId::read_file(&path, LONG).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::UntrustedFile), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(start.elapsed() < LONG);
        // The writer replaces the link itself; its target is untouched.
        id(9).write_file(&path).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(UniqueId::read_file(&path, SHORT).unwrap(), id(9));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_id_file_others_can_read_or_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = folder("mode");
        let path = dir.join("id");
        id(2).write_file(&path).unwrap();
        for mode in [0o644, 0o660, 0o606] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = UniqueId::read_file(&path, SHORT).unwrap_err();
            assert_eq!(e.misuse_kind(), Some(&Misuse::UntrustedFile), "{e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        if files::euid() == 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&path, Some(1), None).unwrap();
            let e = UniqueId::read_file(&path, SHORT).unwrap_err();
            assert_eq!(e.misuse_kind(), Some(&Misuse::UntrustedFile), "{e}");
            assert!(e.to_string().contains("owned by uid 1"), "{e}");
        }
        // A folder or a FIFO where the id should be: refused, not read (nor waited on).
        let e = UniqueId::read_file(&dir, SHORT).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::UntrustedFile), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_peer_of_another_user_is_refused() {
        let ours = files::euid();
        assert!(check_peer("c", ours).is_ok());
        let other = ours.wrapping_add(1);
        let e = check_peer("UniqueId::receive", other).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::ForeignPeer { uid: other }));
        assert!(e.to_string().contains("XDG_RUNTIME_DIR"), "{e}");
        // A real connection reports this process's user at both ends.
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), ours);
        assert_eq!(peer_uid(&b).unwrap(), ours);
    }

    #[test]
    fn the_served_socket_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let path = socket("private");
        let p = path.clone();
        let peer = std::thread::spawn(move || {
            // The mode the socket settles at while it is served.
            let start = Instant::now();
            let mode = loop {
                let mode = std::fs::metadata(&p).map(|m| m.permissions().mode() & 0o777);
                match mode {
                    Ok(0o600) => break 0o600,
                    Ok(m) if start.elapsed() > LONG => break m,
                    _ => std::thread::sleep(Duration::from_millis(2)),
                }
            };
            (mode, UniqueId::receive(&p, LONG))
        });
        id(6).serve(&path, 1, LONG).unwrap();
        let (mode, got) = peer.join().unwrap();
        assert_eq!(mode, 0o600, "{mode:o}");
        assert_eq!(got.unwrap(), id(6));
    }
}
