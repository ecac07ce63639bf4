//! Decisions kept across processes: a JSON file of entries keyed by step name, key, a
//! fingerprint of the captured work, device, driver and graph-rt build. Written atomically (a
//! temporary file renamed over the old one); a file that is missing, corrupt or of another
//! format means profiling again, with a warning — never a panic — and an entry of another
//! device, driver, build or fingerprint is stale: not used, replaced when the step decides again.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::decide::{Decision, Mode, Reason};
use crate::error::{Error, Misuse, Result};
use crate::files;

/// What an entry is for: the step, its key and everything that makes a decision stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionKey {
    /// The step's name.
    pub step: String,
    /// The user's key within the step (a shape bucket, a batch size); empty if none.
    pub key: String,
    /// A fingerprint of the captured work (node kinds, kernels, launch dimensions).
    pub fingerprint: u64,
    /// The device (its name and compute capability, or its UUID).
    pub device: String,
    /// The driver's CUDA version (`cuDriverGetVersion`).
    pub driver: i32,
    /// graph-rt's build (its version).
    pub build: String,
}

/// One stored decision with the figures it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDecision {
    /// What it is for.
    pub key: DecisionKey,
    /// The mode kept.
    pub mode: Mode,
    /// The reason's code when it was made ([`Reason::code`]).
    pub reason: String,
    /// Eager and graph medians, µs a call, when it was made.
    pub eager_us: f64,
    /// See `eager_us`.
    pub graph_us: f64,
}

/// The decisions file.
#[derive(Debug)]
pub struct DecisionStore {
    path: PathBuf,
    entries: Vec<StoredDecision>,
    /// Why the file could not be used as it was, if so (it is rewritten on the next save).
    pub warning: Option<String>,
}

impl DecisionStore {
    /// Reads the file at `path`; a missing file is an empty store, a corrupt or foreign one an
    /// empty store with a [`DecisionStore::warning`] (logged with `tracing`). So is a file graph-rt
    /// does not read: a symbolic link (not followed: a save replaces the link itself, never its
    /// target), a FIFO, a folder or a device, or a file over 64 MiB.
    pub fn open(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let (entries, warning) = match read(&path) {
            Err(files::Refusal::Missing) => (Vec::new(), None),
            Err(refusal) => (
                Vec::new(),
                Some(format!("{}: profiling again", refusal.describe(&path))),
            ),
            Ok(text) => match parse(&text) {
                Ok(entries) => (entries, None),
                Err(why) => (
                    Vec::new(),
                    Some(format!(
                        "{} is not a graph-rt decisions file ({why}): profiling again",
                        path.display()
                    )),
                ),
            },
        };
        if let Some(w) = &warning {
            tracing::warn!(warning = %w, "graph-rt: decisions file");
        }
        Self {
            path,
            entries,
            warning,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored decision for `key`, if one matches it in every field (else it is stale).
    pub fn get(&self, key: &DecisionKey) -> Option<&StoredDecision> {
        self.entries.iter().find(|e| &e.key == key)
    }

    /// Entries for the same step and key that another device, driver, build or captured work
    /// made (stale: not used).
    pub fn stale(&self, key: &DecisionKey) -> usize {
        self.entries
            .iter()
            .filter(|e| e.key.step == key.step && e.key.key == key.key && &e.key != key)
            .count()
    }

    /// Records `decision` for `key` (replacing the step and key's entries) and writes the file
    /// atomically, over what the file holds now (other steps' decisions written since this
    /// store was opened are kept; two processes writing at the same instant may still lose one
    /// of their entries: there is no file lock).
    pub fn put(
        &mut self,
        key: DecisionKey,
        decision: &Decision,
        eager_us: f64,
        graph_us: f64,
    ) -> Result<()> {
        if let Ok(text) = read(&self.path) {
            if let Ok(now) = parse(&text) {
                self.entries = now;
            }
        }
        self.entries
            .retain(|e| !(e.key.step == key.step && e.key.key == key.key));
        self.entries.push(StoredDecision {
            key,
            mode: decision.mode,
            reason: decision.reason.code().to_owned(),
            eager_us,
            graph_us,
        });
        self.save()
    }

    /// Writes every entry: a temporary file beside the file, renamed over it.
    pub fn save(&mut self) -> Result<()> {
        const CALL: &str = "DecisionStore::save";
        let entries: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                json!({
                    "step": e.key.step, "key": e.key.key,
                    "fingerprint": format!("{:016x}", e.key.fingerprint),
                    "device": e.key.device, "driver": e.key.driver, "build": e.key.build,
                    "mode": e.mode.name(), "reason": e.reason,
                    "eager_us": e.eager_us, "graph_us": e.graph_us,
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&json!({ "format": FORMAT, "decisions": entries }))
            .map_err(|e| Error::misuse(CALL, Misuse::Malformed, format!("{e}")))?;
        // Not a misuse graph-rt names: the file system's failure, said as std::io says it.
        let io = |e: std::io::Error| {
            Error::invalid(CALL, format!("cannot write {}: {e}", self.path.display()))
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        files::write_atomic(&self.path, text.as_bytes(), 0o644).map_err(io)?;
        self.warning = None;
        Ok(())
    }
}

/// The text of the decisions file at `path`, read as [`files::read`] reads an untrusted file.
fn read(path: &Path) -> std::result::Result<String, files::Refusal> {
    let rules = files::Rules {
        cap: files::cap::JSON_STATE,
        private: false,
    };
    let bytes = files::read(path, rules)?;
    String::from_utf8(bytes).map_err(|_| {
        files::Refusal::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not UTF-8",
        ))
    })
}

/// The file's format tag.
const FORMAT: &str = "graph-rt decisions 1";

fn parse(text: &str) -> std::result::Result<Vec<StoredDecision>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if v["format"].as_str() != Some(FORMAT) {
        return Err(format!("format is not {FORMAT:?}"));
    }
    let list = v["decisions"].as_array().ok_or("no decisions list")?;
    list.iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().map(str::to_owned).ok_or(format!("no {k}"));
            let f = |k: &str| e[k].as_f64().ok_or(format!("no {k}"));
            Ok(StoredDecision {
                key: DecisionKey {
                    step: s("step")?,
                    key: s("key")?,
                    fingerprint: u64::from_str_radix(&s("fingerprint")?, 16)
                        .map_err(|_| "a fingerprint that is not hexadecimal")?,
                    device: s("device")?,
                    driver: e["driver"].as_i64().ok_or("no driver")? as i32,
                    build: s("build")?,
                },
                mode: Mode::from_name(&s("mode")?).ok_or("an unknown mode")?,
                reason: s("reason")?,
                eager_us: f("eager_us")?,
                graph_us: f("graph_us")?,
            })
        })
        .collect()
}

