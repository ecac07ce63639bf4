//! The per-device cost model on disk: where the file lives, reading it (anything but a model of
//! this device with every planned mechanism at the planned sizes is a reason to calibrate,
//! never a panic), writing
//! it atomically, and the report of where a model came from. Pure file handling: the
//! calibration itself is a closure.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use crate::choose::{CostModel, Mechanism};
use crate::error::Result;
use crate::files;

/// The cache directory, when set (first choice).
pub(crate) const ENV_CACHE_DIR: &str = "GRAPH_RT_CACHE_DIR";
/// Set to `1` to calibrate even when a cached model is readable.
pub(crate) const ENV_RECALIBRATE: &str = "GRAPH_RT_RECALIBRATE";

/// Where [`cost_model`](super::cost_model) got its model.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelSource {
    /// Read from the cache file at `path`.
    Cache {
        /// The file.
        path: PathBuf,
    },
    /// Measured now by [`calibrate`](super::calibrate).
    Calibrated {
        /// Why the cache was not used.
        reason: Recalibration,
        /// The cache file, when there is a cache directory.
        path: Option<PathBuf>,
        /// Whether the model was written there, or why not (the model is used either way).
        saved: std::result::Result<(), String>,
    },
}

/// Why [`cost_model`](super::cost_model) calibrated instead of reading its cache.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Recalibration {
    /// None of `GRAPH_RT_CACHE_DIR`, `XDG_CACHE_HOME` and `HOME` is set, and the options name
    /// no directory.
    NoCacheDir,
    /// No model is cached for this device yet.
    Missing,
    /// `GRAPH_RT_RECALIBRATE=1`, or [`CalibrateOptions::recalibrate`](super::CalibrateOptions).
    Forced,
    /// The file could not be read or is not a cost model (truncated, corrupt, another version).
    Unreadable {
        /// What was wrong with it.
        error: String,
    },
    /// The file holds the model of another device (copied from another machine?).
    OtherDevice {
        /// The device the file names.
        found: String,
    },
    /// The file lacks a mechanism this calibration measures (say, one added through
    /// [`CalibrateOptions::extra`](super::CalibrateOptions)).
    Incomplete {
        /// The first mechanism missing.
        missing: Mechanism,
    },
    /// The file's model was measured at other chain sizes than
    /// [`CalibrateOptions::sizes`](super::CalibrateOptions).
    OtherSizes {
        /// The kernel-node counts of the cached model's first line that differs.
        found: Vec<usize>,
    },
}

impl fmt::Display for Recalibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Recalibration::NoCacheDir => write!(
                f,
                "no cache directory (set {ENV_CACHE_DIR}, XDG_CACHE_HOME or HOME)"
            ),
            Recalibration::Missing => f.write_str("no cached model for this device"),
            Recalibration::Forced => f.write_str("recalibration forced"),
            Recalibration::Unreadable { error } => {
                write!(f, "the cached model is unreadable: {error}")
            }
            Recalibration::OtherDevice { found } => {
                write!(f, "the cached model is of another device ({found})")
            }
            Recalibration::Incomplete { missing } => {
                write!(f, "the cached model has no {missing} measurements")
            }
            Recalibration::OtherSizes { found } => {
                write!(
                    f,
                    "the cached model was measured at other chain sizes {found:?}"
                )
            }
        }
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSource::Cache { path } => write!(f, "read from {}", path.display()),
            ModelSource::Calibrated {
                reason,
                path,
                saved,
            } => {
                write!(f, "calibrated now ({reason})")?;
                match (path, saved) {
                    (Some(p), Ok(())) => write!(f, "; written to {}", p.display()),
                    (_, Err(why)) => write!(f, "; not saved: {why}"),
                    (None, Ok(())) => Ok(()),
                }
            }
        }
    }
}

/// The cache directory from the environment variables `var` reads: `GRAPH_RT_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/graph-rt` (an absolute path, as the XDG specification requires), else
/// `$HOME/.cache/graph-rt`. Empty values count as unset.
pub(crate) fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    set(ENV_CACHE_DIR)
        .or_else(|| {
            set("XDG_CACHE_HOME")
                .filter(|p| p.is_absolute())
                .map(|p| p.join("graph-rt"))
        })
        .or_else(|| set("HOME").map(|p| p.join(".cache").join("graph-rt")))
}

