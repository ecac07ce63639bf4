//! Triton fixtures (triton-fixtures/, made on an H200 by make.py with Triton 3.6's own launcher):
//! each loaded from its cache files and launched by graph-rt, original and in table forms (plain
//! and PDL), gives the bytes Triton's launch gave; in captured graphs replayed 100 times with
//! every slot rebound to fresh buffers and no synchronization between replays, every output is
//! right; specialization breaks are typed errors.

use super::capturing_ctx;
use super::triton_case::{Case, Outcome, TRITON_FIXTURES};
use crate::table::PtrSlot;
use crate::triton::{TritonArg, TritonForm, TritonKernel};
use crate::{ArgTable, DeviceBuffer, Misuse, Stream, TableOptions};

fn forms() -> [(&'static str, TritonForm); 3] {
    let pdl = graph_rt_ptx::Options {
        pdl: true,
        ..Default::default()
    };
    [
        ("original", TritonForm::Original),
        ("table", TritonForm::Table(Default::default())),
        ("PDL table", TritonForm::Table(pdl)),
    ]
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0 (the fixtures are sm_90a)"]
fn triton_fixtures_give_tritons_bytes_in_every_form() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    for fx in TRITON_FIXTURES {
        let case = Case::fixture(fx);
        for (what, form) in forms() {
            let kernel = TritonKernel::load(&ctx, &case.files, form).unwrap();
            assert_eq!(kernel.from_cubin(), what == "original");
            case.launch_once(&ctx, &stream, &kernel, what).unwrap();
        }
    }
}

/// A cubin cut short is a typed error, never handed to the driver (which takes no length), and
/// never silently replaced by the PTX beside it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn triton_cubins_cut_short_are_refused_by_load() {
    let ctx = super::ctx();
    let whole = Case::fixture(&TRITON_FIXTURES[0]).files;
    let cubin = whole.cubin.clone().unwrap();
    for cut in [4, 63, cubin.len() / 2, cubin.len() - 1] {
        let mut files = whole.clone();
        files.cubin = Some(cubin[..cut].to_vec());
        let e = TritonKernel::load(&ctx, &files, TritonForm::Original).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::MalformedImage), "{e}");
        let e = crate::Module::from_image(&ctx, &cubin[..cut]).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::MalformedImage), "{e}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0 (the fixtures are sm_90a)"]
fn triton_table_forms_in_graphs_rebound_every_replay_stay_right() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    println!(
        "triton: fixture · µs per replay (100 replays, every pointer rebound): table · PDL table"
    );
    let replays = if std::env::var_os("GRAPH_RT_SANITIZER").is_some() {
        5
    } else {
        100
    };
    for fx in TRITON_FIXTURES {
        let case = Case::fixture(fx);
        let [_, (_, table), (_, pdl)] = forms();
        let t = case.replay_rebound(&ctx, &stream, table, replays).unwrap();
        let p = case.replay_rebound(&ctx, &stream, pdl, replays).unwrap();
        println!("triton: {:<18} {t:8.2} · {p:8.2}", fx.name);
    }
}

/// One case in every form: loaded, launched once and checked; then the table forms captured
/// and replayed `replays` times, rebound every replay. A line for each form: "ok", or what went
/// wrong (graph-rt's typed error, or the first byte unlike Triton's).
fn run_case(
    ctx: &crate::Context,
    stream: &Stream,
    case: &Case,
    replays: usize,
) -> Vec<(String, Outcome<()>)> {
    let mut lines = Vec::new();
    for (what, form) in forms() {
        let loaded = TritonKernel::load(ctx, &case.files, form.clone()).map_err(|e| e.to_string());
        let once = loaded.and_then(|k| case.launch_once(ctx, stream, &k, what));
        lines.push((what.to_string(), once));
        if what != "original" {
            let replayed = case.replay_rebound(ctx, stream, form, replays).map(|_| ());
            lines.push((format!("{what}, {replays} replays rebound"), replayed));
        }
    }
    lines
}

