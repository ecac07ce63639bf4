//! NCCL collectives on graph-rt's streams: communicators of one rank a GPU ([`Communicator`]),
//! all-reduce, all-gather, reduce-scatter, send and receive, eagerly, in NCCL groups
//! ([`group`]), inside captures ([`Communicator::record`]) and through a step's scope
//! ([`StepScope::nccl`](crate::step::StepScope::nccl)), where discovery and the in-graph
//! prelude rebind their buffers every call like any other kernel graph-rt did not write.
//!
//! NCCL is loaded at run time (`dlopen`), once per process, on the first communicator or
//! [`UniqueId`]: nothing of NCCL is needed to build. The candidates, in order: the file named by
//! the environment variable `GRAPH_RT_NCCL` (an absolute path to a regular file), then
//! `nvidia/nccl/lib/libnccl.so.2` below Python's package folders (PyTorch's wheels: the absolute
//! entries of `PYTHONPATH`, the active virtual or conda environment, `~/.local`, `/usr/local`,
//! `/usr`, `/opt/conda`; with `GRAPH_RT_PYTHON_SEARCH=1`, when none has it, also the folders
//! the `python3` on the path (or `$PYTHON`) names, asked with a 10 s timeout), then
//! `libnccl.so.2` from the dynamic loader's path. A wheel found below those folders is loaded
//! only when it and every folder above it are root's or this user's and not writable by others
//! (checked before it is opened, so a refused file's code never runs); empty and relative
//! `PYTHONPATH` entries are not searched. The library loaded is logged (`tracing`, info). NCCL
//! 2.14 or later. When none loads, the error lists what was tried and why each failed.
//!
//! Set `NCCL_NVLS_ENABLE=0` and `NCCL_GRAPH_REGISTER=0` in the environment before the process
//! starts (graph-rt warns once, on loading NCCL, when either is unset or not 0; it does not set
//! them: a library writing the environment races with threads reading it, and `ncclConfig_t`
//! has no field for either): NVLink multicast maps a collective's buffers into a multicast
//! object (`cuMulticastCreate`), and a graph's registration of a captured collective's buffers
//! has the peers read and write them directly; a rebinding of the captured kernels' pointers
//! follows neither.
//!
//! Every communicator is non-blocking (`ncclConfig_t.blocking = 0`): graph-rt waits for each
//! call with the communicator's deadlines ([`CommOptions`]), so a rank that never joins
//! fails the others' calls with [`Error::Timeout`] rather than hanging
//! them; [`Communicator::synchronize`] does the same for the collectives a stream runs, aborting
//! the communicator when they do not end. NCCL's failures are
//! [`Error::Nccl`], with the call, its [`NcclCode`] and NCCL's last message.
//!
//! One rank a GPU: a second rank of one communicator on a device that holds one is refused
//! ([`Misuse::RankPerGpu`]) in this process, and by NCCL across
//! processes. Ranks that are threads of one process and build their steps at the same time
//! capture thread-locally ([`StepOptions::capture_mode`](crate::step::StepOptions::capture_mode)
//! = [`CaptureMode::ThreadLocal`](crate::graph::CaptureMode::ThreadLocal)): a global capture in
//! one thread refuses the other threads' allocations, and their collectives wait for each other.
//!
//! Ranks in other processes (one a GPU) share the [`UniqueId`] through a file
//! ([`UniqueId::write_file`], [`UniqueId::read_file`]) or a Unix-domain socket that rank 0 serves
//! ([`UniqueId::serve`], [`UniqueId::receive`]: nothing is left behind for a later run to read).
//! Both are private to the user: the file is written `0600` and read only when it is a regular
//! file of this user that no one else can read; the socket is `0600` and each side checks that
//! the other runs as the same user (`SO_PEERCRED`, [`Misuse::ForeignPeer`]). Put these paths in
//! `$XDG_RUNTIME_DIR` (a folder only the user can reach), not in a shared `/tmp`:
//!
//! ```no_run
//! use graph_rt::nccl::{CommOptions, Communicator, UniqueId};
//! use std::{path::Path, time::Duration};
//!
//! # fn main() -> graph_rt::Result<()> {
//! # let (rank, nranks) = (0usize, 2usize);
//! let dir = std::env::var_os("XDG_RUNTIME_DIR").expect("a private folder of the user's");
//! let (path, wait) = (Path::new(&dir).join("my-job.nccl"), Duration::from_secs(60));
//! let id = if rank == 0 {
//!     let id = UniqueId::new()?;
//!     id.serve(&path, nranks - 1, wait)?; // returns once every other rank has it
//!     id
//! } else {
//!     UniqueId::receive(&path, wait)?
//! };
//! let ctx = graph_rt::Context::new(rank)?;
//! let comm = Communicator::init_rank(&ctx, &id, rank, nranks, &CommOptions::default())?;
//! # Ok(()) }
//! ```
//!
//! `sys` holds the hand-written bindings and the loader, `id` the unique id and its exchange
//! across processes, `comm` the communicators, `ops` the calls; the pure checks are here, with
//! their tests. Depends on `driver`, `graph` (a capture's keep-alive), `error` and `resource`
//! only.
//!
//! ```no_run
//! use graph_rt::nccl::{CommOptions, Communicator, ReduceOp};
//! use graph_rt::{Context, DeviceBuffer, Stream};
//!
//! # fn main() -> graph_rt::Result<()> {
//! // One process, every GPU: rank i on device i, driven from this thread through a group.
//! let contexts = [Context::new(0)?, Context::new(1)?];
//! let comms = Communicator::init_all(&contexts, &CommOptions::default())?;
//! let streams = contexts.iter().map(Stream::new).collect::<graph_rt::Result<Vec<_>>>()?;
//! let mut bufs = contexts
//!     .iter()
//!     .map(|c| DeviceBuffer::from_host(c, &[1.0f32; 1024]))
//!     .collect::<graph_rt::Result<Vec<_>>>()?;
//! graph_rt::nccl::group(|| {
//!     for ((comm, buf), stream) in comms.iter().zip(&mut bufs).zip(&streams) {
//!         comm.all_reduce_in_place(buf, ReduceOp::Sum, stream)?;
//!     }
//!     Ok(())
//! })?;
//! for (comm, stream) in comms.iter().zip(&streams) {
//!     comm.synchronize(stream, std::time::Duration::from_secs(10))?;
//! }
//! assert_eq!(bufs[0].to_vec()?[0], 2.0);
//! # Ok(()) }
//! ```