/// Whether an environment variable's value asks for something (`1`, `true`, `yes`; not unset,
/// empty, `0`, `false` or `no`).
pub(crate) fn flag(value: Option<OsString>) -> bool {
    value.is_some_and(|v| {
        let v = v.to_string_lossy().trim().to_ascii_lowercase();
        !matches!(v.as_str(), "" | "0" | "false" | "no")
    })
}

/// The file name of the model of the device whose key is `key`: `cost-model-<key>.json`, with
/// anything but ASCII letters, digits, `-`, `_` and `.` replaced by `_`.
pub(crate) fn file_name(key: &str) -> String {
    let key: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("cost-model-{key}.json")
}

/// What the cache holds for one file.
#[derive(Debug)]
pub(crate) enum Cached {
    /// No file.
    Missing,
    /// A model.
    Model(CostModel),
    /// A file that is not a readable model, and why.
    Unreadable(String),
}

/// Reads the model at `path`: a file graph-rt does not read (a symbolic link, which is not
/// followed, a FIFO, a folder, a file over 64 MiB) is unreadable, and calibrating again
/// replaces it.
pub(crate) fn read(path: &Path) -> Cached {
    let rules = files::Rules {
        cap: files::cap::JSON_STATE,
        private: false,
    };
    match files::read(path, rules) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => match CostModel::from_json(&text) {
                Ok(model) => Cached::Model(model),
                Err(e) => Cached::Unreadable(e.to_string()),
            },
            Err(_) => Cached::Unreadable(format!("{} is not UTF-8", path.display())),
        },
        Err(files::Refusal::Missing) => Cached::Missing,
        Err(refusal) => Cached::Unreadable(refusal.describe(path)),
    }
}

/// Writes `model` to `path` atomically (the folder created if need be): see
/// [`files::write_atomic`]. Another process calibrating at the same time writes its own
/// temporary file; the last rename wins.
pub(crate) fn write(path: &Path, model: &CostModel) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    files::write_atomic(path, model.to_json().as_bytes(), 0o644)
}

/// The model wanted: of which device, measuring which mechanisms at which chain sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted<'a> {
    /// The device's description ([`CostModel::device`]).
    pub(crate) device: &'a str,
    /// Every mechanism the calibration measures.
    pub(crate) mechanisms: &'a [Mechanism],
    /// The kernel-node counts it measures them at.
    pub(crate) sizes: &'a [usize],
}

/// Why the cached `found` cannot stand for the model `wanted`, if so.
fn stale(found: &CostModel, wanted: Wanted<'_>) -> Option<Recalibration> {
    if found.device != wanted.device {
        return Some(Recalibration::OtherDevice {
            found: found.device.clone(),
        });
    }
    let mut sizes = wanted.sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    wanted.mechanisms.iter().find_map(|&m| {
        let Some(line) = found.line(m) else {
            return Some(Recalibration::Incomplete { missing: m });
        };
        let at: Vec<usize> = line.points.iter().map(|p| p.0).collect();
        (at != sizes).then_some(Recalibration::OtherSizes { found: at })
    })
}