/// Real torch.compile kernels, never seen by graph-rt's authors: every case of the folder
/// GRAPH_RT_TRITON_CASES (made at run time by scripts/inductor_cases.py, which records Inductor's
/// Triton launches with Triton's own launcher) gives Triton's bytes in every form, eagerly and
/// in graphs rebound every replay. Every case is run; the failures are listed together.
#[test]
#[ignore = "needs a CUDA GPU and GRAPH_RT_TRITON_CASES (run.sh's inductor part makes both)"]
fn triton_cases_from_a_folder_give_tritons_bytes_in_every_form() {
    let Some(dir) = std::env::var_os("GRAPH_RT_TRITON_CASES") else {
        panic!("set GRAPH_RT_TRITON_CASES to a folder made by scripts/inductor_cases.py");
    };
    let dir = std::path::PathBuf::from(dir);
    let index = std::fs::read(dir.join("INDEX.json")).expect("INDEX.json in GRAPH_RT_TRITON_CASES");
    let names: Vec<String> = serde_json::from_slice(&index).expect("INDEX.json lists the cases");
    assert!(!names.is_empty(), "no cases in {}", dir.display());
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let replays = if std::env::var_os("GRAPH_RT_SANITIZER").is_some() {
        2
    } else {
        10
    };
    let mut failures = Vec::new();
    for name in &names {
        let lines = match Case::read(&dir.join(name)) {
            Ok(case) => run_case(&ctx, &stream, &case, replays),
            Err(e) => vec![("read".to_string(), Err(e))],
        };
        for (what, outcome) in lines {
            match outcome {
                Ok(()) => println!("triton case {name}: {what}: ok"),
                Err(e) => {
                    println!("triton case {name}: {what}: FAILED: {e}");
                    failures.push(format!("{name} ({what}): {e}"));
                }
            }
        }
    }
    println!(
        "triton cases: {} cases, {} checks failed",
        names.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0 (the fixtures are sm_90a)"]
fn triton_specialization_breaks_are_typed_errors() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let fx = Case::fixture(TRITON_FIXTURES.iter().find(|f| f.name == "add").unwrap());
    // add_kernel(x, y, out, n): every pointer and n compiled as divisible by 16.
    let kernel = TritonKernel::load(&ctx, &fx.files, TritonForm::Original).unwrap();
    assert!(kernel.params().iter().all(|p| p.divisible_16));
    let bufs: Vec<DeviceBuffer<f32>> = (0..3)
        .map(|_| DeviceBuffer::zeroed(&ctx, 4100).unwrap())
        .collect();
    let shifted = bufs[0].slice(1..4097).unwrap();
    let misuse = |r: crate::Result<()>| r.err().and_then(|e| e.misuse_kind().cloned());
    let breaks = |index| Some(Misuse::Specialization { index });
    let b = |i: usize| TritonArg::buffer(&bufs[i]);
    // SAFETY: refused before launching, or launched on 4100-float buffers with n ≤ 4096.
    unsafe {
        assert_eq!(
            misuse(kernel.launch(
                &stream,
                [4, 1, 1],
                &[TritonArg::view(&shifted), b(1), b(2), TritonArg::i32(4096)]
            )),
            breaks(0)
        );
        assert_eq!(
            misuse(kernel.launch(
                &stream,
                [5, 1, 1],
                &[b(0), b(1), b(2), TritonArg::i32(4100)]
            )),
            breaks(3)
        );
        kernel
            .launch(
                &stream,
                [4, 1, 1],
                &[b(0), b(1), b(2), TritonArg::i32(4096)],
            )
            .unwrap();
    }
    // Table form with n a scalar slot: the slot must take multiples of 16, and does.
    let options = graph_rt_ptx::Options {
        scalars: vec!["add_kernel:3".parse().unwrap()],
        ..Default::default()
    };
    let table_kernel = TritonKernel::load(&ctx, &fx.files, TritonForm::Table(options)).unwrap();
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let loose: PtrSlot<f32> = table.ptr_slot_with(4, 0).unwrap();
    let p: Vec<PtrSlot<f32>> = (0..3).map(|_| table.ptr_slot().unwrap()).collect();
    let any_n = table.scalar_slot::<i32>().unwrap();
    let n16 = table.scalar_slot_with::<i32>(16).unwrap();
    let s = |i: usize| TritonArg::ptr_slot(&p[i]);
    // SAFETY: every call is refused before launching.
    unsafe {
        assert_eq!(
            misuse(table_kernel.launch(
                &stream,
                [4, 1, 1],
                &[
                    TritonArg::ptr_slot(&loose),
                    s(1),
                    s(2),
                    TritonArg::scalar_slot(&n16)
                ]
            )),
            breaks(0)
        );
        assert_eq!(
            misuse(table_kernel.launch(
                &stream,
                [4, 1, 1],
                &[s(0), s(1), s(2), TritonArg::scalar_slot(&any_n)]
            )),
            breaks(3)
        );
        // A value where the table form reads a slot.
        assert_eq!(
            misuse(table_kernel.launch(
                &stream,
                [4, 1, 1],
                &[s(0), s(1), s(2), TritonArg::i32(4096)]
            )),
            Some(Misuse::WrongArgument { index: 3 })
        );
    }
    assert_eq!(
        table
            .set_scalar(&n16, 4100)
            .unwrap_err()
            .misuse_kind()
            .cloned(),
        Some(Misuse::NotMultiple { multiple: 16 })
    );
    table.set_scalar(&n16, 4096).unwrap();
    stream.synchronize().unwrap();
}
