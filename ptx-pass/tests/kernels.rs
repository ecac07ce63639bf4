//! The pass on the shipped kernels' PTX (`kernels/ptx/*.ptx`).

mod common;

use common::{check_edits, text, KERNELS};
use graph_rt_ptx::{
    indirect, inspect, DefaultChoice, Options, ParamRef, PtxError, ScalarType, Slot, SlotKind,
};

fn kernel(name: &str) -> &'static [u8] {
    KERNELS.iter().find(|(n, _)| *n == name).unwrap().1
}

fn pdl() -> Options {
    Options {
        pdl: true,
        ..Options::default()
    }
}

#[test]
fn every_shipped_kernel_rewrites_plain_and_with_pdl() {
    for &(name, ptx) in KERNELS {
        for options in [Options::default(), pdl()] {
            let out = indirect(ptx, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
            let edits = check_edits(text(ptx), &out.ptx);
            let slots: usize = out
                .kernels
                .iter()
                .map(|k| k.params.iter().filter(|p| p.slot.is_some()).count())
                .sum();
            assert!(slots > 0, "{name}: nothing rewritten");
            assert_eq!(
                edits.edited_decls, 0,
                "{name}: nvcc pointers keep their declaration"
            );
            let extra = if options.pdl { 2 } else { 0 };
            assert_eq!(edits.inserted, 2 + 4 * slots + extra, "{name}");
            assert!(edits.edited_loads >= slots, "{name}");
            if options.pdl {
                assert!(out.ptx.contains("\n.target sm_90\n"), "{name}");
                let launch = out
                    .ptx
                    .find("\tgriddepcontrol.launch_dependents;\n\tld.param");
                let wait = out.ptx.find("];\n\tgriddepcontrol.wait;\n");
                assert!(launch.unwrap() < wait.unwrap(), "{name}: PDL order");
                let sm70 = text(ptx).contains(".target sm_70");
                assert_eq!(edits.edited_header, usize::from(sm70), "{name}");
                assert_eq!(
                    out.notes.iter().any(|n| n.contains("sm_90")),
                    sm70,
                    "{name}"
                );
            } else {
                assert_eq!(edits.edited_header, 0, "{name}");
            }
        }
    }
}

#[test]
fn add1_selects_its_pointers_and_not_n() {
    let info = inspect(kernel("chain")).unwrap();
    assert!(!info.llvm);
    let add1 = &info.kernels[0];
    assert_eq!(add1.name, "add1");
    let defaults: Vec<_> = add1.params.iter().map(|p| p.default.clone()).collect();
    assert_eq!(
        defaults,
        [
            DefaultChoice::UsedAsAddress,
            DefaultChoice::UsedAsAddress,
            DefaultChoice::Scalar
        ]
    );
    let out = indirect(kernel("chain"), &Options::default()).unwrap();
    let sig = &out.kernels[0];
    let pointer = Some(Slot {
        kind: SlotKind::Pointer,
        align: 16,
    });
    assert_eq!(sig.params[0].slot, pointer);
    assert_eq!(sig.params[1].slot, pointer);
    assert_eq!(sig.params[2].slot, None);
    assert_eq!(sig.params[2].size, 4);
    assert_eq!(
        sig.describe(),
        "add1(0: add1_param_0 -> slot(ptr, align 16), 1: add1_param_1 -> slot(ptr, align 16), \
         2: add1_param_2 [4 bytes])"
    );
    assert!(out.ptx.contains("\tmov.b64 \t%rd1, %tslot_v0;\n"));
    assert!(out.ptx.contains("\tld.param.u32 \t%r2, [add1_param_2];\n"));
}

#[test]
fn rmsnorm_selects_its_pointers_and_not_eps_or_cols() {
    let info = inspect(kernel("rmsnorm")).unwrap();
    let selected: Vec<bool> = info.kernels[0]
        .params
        .iter()
        .map(|p| p.default.selected())
        .collect();
    assert_eq!(selected, [true, true, true, false, false]);
    assert_eq!(info.kernels[0].params[4].ty, ScalarType::F32);
    let out = indirect(kernel("rmsnorm"), &Options::default()).unwrap();
    let slots: Vec<bool> = out.kernels[0]
        .params
        .iter()
        .map(|p| p.slot.is_some())
        .collect();
    assert_eq!(slots, [true, true, true, false, false]);
}

#[test]
fn table_refresh_selects_its_four_pointers() {
    let info = inspect(kernel("table")).unwrap();
    let selected: Vec<bool> = info.kernels[0]
        .params
        .iter()
        .map(|p| p.default.selected())
        .collect();
    assert_eq!(selected, [true, true, false, false, true, true]);
}

#[test]
fn scalars_are_rewritten_on_request() {
    let options = Options {
        scalars: vec![
            "axpy_f32:0".parse().unwrap(),
            ParamRef::Name("axpy_f32_param_3".into()),
        ],
        ..Options::default()
    };
    let input = text(kernel("axpy"));
    let out = indirect(input.as_bytes(), &options).unwrap();
    let edits = check_edits(input, &out.ptx);
    assert_eq!(edits.edited_decls, 2);
    assert!(out.ptx.contains("\t.param .u64 axpy_f32_param_0,\n"));
    assert!(out.ptx.contains("\t.param .u64 axpy_f32_param_3\n"));
    assert!(out
        .ptx
        .contains("\tld.global.b32 \t%tslot_v0, [%tslot_a0];\n"));
    assert!(out.ptx.contains("\tmov.b32 \t%f1, %tslot_v0;\n"));
    // NVRTC loads the .u32 `n` sign-extended into a 64-bit register.
    assert!(out.ptx.contains("\tcvt.s64.s32 \t%rd9, %tslot_v3;\n"));
    let p = &out.kernels[0].params;
    assert_eq!(
        p[0].slot,
        Some(Slot {
            kind: SlotKind::Scalar(ScalarType::F32),
            align: 4
        })
    );
    assert_eq!(p[3].slot.unwrap().kind, SlotKind::Scalar(ScalarType::U32));
    assert_eq!((p[0].size, p[3].size), (8, 8));
    assert!(p[1].slot.is_some() && p[2].slot.is_some());
}

#[test]
fn named_params_replace_the_default_selection() {
    let options = Options {
        params: vec!["add1:1".parse().unwrap()],
        ..Options::default()
    };
    let out = indirect(kernel("chain"), &options).unwrap();
    let slots: Vec<bool> = out.kernels[0]
        .params
        .iter()
        .map(|p| p.slot.is_some())
        .collect();
    assert_eq!(slots, [false, true, false]);
    check_edits(text(kernel("chain")), &out.ptx);
}

#[test]
fn selection_errors_name_what_is_wrong() {
    let ptx = kernel("axpy");
    let with = |o: Options| indirect(ptx, &o).unwrap_err();
    assert_eq!(
        with(Options {
            kernels: Some(vec!["nope".into()]),
            ..Options::default()
        }),
        PtxError::UnknownKernel("nope".into())
    );
    assert_eq!(
        with(Options {
            params: vec!["axpy_f32:9".parse().unwrap()],
            ..Options::default()
        }),
        PtxError::UnknownParam("axpy_f32:9".into())
    );
    assert_eq!(
        with(Options {
            scalars: vec![ParamRef::Name("x".into())],
            ..Options::default()
        }),
        PtxError::UnknownParam("x".into())
    );
    assert!(matches!(
        with(Options { params: vec!["axpy_f32:0".parse().unwrap()], ..Options::default() }),
        PtxError::BadSelection { kernel, param, .. } if kernel == "axpy_f32" && param == "axpy_f32_param_0"
    ));
    assert!(matches!(
        with(Options { scalars: vec!["axpy_f32:1".parse().unwrap()], ..Options::default() }),
        PtxError::BadSelection { param, .. } if param == "axpy_f32_param_1"
    ));
    assert!("a:b".parse::<ParamRef>().is_err());
    assert!(":1".parse::<ParamRef>().is_err());
    assert!("".parse::<ParamRef>().is_err());
    assert_eq!(
        "k:2".parse::<ParamRef>().unwrap(),
        ParamRef::Index {
            kernel: "k".into(),
            index: 2
        }
    );
}

#[test]
fn kernels_not_chosen_are_untouched() {
    let ptx = kernel("chain");
    let only_other = Options {
        kernels: Some(vec![]),
        ..Options::default()
    };
    assert_eq!(
        indirect(ptx, &only_other).unwrap_err(),
        PtxError::NothingToRewrite
    );
    let index_outside = Options {
        kernels: Some(vec![]),
        params: vec!["add1:0".parse().unwrap()],
        ..Options::default()
    };
    assert!(matches!(
        indirect(ptx, &index_outside).unwrap_err(),
        PtxError::BadSelection { .. }
    ));
}

#[test]
fn rewriting_a_rewritten_module_works_again() {
    for &(name, ptx) in KERNELS {
        let once = indirect(ptx, &Options::default()).unwrap();
        let twice = indirect(once.ptx.as_bytes(), &pdl())
            .unwrap_or_else(|e| panic!("{name}: second rewrite: {e}"));
        assert!(twice.ptx.contains("%tslot1_v0"), "{name}: a fresh prefix");
        check_edits(&once.ptx, &twice.ptx);
    }
}

#[test]
fn crlf_line_endings_are_kept() {
    for &(name, ptx) in KERNELS {
        let crlf = text(ptx).replace('\n', "\r\n");
        let out = indirect(crlf.as_bytes(), &pdl()).unwrap();
        let lf = indirect(ptx, &pdl()).unwrap();
        assert_eq!(out.ptx.replace("\r\n", "\n"), lf.ptx, "{name}");
        assert_eq!(
            out.ptx.matches('\n').count(),
            out.ptx.matches("\r\n").count(),
            "{name}: a bare \\n"
        );
        check_edits(&crlf, &out.ptx);
    }
}
