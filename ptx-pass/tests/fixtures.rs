//! The pass on real Triton 3.6, NVRTC 12.4 and nvcc 13.0 output (`fixtures/`).

mod common;

use common::{all_scalars, all_valid, check_edits, text, NVCC, NVCC13, TRITON, TRITON_PTX84};
use graph_rt_ptx::{indirect, inspect, DefaultChoice, Options, SlotKind, StateSpace};

#[test]
fn every_fixture_rewrites_with_and_without_pdl_and_scalars() {
    for (name, ptx) in all_valid() {
        let scalars = all_scalars(ptx);
        let options = [
            Options::default(),
            Options {
                pdl: true,
                ..Options::default()
            },
            scalars.clone(),
            Options {
                pdl: true,
                ..scalars
            },
        ];
        for o in options {
            let out = indirect(ptx, &o).unwrap_or_else(|e| panic!("{name} {o:?}: {e}"));
            let edits = check_edits(text(ptx), &out.ptx);
            assert!(edits.edited_loads > 0, "{name}");
            assert!(edits.edited_decls >= o.scalars.len(), "{name}");
            if o.pdl {
                assert!(out.ptx.contains("\tgriddepcontrol.wait;\n"), "{name}");
            }
        }
    }
}

#[test]
fn triton_pointers_are_selected_and_scratch_is_left_alone() {
    for &(name, ptx) in TRITON.iter().chain(TRITON_PTX84) {
        let info = inspect(ptx).unwrap();
        assert!(info.llvm, "{name}");
        assert!(info.target.as_deref() == Some("sm_90a"), "{name}");
        for k in &info.kernels {
            let n = k.params.len();
            for p in &k.params {
                let expected = if p.index >= n - 2 {
                    DefaultChoice::TritonScratch
                } else if p.ptr.is_some() {
                    DefaultChoice::DeclaredPointer
                } else {
                    DefaultChoice::Scalar
                };
                assert_eq!(p.default, expected, "{name} {}", p.name);
            }
        }
        let out = indirect(ptx, &Options::default()).unwrap();
        assert!(
            out.notes[0].contains("left Triton's scratch parameters"),
            "{name}"
        );
        for (k, sig) in info.kernels.iter().zip(&out.kernels) {
            for (p, s) in k.params.iter().zip(&sig.params) {
                assert_eq!(s.slot.is_some(), p.default.selected(), "{name} {}", p.name);
                if let Some(slot) = s.slot {
                    assert_eq!(slot.kind, SlotKind::Pointer);
                    assert_eq!(slot.align, 1, "Triton declares .align 1");
                    assert_eq!(p.ptr, Some(StateSpace::Global));
                }
            }
        }
        // A kernel whose slots all point to 8-byte words says so.
        assert!(out.ptx.contains(".ptr .global .align 8 "), "{name}");
        // sm_90a stays sm_90a with PDL, and .version 8.4/8.7 need no raising.
        let pdl = indirect(
            ptx,
            &Options {
                pdl: true,
                ..Options::default()
            },
        )
        .unwrap();
        assert!(pdl.ptx.contains("\n.target sm_90a\n"), "{name}");
        assert!(!pdl.notes.iter().any(|n| n.contains("raised")), "{name}");
    }
}

#[test]
fn naming_triton_scratch_rewrites_it() {
    let ptx = TRITON[0].1;
    let mut o = Options {
        exclude_triton_scratch: false,
        ..Options::default()
    };
    let all = indirect(ptx, &o).unwrap();
    let info = inspect(ptx).unwrap();
    for (p, s) in info.kernels[0].params.iter().zip(&all.kernels[0].params) {
        assert_eq!(s.slot.is_some(), p.ptr.is_some(), "{}", p.name);
    }
    o.exclude_triton_scratch = true;
    let n = all.kernels[0].params.len();
    o.params = vec![format!("{}:{}", all.kernels[0].name, n - 1)
        .parse()
        .unwrap()];
    let last = indirect(ptx, &o).unwrap();
    let slots: Vec<bool> = last.kernels[0]
        .params
        .iter()
        .map(|p| p.slot.is_some())
        .collect();
    assert_eq!(slots.iter().filter(|s| **s).count(), 1);
    assert!(slots[n - 1]);
}

#[test]
fn nvcc_fixtures_select_pointers_only() {
    for &(name, ptx) in NVCC.iter().chain(NVCC13) {
        let info = inspect(ptx).unwrap();
        assert!(!info.llvm, "{name}");
        for k in &info.kernels {
            for p in &k.params {
                let pointer = p.size == 8 && !p.ty.is_float();
                assert_eq!(
                    p.default.selected(),
                    pointer,
                    "{name} {} {}",
                    k.name,
                    p.name
                );
            }
        }
    }
}

#[test]
fn rewriting_rewritten_triton_works_again() {
    for &(name, ptx) in TRITON {
        let once = indirect(ptx, &Options::default()).unwrap();
        let twice = indirect(once.ptx.as_bytes(), &Options::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        check_edits(&once.ptx, &twice.ptx);
    }
}

#[test]
fn module_info_displays_every_parameter() {
    let info = inspect(TRITON[0].1).unwrap();
    let shown = info.to_string();
    assert!(shown.starts_with(".version 8.7, .target sm_90a (LLVM NVPTX)\n"));
    for p in &info.kernels[0].params {
        assert!(shown.contains(&p.name));
    }
    assert!(shown.contains("not selected: Triton scratch pointer"));
}