impl StoredDecision {
    /// The decision as the profiler applies it.
    pub fn decision(&self) -> Decision {
        Decision {
            mode: self.mode,
            reason: Reason::FromFile,
            saving_us: self.eager_us - self.graph_us,
            break_even_calls: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn key(step: &str) -> DecisionKey {
        DecisionKey {
            step: step.into(),
            key: "b1".into(),
            fingerprint: 0xdead_beef,
            device: "NVIDIA H200 (9.0)".into(),
            driver: 13000,
            build: "0.1.0".into(),
        }
    }

    fn graph_wins() -> Decision {
        Decision {
            mode: Mode::Graph,
            reason: Reason::GraphWins,
            saving_us: 60.0,
            break_even_calls: Some(50),
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("graph-rt-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("decisions.json")
    }

    #[test]
    fn decisions_round_trip_through_the_file_and_a_second_process_reads_them() {
        let path = temp("round-trip");
        let mut store = DecisionStore::open(&path);
        assert!(store.warning.is_none(), "a missing file is an empty store");
        store
            .put(key("decode"), &graph_wins(), 100.0, 40.0)
            .unwrap();
        let again = DecisionStore::open(&path);
        let got = again.get(&key("decode")).expect("stored");
        assert_eq!(got.mode, Mode::Graph);
        assert_eq!(got.decision().reason, Reason::FromFile);
        assert_eq!(got.reason, "graph-wins");
        // Another driver: stale, not used.
        let mut other = key("decode");
        other.driver = 12040;
        assert!(again.get(&other).is_none());
        assert_eq!(again.stale(&other), 1);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_corrupt_or_foreign_file_means_profiling_again_with_a_warning() {
        let path = temp("corrupt");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for text in [
            "{ not json",
            "{\"format\": \"something else\", \"decisions\": []}",
            "[1, 2]",
            "{\"format\": \"graph-rt decisions 1\", \"decisions\": [{\"step\": 3}]}",
        ] {
            std::fs::write(&path, text).unwrap();
            let mut store = DecisionStore::open(&path);
            assert!(store.warning.is_some(), "{text}");
            assert!(store.get(&key("decode")).is_none());
            // Saving replaces it with a good file.
            store.put(key("decode"), &graph_wins(), 1.0, 0.5).unwrap();
            assert!(DecisionStore::open(&path).warning.is_none());
        }
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn any_mangled_file_opens_without_a_panic() {
        let path = temp("mangled");
        let mut store = DecisionStore::open(&path);
        store
            .put(key("decode"), &graph_wins(), 100.0, 40.0)
            .unwrap();
        let good = std::fs::read(&path).unwrap();
        let mut rng = StdRng::seed_from_u64(0x2545_f491_4f6c_dd1d);
        for _ in 0..500 {
            let mut bytes = good.clone();
            for _ in 0..rng.random_range(1..=4) {
                if bytes.is_empty() {
                    break;
                }
                let i = rng.random_range(0..bytes.len());
                match rng.random_range(0..3) {
                    0 => bytes[i] = rng.random(),
                    1 => {
                        bytes.remove(i);
                    }
                    _ => bytes.truncate(i),
                }
            }
            std::fs::write(&path, &bytes).unwrap();
            let opened = DecisionStore::open(&path);
            // Either a usable store or an empty one with a warning: never a panic.
            assert!(opened.warning.is_some() || opened.entries.len() <= 1);
        }
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn two_stores_on_one_file_keep_each_others_decisions() {
        let path = temp("two-stores");
        let (mut a, mut b) = (DecisionStore::open(&path), DecisionStore::open(&path));
        a.put(key("decode"), &graph_wins(), 100.0, 40.0).unwrap();
        b.put(key("prefill"), &graph_wins(), 80.0, 30.0).unwrap();
        let both = DecisionStore::open(&path);
        assert!(
            both.get(&key("decode")).is_some(),
            "b's write kept a's decision"
        );
        assert!(both.get(&key("prefill")).is_some());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_new_decision_replaces_the_steps_old_one() {
        let path = temp("replace");
        let mut store = DecisionStore::open(&path);
        store
            .put(key("decode"), &graph_wins(), 100.0, 40.0)
            .unwrap();
        let mut k = key("decode");
        k.fingerprint = 7;
        let eager = Decision {
            mode: Mode::Eager,
            reason: Reason::WithinNoise,
            saving_us: 0.0,
            break_even_calls: None,
        };
        store.put(k.clone(), &eager, 10.0, 10.0).unwrap();
        let again = DecisionStore::open(&path);
        assert_eq!(again.get(&k).map(|d| d.mode), Some(Mode::Eager));
        assert!(again.get(&key("decode")).is_none());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_symlink_fifo_or_folder_where_the_file_should_be_is_not_read_and_nothing_is_lost() {
        let path = temp("hostile");
        let dir = path.parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        // A link to a file graph-rt must neither read nor write.
        let target = dir.join("precious");
        std::fs::write(&target, b"root:x:0:0").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let mut store = DecisionStore::open(&path);
        let w = store.warning.clone().unwrap();
        assert!(w.contains("symbolic link"), "{w}");
        store.put(key("a"), &graph_wins(), 9.0, 3.0).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"root:x:0:0");
        assert!(DecisionStore::open(&path).get(&key("a")).is_some());
        // A FIFO: refused at once, never waited on.
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || tx.send(DecisionStore::open(&p).warning));
        let w = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("DecisionStore::open blocked on a FIFO")
            .unwrap();
        assert!(w.contains("a FIFO"), "{w}");
        // A folder: a warning, and a save that fails with the file system's error, not a panic.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let mut store = DecisionStore::open(&path);
        assert!(store.warning.as_deref().unwrap().contains("a folder"));
        let e = store.put(key("b"), &graph_wins(), 9.0, 3.0).unwrap_err();
        assert_eq!(e.misuse_kind(), None, "{e}");
        // A sparse giant: refused before it is read.
        std::fs::remove_dir(&path).unwrap();
        std::fs::File::create(&path)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let w = DecisionStore::open(&path).warning.unwrap();
        assert!(w.contains("more than the"), "{w}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
