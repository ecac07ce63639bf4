//! Calibration on the device: every mechanism's chain step computes the chain, a small
//! calibration gives a model of every mechanism that applies (and of an extra one), and the
//! per-device cache is written, read back, forced and extended.

use std::path::PathBuf;

use super::{assert_close, capturing_ctx, random_f32, sized};
use crate::calibrate::{
    calibrate, chain_shape, chain_step, cost_model, CalibrateOptions, ExtraMechanism, ModelSource,
    Recalibration,
};
use crate::calibrate::{flag, Chain};
use crate::choose::{choose, CostModel, Mechanism};
use crate::Stream;

/// The mechanisms built in on this device.
fn built_in(stream: &Stream) -> Vec<Mechanism> {
    let pdl = stream.context().device().compute_capability().unwrap().0 >= 9;
    let mut m = vec![
        Mechanism::Table,
        Mechanism::HostUpdate,
        Mechanism::ExecUpdate,
        Mechanism::StaticCopy,
    ];
    if crate::foreign::Prelude::device_support(stream.context()).is_ok() {
        m.insert(1, Mechanism::Prelude);
    }
    if pdl {
        m.insert(0, Mechanism::TablePdl);
    }
    m
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_mechanism_steps_its_chain_over_fresh_buffers() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    const NODES: usize = 7;
    for m in built_in(&stream) {
        let mut chain = Chain::new(&stream, m, NODES).unwrap();
        // Three steps: both buffer sets, then the first again.
        for _ in 0..3 {
            let x = random_f32(4096);
            let (input, output) = chain.next_io();
            input.copy_from_host(&x).unwrap();
            output.fill_u32(f32::NAN.to_bits()).unwrap();
            chain.step(&stream).unwrap();
            stream.synchronize().unwrap();
            let want: Vec<f64> = x.iter().map(|v| *v as f64 + NODES as f64).collect();
            assert_close(&chain.bound_output().to_vec().unwrap(), &want, 1e-6);
        }
    }
    assert!(chain_step(&stream, Mechanism::Table, 0).is_err());
}

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn assert_complete(model: &CostModel, mechanisms: &[Mechanism], sizes: &[usize]) {
    for &m in mechanisms {
        let line = model
            .line(m)
            .unwrap_or_else(|| panic!("{m} not measured: {model:?}"));
        let nodes: Vec<usize> = line.points.iter().map(|p| p.0).collect();
        assert_eq!(nodes, sizes, "{m}");
        assert!(line.points.iter().all(|p| p.1 > 0.0), "{m}: {line:?}");
    }
    assert_eq!(model.lines.len(), mechanisms.len(), "{model:?}");
    assert!(model.copy_bytes_per_us > 0.0);
    assert_eq!(CostModel::from_json(&model.to_json()).unwrap(), *model);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_small_calibration_is_complete_and_cached_per_device() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    // Three calibrations of every mechanism. Under a sanitizer (every module load, kernel and
    // step instrumented) shorter chains and one round asked for (which rounds_at makes ten at
    // chains this short, after two warm-up rounds); under racecheck shorter still.
    let (sizes, rounds) = sized((vec![10, 50], 3), (vec![2, 4], 1), (vec![1, 2], 1));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = TempDir(std::env::temp_dir().join(format!(
        "graph-rt-calibrate-gpu-{}-{nanos}",
        std::process::id()
    )));
    let small = || CalibrateOptions {
        sizes: sizes.clone(),
        rounds,
        cache_dir: Some(dir.0.clone()),
        ..Default::default()
    };
    let options = small();
    let mechanisms = built_in(&stream);
    let model = calibrate(&stream, &options).unwrap();
    assert_complete(&model, &mechanisms, &sizes);
    let pdl = mechanisms.contains(&Mechanism::TablePdl);
    let longest = *sizes.last().unwrap();
    let choice = choose(&chain_shape(longest, pdl), &model, None).unwrap();
    assert!(mechanisms.contains(&choice.chosen), "{choice}");

    // Calibrated and written; then read back (unless GRAPH_RT_RECALIBRATE forces every
    // calibration); then forced.
    let env_forced = flag(std::env::var_os("GRAPH_RT_RECALIBRATE"));
    let (first, source) = cost_model(&stream, &options).unwrap();
    assert_complete(&first, &mechanisms, &sizes);
    let ModelSource::Calibrated {
        reason,
        path: Some(path),
        saved: Ok(()),
    } = &source
    else {
        panic!("{source}");
    };
    let want = if env_forced {
        Recalibration::Forced
    } else {
        Recalibration::Missing
    };
    assert_eq!(reason, &want);
    assert!(path.starts_with(&dir.0) && path.exists(), "{source}");
    if !env_forced {
        let (second, source) = cost_model(&stream, &options).unwrap();
        assert_eq!(second, first);
        assert_eq!(source, ModelSource::Cache { path: path.clone() });
    }
    let forced = CalibrateOptions {
        recalibrate: true,
        ..small()
    };
    let (_, source) = cost_model(&stream, &forced).unwrap();
    assert!(
        matches!(
            source,
            ModelSource::Calibrated {
                reason: Recalibration::Forced,
                ..
            }
        ),
        "{source}"
    );

    // An extra mechanism (the host-update chain standing in for the prelude) joins the rounds;
    // the cached model, which lacks it, is measured anew. Where the prelude is built in, the
    // extra replaces its measurement and the cached model, which has it, is read back.
    let with_prelude = CalibrateOptions {
        extra: vec![ExtraMechanism::new(
            Mechanism::Prelude,
            |s: &Stream, n: usize| chain_step(s, Mechanism::HostUpdate, n),
        )],
        ..small()
    };
    let (third, source) = cost_model(&stream, &with_prelude).unwrap();
    let mut all = mechanisms.clone();
    if !all.contains(&Mechanism::Prelude) {
        all.push(Mechanism::Prelude);
        all.sort();
    }
    assert_complete(&third, &all, &sizes);
    if env_forced {
        assert!(
            matches!(
                source,
                ModelSource::Calibrated {
                    reason: Recalibration::Forced,
                    ..
                }
            ),
            "{source}"
        );
    } else if mechanisms.contains(&Mechanism::Prelude) {
        assert_eq!(source, ModelSource::Cache { path: path.clone() });
    } else {
        assert_eq!(
            source,
            ModelSource::Calibrated {
                reason: Recalibration::Incomplete {
                    missing: Mechanism::Prelude,
                },
                path: Some(path.clone()),
                saved: Ok(()),
            }
        );
    }
}