mod comm;
mod id;
mod ops;
mod sys;

pub use crate::error::NcclCode;
pub use comm::{CommOptions, Communicator};
pub use id::UniqueId;
pub use ops::{group, NcclElement, ReduceOp};

use crate::error::{Error, Misuse, Result};

/// The version of the NCCL graph-rt loads (loading it on first use), e.g. `(2, 28, 9)`.
pub fn version() -> Result<(u32, u32, u32)> {
    Ok(sys::split_version(sys::library()?.version))
}

/// The path or name NCCL was loaded from (loading it on first use).
pub fn library_path() -> Result<&'static std::path::Path> {
    Ok(std::path::Path::new(&sys::library()?.path))
}

/// Refuses `rank` outside `0..nranks`, and a communicator of no rank.
pub(crate) fn check_rank(call: &'static str, rank: usize, nranks: usize) -> Result<()> {
    if rank < nranks {
        return Ok(());
    }
    let reason = if nranks == 0 {
        "a communicator of no rank".to_owned()
    } else {
        format!("rank {rank} is not one of the communicator's {nranks} ranks (0..{nranks})")
    };
    Err(Error::misuse(
        call,
        Misuse::BadRank { rank, nranks },
        reason,
    ))
}

/// Refuses no device, and a device named twice (one rank a GPU).
pub(crate) fn check_devices(call: &'static str, devices: &[usize]) -> Result<()> {
    if devices.is_empty() {
        return Err(Error::misuse(
            call,
            Misuse::BadRank { rank: 0, nranks: 0 },
            "no context: give one a rank",
        ));
    }
    for (i, d) in devices.iter().enumerate() {
        if devices[..i].contains(d) {
            return Err(Error::misuse(
                call,
                Misuse::RankPerGpu { device: *d },
                format!("device {d} is given twice: NCCL takes one rank a GPU"),
            ));
        }
    }
    Ok(())
}

/// The shape of a collective's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collective {
    /// send and recv of one length.
    AllReduce,
    /// recv holds nranks × send.
    AllGather,
    /// send holds nranks × recv.
    ReduceScatter,
}

