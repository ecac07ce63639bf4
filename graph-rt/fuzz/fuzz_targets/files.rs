//! graph-rt's readers of files other programs (or earlier runs) wrote, on any bytes: Triton's
//! cache metadata (`TritonMetadata::from_json`), its TTIR (`ttir_args`, for the kernel the text
//! names first, and for a name it does not hold), a calibrated cost model
//! (`CostModel::from_json`) and the profiler's decisions file (`DecisionStore::open` on a file
//! of these bytes; a file it reads, saved again, reads again). Nothing may panic; errors are
//! fine. No GPU: none of them calls the driver.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use graph_rt::choose::CostModel;
use graph_rt::profile::DecisionStore;
use graph_rt::triton::{ttir_args, TritonMetadata};
use libfuzzer_sys::fuzz_target;

/// One decisions file per fuzzing process, rewritten each input.
fn decisions_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("graph-rt-fuzz-decisions-{}.json", std::process::id()))
    })
}

/// The name after the first `tt.func ... @` of `text`, up to its `(`.
fn first_kernel(text: &str) -> Option<&str> {
    let at = text.find("tt.func")?;
    let rest = &text[at..];
    let name = &rest[rest.find('@')? + 1..];
    Some(&name[..name.find('(')?])
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(meta) = TritonMetadata::from_json(text) {
        let _ = meta.ctas();
    }
    if let Some(name) = first_kernel(text) {
        let _ = ttir_args(text, name);
    }
    let _ = ttir_args(text, "kernel");
    let _ = CostModel::from_json(text);
    let path = decisions_path();
    if std::fs::write(path, data).is_ok() {
        // A file it read, it writes back so that it reads again.
        let mut store = DecisionStore::open(path);
        if store.warning.is_none() && store.save().is_ok() {
            let again = DecisionStore::open(path);
            assert!(again.warning.is_none(), "{:?}", again.warning);
        }
    }
});