/// The model cached at `path` (none without a cache directory) when it is readable and the one
/// `wanted`, and `forced` is false; else the one `calibrate` measures, written to `path`.
/// Errors only when `calibrate` fails.
pub(crate) fn load_or_calibrate(
    path: Option<PathBuf>,
    forced: bool,
    wanted: Wanted<'_>,
    calibrate: impl FnOnce() -> Result<CostModel>,
) -> Result<(CostModel, ModelSource)> {
    let reason = match (&path, forced) {
        (None, _) => Recalibration::NoCacheDir,
        (Some(_), true) => Recalibration::Forced,
        (Some(p), false) => match read(p) {
            Cached::Missing => Recalibration::Missing,
            Cached::Unreadable(error) => Recalibration::Unreadable { error },
            Cached::Model(model) => match stale(&model, wanted) {
                Some(reason) => reason,
                None => {
                    let path = p.clone();
                    return Ok((model, ModelSource::Cache { path }));
                }
            },
        },
    };
    let model = calibrate()?;
    let saved = match &path {
        Some(p) => write(p, &model).map_err(|e| format!("{}: {e}", p.display())),
        None => Err(Recalibration::NoCacheDir.to_string()),
    };
    Ok((
        model,
        ModelSource::Calibrated {
            reason,
            path,
            saved,
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A fresh directory under the system's temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let p = std::env::temp_dir().join(format!(
                "graph-rt-calibrate-{name}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            ));
            fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn model(device: &str, us: f64) -> CostModel {
        let s = [
            (Mechanism::Table, 10, us),
            (Mechanism::Table, 1000, 10.0 * us),
            (Mechanism::StaticCopy, 10, us + 1.0),
            (Mechanism::StaticCopy, 1000, 10.0 * us + 1.0),
        ];
        CostModel::fit(device, &s, 2.0e6).unwrap()
    }

    fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_cache_dir_follows_the_environment_in_order() {
        let all = [
            (ENV_CACHE_DIR, "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(cache_dir_from(env(&all)), Some(PathBuf::from("/c")));
        assert_eq!(
            cache_dir_from(env(&all[1..])),
            Some(PathBuf::from("/x/graph-rt"))
        );
        assert_eq!(
            cache_dir_from(env(&all[2..])),
            Some(PathBuf::from("/h/.cache/graph-rt"))
        );
        // Empty values are unset; a relative XDG_CACHE_HOME is ignored, as XDG says.
        let odd = [
            (ENV_CACHE_DIR, ""),
            ("XDG_CACHE_HOME", "rel"),
            ("HOME", "/h"),
        ];
        assert_eq!(
            cache_dir_from(env(&odd)),
            Some(PathBuf::from("/h/.cache/graph-rt"))
        );
        assert_eq!(cache_dir_from(env(&[])), None);
    }

    #[test]
    fn flags_and_file_names() {
        for yes in ["1", "true", "YES", " 1 "] {
            assert!(flag(Some(yes.into())), "{yes}");
        }
        for no in ["", "0", "false", "No"] {
            assert!(!flag(Some(no.into())), "{no}");
        }
        assert!(!flag(None));
        assert_eq!(
            file_name("GPU-8c3e0b1a-12ab-cd34-ef56-0123456789ab"),
            "cost-model-GPU-8c3e0b1a-12ab-cd34-ef56-0123456789ab.json"
        );
        assert_eq!(file_name("a/b c:..x"), "cost-model-a_b_c_..x.json");
    }

    #[test]
    fn a_model_round_trips_through_the_file_and_no_temporary_is_left() {
        let dir = TempDir::new("round-trip");
        let path = dir.0.join("sub").join(file_name("GPU-1"));
        assert!(matches!(read(&path), Cached::Missing));
        let m = model("dev GPU-1", 5.0);
        write(&path, &m).unwrap();
        write(&path, &m).unwrap();
        match read(&path) {
            Cached::Model(back) => assert_eq!(back, m),
            other => panic!("{other:?}"),
        }
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from(file_name("GPU-1"))]);
    }

    #[test]
    fn calibrates_once_then_reads_the_cache() {
        let dir = TempDir::new("once");
        let path = dir.0.join(file_name("GPU-2"));
        let calls = Cell::new(0);
        let run = |forced| {
            let wanted = Wanted {
                device: "dev GPU-2",
                mechanisms: &[Mechanism::Table, Mechanism::StaticCopy],
                sizes: &[1000, 10, 10],
            };
            load_or_calibrate(Some(path.clone()), forced, wanted, || {
                calls.set(calls.get() + 1);
                Ok(model("dev GPU-2", calls.get() as f64))
            })
            .unwrap()
        };
        let (first, source) = run(false);
        assert_eq!(
            source,
            ModelSource::Calibrated {
                reason: Recalibration::Missing,
                path: Some(path.clone()),
                saved: Ok(())
            }
        );
        let (second, source) = run(false);
        assert_eq!(second, first);
        assert_eq!(source, ModelSource::Cache { path: path.clone() });
        assert!(source.to_string().starts_with("read from "));
        let (third, source) = run(true);
        assert_eq!(calls.get(), 2);
        assert_ne!(third, first);
        assert!(matches!(
            source,
            ModelSource::Calibrated {
                reason: Recalibration::Forced,
                ..
            }
        ));
    }

    #[test]
    fn corrupt_foreign_or_incomplete_files_are_recalibrated_and_replaced() {
        let dir = TempDir::new("corrupt");
        let path = dir.0.join(file_name("GPU-3"));
        let fresh = || Ok(model("dev GPU-3", 7.0));
        let unreadable = Recalibration::Unreadable {
            error: String::new(),
        };
        let both = [Mechanism::Table, Mechanism::StaticCopy];
        // (file contents, mechanisms and sizes wanted, the reason to calibrate)
        type Case<'a> = (Vec<u8>, &'a [Mechanism], &'a [usize], Recalibration);
        let cases: [Case<'_>; 5] = [
            (
                b"{\"version\":1,\"dev".to_vec(),
                &both,
                &[10, 1000],
                unreadable.clone(),
            ),
            (vec![0xff, 0xfe, 0x00], &both, &[10, 1000], unreadable),
            (
                model("other GPU-9", 1.0).to_json().into_bytes(),
                &both,
                &[10, 1000],
                Recalibration::OtherDevice {
                    found: "other GPU-9".into(),
                },
            ),
            (
                model("dev GPU-3", 1.0).to_json().into_bytes(),
                &[Mechanism::Table, Mechanism::HostUpdate],
                &[10, 1000],
                Recalibration::Incomplete {
                    missing: Mechanism::HostUpdate,
                },
            ),
            (
                model("dev GPU-3", 1.0).to_json().into_bytes(),
                &both,
                &[10, 50, 1000],
                Recalibration::OtherSizes {
                    found: vec![10, 1000],
                },
            ),
        ];
        for (bytes, mechanisms, sizes, want) in cases {
            fs::write(&path, bytes).unwrap();
            let wanted = Wanted {
                device: "dev GPU-3",
                mechanisms,
                sizes,
            };
            let (m, source) = load_or_calibrate(Some(path.clone()), false, wanted, fresh).unwrap();
            assert_eq!(m, model("dev GPU-3", 7.0));
            let ModelSource::Calibrated { reason, saved, .. } = &source else {
                panic!("{source:?}");
            };
            assert_eq!(saved, &Ok(()));
            match (reason, &want) {
                (Recalibration::Unreadable { error }, Recalibration::Unreadable { .. }) => {
                    assert!(!error.is_empty())
                }
                _ => assert_eq!(reason, &want),
            }
            assert!(matches!(read(&path), Cached::Model(m) if m == model("dev GPU-3", 7.0)));
        }
    }

    #[test]
    fn an_unwritable_or_absent_cache_still_gives_a_model() {
        let dir = TempDir::new("unwritable");
        // The cache path is a directory: unreadable as a model, and not replaceable by a file.
        let path = dir.0.join(file_name("GPU-4"));
        fs::create_dir_all(path.join("x")).unwrap();
        let fresh = || Ok(model("dev GPU-4", 3.0));
        let wanted = Wanted {
            device: "dev GPU-4",
            mechanisms: &[],
            sizes: &[10],
        };
        let (_, source) = load_or_calibrate(Some(path.clone()), false, wanted, fresh).unwrap();
        let ModelSource::Calibrated { reason, saved, .. } = &source else {
            panic!("{source:?}");
        };
        assert!(matches!(reason, Recalibration::Unreadable { .. }));
        assert!(saved.is_err());
        assert!(source.to_string().contains("not saved"), "{source}");
        let (_, source) = load_or_calibrate(None, false, wanted, fresh).unwrap();
        assert!(matches!(
            source,
            ModelSource::Calibrated {
                reason: Recalibration::NoCacheDir,
                path: None,
                saved: Err(_)
            }
        ));
        // A failing calibration is the caller's error.
        let failed = load_or_calibrate(None, false, wanted, || {
            let no_gpu = graph_rt_sys::CUresult::CUDA_ERROR_NO_DEVICE;
            Err(crate::Error::driver("cuInit", no_gpu))
        });
        assert!(failed.is_err());
    }

    #[test]
    fn a_linked_piped_or_giant_model_file_is_unreadable_and_its_target_untouched() {
        let dir = TempDir::new("hostile");
        let path = dir.0.join(file_name("GPU-1"));
        let target = dir.0.join("precious");
        fs::write(&target, model("dev GPU-1", 5.0).to_json()).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        // Even a good model behind a link is not read.
        assert!(matches!(read(&path), Cached::Unreadable(w) if w.contains("symbolic link")));
        write(&path, &model("dev GPU-1", 7.0)).unwrap();
        assert_eq!(
            fs::read_to_string(&target).unwrap(),
            model("dev GPU-1", 5.0).to_json()
        );
        assert!(matches!(read(&path), Cached::Model(_)));
        fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let got = matches!(read(&p), Cached::Unreadable(w) if w.contains("a FIFO"));
            tx.send(got)
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the read blocked on a FIFO"));
        fs::remove_file(&path).unwrap();
        fs::File::create(&path).unwrap().set_len(1 << 40).unwrap();
        assert!(matches!(read(&path), Cached::Unreadable(w) if w.contains("more than the")));
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert!(matches!(read(&path), Cached::Unreadable(w) if w.contains("a folder")));
    }
}