/// The count NCCL takes for `collective` over buffers of `send` and `recv` elements on `nranks`
/// ranks (send's for all-reduce and all-gather, recv's for reduce-scatter), or the misuse.
pub(crate) fn check_counts(
    call: &'static str,
    collective: Collective,
    send: usize,
    recv: usize,
    nranks: usize,
) -> Result<usize> {
    if send == 0 || recv == 0 {
        return Err(Error::misuse(
            call,
            Misuse::Empty,
            "an empty buffer: a collective of no element makes no node",
        ));
    }
    let too_large = || {
        let reason = format!("{nranks} ranks × the buffer's elements overflow usize");
        Error::misuse(call, Misuse::TooLarge { what: "count" }, reason)
    };
    let (count, ours, theirs) = match collective {
        Collective::AllReduce => (send, recv, send),
        Collective::AllGather => (send, recv, send.checked_mul(nranks).ok_or_else(too_large)?),
        Collective::ReduceScatter => (recv, send, recv.checked_mul(nranks).ok_or_else(too_large)?),
    };
    if ours != theirs {
        let reason = match collective {
            Collective::AllReduce => {
                format!("send holds {send} elements and recv {recv}: give buffers of one length")
            }
            Collective::AllGather => {
                format!("recv holds {recv} elements, not {nranks} ranks × send's {send}")
            }
            Collective::ReduceScatter => {
                format!("send holds {send} elements, not {nranks} ranks × recv's {recv}")
            }
        };
        return Err(Error::misuse(
            call,
            Misuse::LengthMismatch { ours, theirs },
            reason,
        ));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::PathBuf;

    use super::sys::{
        candidates, environment_warnings, load_from, python_roots, python_search_wanted,
        site_folders, split_version, Config, ENV_VAR, LIBRARY_NAME, WHEEL_PATH,
    };
    use super::{check_counts, check_devices, check_rank, Collective};
    use crate::dylib::Candidate;
    use crate::error::{Error, Misuse, NcclCode};

    fn misuse(e: Error) -> Misuse {
        e.misuse_kind()
            .cloned()
            .unwrap_or_else(|| panic!("not a misuse: {e}"))
    }

    #[test]
    fn ranks_are_within_the_communicator() {
        assert!(check_rank("c", 0, 1).is_ok());
        assert!(check_rank("c", 3, 4).is_ok());
        assert_eq!(
            misuse(check_rank("c", 4, 4).unwrap_err()),
            Misuse::BadRank { rank: 4, nranks: 4 }
        );
        assert_eq!(
            misuse(check_rank("c", 0, 0).unwrap_err()),
            Misuse::BadRank { rank: 0, nranks: 0 }
        );
    }

    #[test]
    fn one_rank_a_gpu() {
        assert!(check_devices("c", &[0, 1, 2]).is_ok());
        assert_eq!(
            misuse(check_devices("c", &[0, 1, 0]).unwrap_err()),
            Misuse::RankPerGpu { device: 0 }
        );
        assert!(matches!(
            misuse(check_devices("c", &[]).unwrap_err()),
            Misuse::BadRank { .. }
        ));
    }

    #[test]
    fn collective_counts_follow_their_shapes() {
        use Collective::*;
        assert_eq!(check_counts("c", AllReduce, 8, 8, 2).unwrap(), 8);
        assert_eq!(
            misuse(check_counts("c", AllReduce, 8, 7, 2).unwrap_err()),
            Misuse::LengthMismatch { ours: 7, theirs: 8 }
        );
        assert_eq!(check_counts("c", AllGather, 4, 8, 2).unwrap(), 4);
        assert_eq!(
            misuse(check_counts("c", AllGather, 4, 4, 2).unwrap_err()),
            Misuse::LengthMismatch { ours: 4, theirs: 8 }
        );
        assert_eq!(check_counts("c", ReduceScatter, 8, 4, 2).unwrap(), 4);
        assert_eq!(
            misuse(check_counts("c", ReduceScatter, 8, 8, 2).unwrap_err()),
            Misuse::LengthMismatch {
                ours: 8,
                theirs: 16
            }
        );
        assert_eq!(
            misuse(check_counts("c", AllReduce, 0, 0, 1).unwrap_err()),
            Misuse::Empty
        );
        // Overflowing products never pass as equal.
        let e = check_counts("c", AllGather, usize::MAX, usize::MAX, 2).unwrap_err();
        assert_eq!(misuse(e), Misuse::TooLarge { what: "count" });
    }

    #[test]
    fn the_config_is_the_2_14_layout() {
        // size_t, two u32, four ints, a pointer: 40 bytes on 64-bit targets.
        assert_eq!(std::mem::size_of::<Config>(), 40);
        let c = Config::non_blocking();
        assert_eq!(
            (c.size, c.magic, c.version, c.blocking),
            (40, 0xcafe_beef, 21400, 0)
        );
    }

    #[test]
    fn versions_split_both_ways_nccl_wrote_them() {
        assert_eq!(split_version(22809), (2, 28, 9));
        assert_eq!(split_version(21403), (2, 14, 3));
        assert_eq!(split_version(2708), (2, 7, 8));
    }

    #[test]
    fn codes_round_trip_and_name_themselves() {
        for raw in 1..=8 {
            assert_eq!(NcclCode::from_raw(raw).raw(), raw);
        }
        assert_eq!(NcclCode::from_raw(5), NcclCode::InvalidUsage);
        assert_eq!(NcclCode::InvalidUsage.to_string(), "ncclInvalidUsage (5)");
        assert_eq!(NcclCode::from_raw(42), NcclCode::Other(42));
    }

    /// A fresh folder of the temporary folder, `0755`.
    fn temp(name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let tmp = std::env::temp_dir().join(format!("graph-rt-nccl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        tmp
    }

    /// A wheel's `libnccl.so.2` below `site`, holding `bytes` (not a library), `0644`, every
    /// folder `0755`.
    fn plant_wheel(site: &std::path::Path, bytes: &[u8]) -> PathBuf {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let wheel = site.join(WHEEL_PATH);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(wheel.parent().unwrap())
            .unwrap();
        std::fs::write(&wheel, bytes).unwrap();
        std::fs::set_permissions(&wheel, std::fs::Permissions::from_mode(0o644)).unwrap();
        wheel
    }

    #[test]
    fn candidates_are_the_variable_then_the_wheels_then_the_loader() {
        let tmp = temp("candidates");
        let site = tmp.join("lib/python3.12/site-packages");
        let wheel = plant_wheel(&site, b"");
        // An older Python without the wheel, and a folder that is not Python's.
        std::fs::create_dir_all(tmp.join("lib/python3.10/site-packages")).unwrap();
        std::fs::create_dir_all(tmp.join("lib/perl5")).unwrap();
        let roots = site_folders(&tmp);
        assert_eq!(
            roots,
            vec![site.clone(), tmp.join("lib/python3.10/site-packages")]
        );
        assert_eq!(
            candidates(None, &roots),
            vec![
                Candidate::Found(wheel.clone()),
                Candidate::Soname(LIBRARY_NAME)
            ]
        );
        let env = PathBuf::from("/opt/nccl/libnccl.so.2");
        assert_eq!(
            candidates(Some(env.clone()), &roots),
            vec![
                Candidate::Named(env),
                Candidate::Found(wheel),
                Candidate::Soname(LIBRARY_NAME)
            ]
        );
        // An empty variable is no candidate; a root without the wheel gives nothing.
        assert_eq!(
            candidates(Some(PathBuf::new()), &[PathBuf::from("/nonexistent")]),
            vec![Candidate::Soname(LIBRARY_NAME)]
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn empty_and_relative_python_folders_are_not_searched() {
        let tmp = temp("relative");
        let env = |pythonpath: &str, venv: &str, home: &str| {
            let (p, v, h) = (pythonpath.to_owned(), venv.to_owned(), home.to_owned());
            move |var: &str| match var {
                "PYTHONPATH" => Some(OsString::from(&p)),
                "VIRTUAL_ENV" => Some(OsString::from(&v)),
                "HOME" => Some(OsString::from(&h)),
                _ => None,
            }
        };
        let abs = tmp.to_string_lossy().into_owned();
        // An empty entry (leading ':', '::', trailing ':') is the working folder to Python.
        let roots = python_roots(env(&format!(":site::{abs}:./x:"), "venv", "home"));
        assert!(roots.contains(&tmp), "{roots:?}");
        assert!(roots.iter().all(|r| r.is_absolute()), "{roots:?}");
        // A wheel in the working folder's `site` is never a candidate.
        assert!(candidates(None, &roots)
            .iter()
            .all(|c| !matches!(c, Candidate::Found(p) if p.is_relative())));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_wheel_writable_by_others_is_refused_without_being_opened() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = temp("writable");
        // Not a library: were it opened, the error would be dlopen's.
        let wheel = plant_wheel(&tmp, b"not a library");
        for mode in [0o666, 0o664] {
            std::fs::set_permissions(&wheel, std::fs::Permissions::from_mode(mode)).unwrap();
            let msg = load_from(&[Candidate::Found(wheel.clone())])
                .unwrap_err()
                .to_string();
            assert!(msg.contains("is writable by others"), "{msg}");
            assert!(
                !msg.contains("file too short") && !msg.contains("invalid ELF"),
                "{msg}"
            );
        }
        // Once private, it is opened: the error is now the loader's.
        std::fs::set_permissions(&wheel, std::fs::Permissions::from_mode(0o644)).unwrap();
        let msg = load_from(&[Candidate::Found(wheel.clone())])
            .unwrap_err()
            .to_string();
        assert!(!msg.contains("writable by others"), "{msg}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_wheel_below_a_folder_writable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = temp("chain");
        let wheel = plant_wheel(&tmp, b"not a library");
        // `nvidia/` is group-writable: its owner's group could swap `nccl/` for its own.
        let folder = tmp.join("nvidia");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o775)).unwrap();
        let msg = load_from(&[Candidate::Found(wheel.clone())])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(&format!("{} is writable by others", folder.display())),
            "{msg}"
        );
        // A symbolic link to the wheel is checked where it leads: the same refusal.
        let link = tmp.join("link.so");
        std::os::unix::fs::symlink(&wheel, &link).unwrap();
        let msg = load_from(&[Candidate::Found(link)])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("is writable by others"), "{msg}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_wheel_of_another_user_is_refused() {
        if crate::files::euid() != 0 {
            // Only root can give a file away.
            return;
        }
        let tmp = temp("owner");
        let wheel = plant_wheel(&tmp, b"not a library");
        std::os::unix::fs::chown(&wheel, Some(1), None).unwrap();
        let msg = load_from(&[Candidate::Found(wheel.clone())])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("is owned by uid 1"), "{msg}");
        // A folder of another user above it, too.
        std::os::unix::fs::chown(&wheel, Some(0), None).unwrap();
        std::os::unix::fs::chown(tmp.join("nvidia/nccl"), Some(1), None).unwrap();
        let msg = load_from(&[Candidate::Found(wheel)])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("nccl is owned by uid 1"), "{msg}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn nccl_variables_that_break_rebinding_are_warned_of_never_set() {
        let env = |nvls: Option<&str>, reg: Option<&str>| {
            let (n, r) = (nvls.map(OsString::from), reg.map(OsString::from));
            move |var: &str| match var {
                "NCCL_NVLS_ENABLE" => n.clone(),
                "NCCL_GRAPH_REGISTER" => r.clone(),
                _ => None,
            }
        };
        assert!(environment_warnings(env(Some("0"), Some("0"))).is_empty());
        let w = environment_warnings(env(None, Some("0")));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("NCCL_NVLS_ENABLE is unset"), "{w:?}");
        assert!(w[0].contains("set NCCL_NVLS_ENABLE=0"), "{w:?}");
        let w = environment_warnings(env(Some("0"), Some("1")));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("NCCL_GRAPH_REGISTER=1"), "{w:?}");
        assert_eq!(environment_warnings(env(Some("2"), None)).len(), 2);
        // Reading the environment is all it does.
        let before: Vec<_> = std::env::vars_os().collect();
        let _ = environment_warnings(|v| std::env::var_os(v));
        assert_eq!(std::env::vars_os().collect::<Vec<_>>(), before);
    }

    #[test]
    fn python_is_asked_only_on_request() {
        assert!(!python_search_wanted(None));
        assert!(!python_search_wanted(Some("".as_ref())));
        assert!(!python_search_wanted(Some("yes".as_ref())));
        assert!(python_search_wanted(Some("1".as_ref())));
    }

    #[test]
    fn a_unique_id_goes_through_a_file_whole_or_not_at_all() {
        use super::UniqueId;
        use std::time::Duration;
        let dir = std::env::temp_dir().join(format!("graph-rt-nccl-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("id");
        let id = UniqueId::from_bytes(std::array::from_fn(|i| i as u8));
        id.write_file(&path).unwrap();
        assert_eq!(UniqueId::read_file(&path, Duration::ZERO).unwrap(), id);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let e = UniqueId::read_file(&dir.join("never"), Duration::from_millis(30)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Timeout {
                    call: "UniqueId::read_file",
                    ..
                }
            ),
            "{e}"
        );
        std::fs::write(&path, [0u8; 7]).unwrap();
        let e = UniqueId::read_file(&path, Duration::ZERO).unwrap_err();
        assert_eq!(misuse(e), Misuse::Malformed);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_library_names_every_path_tried() {
        let tried = [Candidate::Named("/nonexistent/libnccl.so.2".into())];
        let msg = load_from(&tried).unwrap_err().to_string();
        assert!(msg.contains("/nonexistent/libnccl.so.2"), "{msg}");
        assert!(msg.contains(ENV_VAR), "{msg}");
        assert!(msg.contains(WHEEL_PATH), "{msg}");
        assert!(load_from(&[])
            .unwrap_err()
            .to_string()
            .contains("tried nothing"));
    }

    #[test]
    fn a_library_without_nccl_is_refused() {
        let msg = load_from(&[Candidate::Soname("libc.so.6")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("libc.so.6: not NCCL: no symbol ncclGetVersion"),
            "{msg}"
        );
    }
}
