//! Uses the pass does not understand are refused with the kernel, the parameter and the line.

mod common;

use common::REFUSALS;
use graph_rt_ptx::{indirect, inspect, DefaultChoice, Options, PtxError};

fn fixture(name: &str) -> &'static [u8] {
    REFUSALS.iter().find(|(n, _)| *n == name).unwrap().1
}

fn naming(param: &str) -> Options {
    Options {
        params: vec![param.parse().unwrap()],
        ..Options::default()
    }
}

/// Asserts `indirect(fixture, options)` refuses `kernel`'s parameter `param_index` at `line`,
/// with a reason containing `why`.
fn assert_refused(name: &str, options: &Options, param_index: usize, line: usize, why: &str) {
    match indirect(fixture(name), options) {
        Err(PtxError::Refused {
            kernel,
            param,
            line: l,
            reason,
        }) => {
            assert_eq!(kernel, name, "{name}");
            assert_eq!(param, format!("{name}_param_{param_index}"), "{name}");
            assert_eq!(l, line, "{name}: {reason}");
            assert!(reason.contains(why), "{name}: {reason:?} lacks {why:?}");
        }
        other => panic!("{name}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn kernel_whose_address_is_taken() {
    // `launcher` takes `kernel_address_taken`'s address (line 31): a device-side launch through
    // it would pass a raw pointer where the rewritten kernel expects a slot's address.
    let options = Options {
        kernels: Some(vec!["kernel_address_taken".into()]),
        ..Options::default()
    };
    assert_refused("kernel_address_taken", &options, 0, 31, "address is taken");
}

#[test]
fn address_taken_with_mov() {
    assert_refused(
        "mov_address",
        &Options::default(),
        1,
        23,
        "address is taken (`mov.b64`)",
    );
    let info = inspect(fixture("mov_address")).unwrap();
    assert!(matches!(
        info.kernels[0].params[1].default,
        DefaultChoice::Refused { line: 23, .. }
    ));
}

#[test]
fn address_taken_with_cvta_param() {
    assert_refused(
        "cvta_param",
        &naming("cvta_param:1"),
        1,
        22,
        "address is taken (`cvta.param.u64`)",
    );
    // The default selection does not take it for a pointer, and says where it stopped.
    let info = inspect(fixture("cvta_param")).unwrap();
    assert_eq!(
        info.kernels[0].params[1].default,
        DefaultChoice::NotOnlyAddress { line: 22 }
    );
    let out = indirect(fixture("cvta_param"), &Options::default()).unwrap();
    assert!(out.kernels[0].params[0].slot.is_some());
    assert!(out.kernels[0].params[1].slot.is_none());
}

#[test]
fn offset_load() {
    assert_refused("offset_load", &Options::default(), 1, 23, "offset access");
}

#[test]
fn vector_load() {
    assert_refused(
        "vector_load",
        &naming("vector_load_param_1"),
        1,
        22,
        "vector load `ld.param.v2.u32`",
    );
}

#[test]
fn byval_aggregate() {
    assert_refused(
        "byval_array",
        &naming("byval_array:1"),
        1,
        14,
        "by-value aggregate",
    );
    let scalar = Options {
        scalars: vec!["byval_array:1".parse().unwrap()],
        ..Options::default()
    };
    assert_refused("byval_array", &scalar, 1, 14, "by-value aggregate");
    let info = inspect(fixture("byval_array")).unwrap();
    let p = &info.kernels[0].params[1];
    assert_eq!((p.size, p.array, p.align), (16, Some(16), Some(8)));
    assert_eq!(p.default, DefaultChoice::Aggregate);
}

#[test]
fn call_argument() {
    assert_refused(
        "call_argument",
        &naming("call_argument:1"),
        1,
        33,
        "passed to `call`",
    );
}

#[test]
fn wrong_size_load() {
    assert_refused(
        "wrong_size_load",
        &Options::default(),
        1,
        24,
        "loads 4 byte(s) of a 8-byte parameter",
    );
}

#[test]
fn undeclared_destination_register() {
    assert_refused(
        "undeclared_register",
        &Options::default(),
        1,
        23,
        "`%q1` is not declared",
    );
}

#[test]
fn unparseable_target_with_pdl() {
    let ptx = fixture("unparseable_target_pdl");
    let pdl = Options {
        pdl: true,
        ..Options::default()
    };
    match indirect(ptx, &pdl) {
        Err(PtxError::Pdl { line: 6, reason }) => assert!(reason.contains("sm_86"), "{reason}"),
        other => panic!("expected a PDL refusal, got {other:?}"),
    }
    // Without PDL the target does not matter.
    assert!(indirect(ptx, &Options::default()).is_ok());
}

#[test]
fn not_utf8() {
    let err = PtxError::NotUtf8 {
        offset: 119,
        line: 9,
    };
    assert_eq!(inspect(fixture("not_utf8")).unwrap_err(), err);
    assert_eq!(
        indirect(fixture("not_utf8"), &Options::default()).unwrap_err(),
        err
    );
}

#[test]
fn truncated_body() {
    for result in [
        inspect(fixture("truncated_body")).map(|_| ()),
        indirect(fixture("truncated_body"), &Options::default()).map(|_| ()),
    ] {
        match result {
            Err(PtxError::Parse { line: 17, message }) => {
                assert!(message.contains("truncated_body"), "{message}")
            }
            other => panic!("expected a parse error at line 17, got {other:?}"),
        }
    }
}

#[test]
fn errors_read_well() {
    let err = indirect(fixture("offset_load"), &Options::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel `offset_load`, parameter `offset_load_param_1`, line 23: refused: offset access \
         `[offset_load_param_1+...]`"
    );
}
