//! NCCL ranks in two processes that meet through a unique-id file or socket: the test spawns
//! this test binary again, running the same test as the other rank. On one GPU NCCL itself must
//! refuse the second rank with a typed error (the in-process registry cannot see another
//! process); on two, the ranks sum and rebind a step as threads do.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use super::nccl::{rank_of_two, two_gpus};
use crate::nccl::{CommOptions, Communicator, NcclCode, UniqueId};
use crate::{Context, Error};

/// Set in a child process: the rank it plays and where the id comes from,
/// `<rank>:<file|socket>:<path>`.
const ROLE: &str = "GRAPH_RT_TEST_NCCL_ROLE";

/// How the ranks' processes share the id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exchange {
    /// [`UniqueId::write_file`] / [`UniqueId::read_file`].
    File,
    /// [`UniqueId::serve`] / [`UniqueId::receive`].
    Socket,
}

impl Exchange {
    fn name(self) -> &'static str {
        match self {
            Exchange::File => "file",
            Exchange::Socket => "socket",
        }
    }

    /// The other rank's side: the id, waited for up to a minute.
    fn get(self, path: &Path) -> crate::Result<UniqueId> {
        let wait = Duration::from_secs(60);
        match self {
            Exchange::File => UniqueId::read_file(path, wait),
            Exchange::Socket => UniqueId::receive(path, wait),
        }
    }

    /// Rank 0's side: hands `id` to the one other rank (the socket: once it has come for it).
    fn give(self, id: &UniqueId, path: &Path) -> crate::Result<()> {
        match self {
            Exchange::File => id.write_file(path),
            Exchange::Socket => id.serve(path, 1, Duration::from_secs(60)),
        }
    }
}

/// The (rank, exchange, path) this process plays when a test spawned it.
fn role() -> Option<(usize, Exchange, PathBuf)> {
    let v = std::env::var(ROLE).ok()?;
    let (rank, rest) = v.split_once(':')?;
    let (how, path) = rest.split_once(':')?;
    let how = [Exchange::File, Exchange::Socket]
        .into_iter()
        .find(|h| h.name() == how)?;
    Some((rank.parse().ok()?, how, PathBuf::from(path)))
}

/// A fresh path for the id of this process's test.
fn id_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("graph-rt-{test}-{}.id", std::process::id()))
}

/// The other rank's process: the child and the file its output goes to. Dropped without
/// [`Other::wait`] (this rank's test failed first), it kills the child and echoes its output:
/// never a child left running on the GPU, nor its side of a failure lost.
struct Other {
    child: Option<Child>,
    log: PathBuf,
}

/// Runs this binary's test `test` (of this module) in a child process as `rank`. Its output
/// goes to a file, echoed by [`Other::wait`] with each line prefixed: the suite's log parsers
/// read one test's `test result:` line a log.
fn spawn_rank(test: &str, rank: usize, how: Exchange, file: &Path) -> Other {
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, m)| m);
    let log = file.with_extension(format!("rank{rank}.log"));
    let out = std::fs::File::create(&log).expect("the other rank's log file");
    let err = out.try_clone().expect("the other rank's log file");
    let child = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([
            &format!("{module}::{test}"),
            "--exact",
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(ROLE, format!("{rank}:{}:{}", how.name(), file.display()))
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawning the other rank's process");
    Other {
        child: Some(child),
        log,
    }
}

impl Other {
    /// Waits up to `timeout` (kills it past that: a failed test, never a hang), echoes its
    /// output, and returns how it ended.
    fn wait(mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("waited once");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for the other rank") {
                break Some(status);
            }
            if start.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.echo();
        status.unwrap_or_else(|| {
            panic!("the other rank's process did not end within {timeout:?}: killed")
        })
    }

    /// Prints the other rank's output, each line prefixed, and removes its file.
    fn echo(&self) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        for line in text.lines() {
            eprintln!("[other rank] {line}");
        }
    }
}

impl Drop for Other {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.echo();
        }
    }
}

/// Rank `rank` of two on device `device` with `id`; NCCL's verdict.
fn init_rank(device: usize, rank: usize, id: &UniqueId) -> crate::Result<Communicator> {
    let ctx = Context::new(device)?;
    // NCCL refuses within a second; the deadline only bounds a hang. Generous: under racecheck
    // with the sanitizer pool's 14 runs at once a 30 s init deadline can pass.
    let options = CommOptions {
        init_timeout: Duration::from_secs(120),
        ..CommOptions::default()
    };
    Communicator::init_rank(&ctx, id, rank, 2, &options)
}

fn expect_duplicate_refused(who: &str, r: crate::Result<Communicator>) {
    match r {
        Err(ref e @ Error::Nccl { code, .. }) => {
            eprintln!("{who}: NCCL refused two ranks on one GPU: {e}");
            assert!(
                matches!(code, NcclCode::InvalidUsage | NcclCode::RemoteError),
                "{who}: {code:?}"
            );
        }
        Err(e) => panic!("{who}: not NCCL's refusal but {e}"),
        Ok(c) => panic!("{who}: NCCL made rank {} of two on the same GPU", c.rank()),
    }
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_two_processes_on_one_gpu_are_refused_by_nccl_with_a_typed_error() {
    const TEST: &str = "nccl_two_processes_on_one_gpu_are_refused_by_nccl_with_a_typed_error";
    if let Some((rank, how, path)) = role() {
        let id = how.get(&path).unwrap();
        expect_duplicate_refused(&format!("rank {rank} (child)"), init_rank(0, rank, &id));
        return;
    }
    // Holds the suite's GPU lock so that no other test's communicator shares the device.
    let _gpu = super::capturing_ctx();
    // The id goes through a socket here (the two-GPU test below takes a file): NCCL's own id
    // between two processes, served before either rank starts NCCL's init.
    let how = Exchange::Socket;
    let path = id_path(TEST);
    let id = UniqueId::new().unwrap();
    let child = spawn_rank(TEST, 1, how, &path);
    let given = how.give(&id, &path);
    let r = given.and_then(|()| init_rank(0, 0, &id));
    let status = child.wait(Duration::from_secs(300));
    let _ = std::fs::remove_file(&path);
    expect_duplicate_refused("rank 0 (parent)", r);
    assert!(status.success(), "the child rank: {status}");
}

#[test]
#[ignore = "needs two CUDA GPUs and NCCL"]
fn two_gpus_two_processes_meet_through_a_unique_id_file_and_rebind_a_step() {
    const TEST: &str = "two_gpus_two_processes_meet_through_a_unique_id_file_and_rebind_a_step";
    let calls = 200;
    if let Some((rank, how, path)) = role() {
        let id = how.get(&path).unwrap();
        let (eager, replay) = rank_of_two(Context::new(rank).unwrap(), id, rank, calls);
        eprintln!("rank {rank}: (child process) eager {eager:.1} µs, step {replay:.1} µs");
        return;
    }
    let (c0, _c1) = two_gpus();
    let (how, file) = (Exchange::File, id_path(TEST));
    let id = UniqueId::new().unwrap();
    how.give(&id, &file).unwrap();
    let child = spawn_rank(TEST, 1, how, &file);
    let (eager, replay) = rank_of_two(c0.clone(), id, 0, calls);
    let status = child.wait(Duration::from_secs(300));
    let _ = std::fs::remove_file(&file);
    eprintln!("rank 0: (two processes, parent) all-reduce 4 KiB bf16, host-synchronized µs: eager {eager:.1}, step (rebound every call) {replay:.1}");
    assert!(status.success(), "the child rank: {status}");
}
