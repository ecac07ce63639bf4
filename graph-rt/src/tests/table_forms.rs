//! The shipped kernels' table and PDL-table forms, made by the PTX pass, against their plain
//! forms: bit-identical outputs on fresh random inputs, eager and in captured graphs rebound
//! before every replay; and the signature checks of table-form launches.

use graph_rt_kernels::Kernel;
use graph_rt_ptx::{indirect, Options};

use super::chain::N;
use super::{capturing_ctx, function, random_f32};
use crate::table::{PtrSlot, ScalarSlot, TableKernel, TableParam};
use crate::{
    ArgTable, CaptureMode, Context, DeviceBuffer, LaunchConfig, Misuse, ScalarKind, Stream,
    TableOptions,
};

const AXPY_SCALARS: [&str; 2] = ["axpy_f32:0", "axpy_f32:3"];

/// The shipped table form `form` of kernel `name`, with the signature the pass gives when it
/// makes `form` from `plain` (and a check that the shipped PTX is exactly what it makes).
fn shipped(ctx: &Context, plain: &Kernel, form: &Kernel, name: &str, pdl: bool) -> TableKernel {
    let scalars = if name == "axpy_f32" {
        &AXPY_SCALARS[..]
    } else {
        &[]
    };
    let options = Options {
        scalars: scalars.iter().map(|s| s.parse().unwrap()).collect(),
        pdl,
        ..Options::default()
    };
    let made = indirect(plain.ptx.as_bytes(), &options).unwrap();
    assert!(
        made.ptx == form.ptx,
        "{} is not what the pass makes",
        form.name
    );
    let signature = made.kernels.iter().find(|k| k.name == name).unwrap();
    TableKernel::from_signature(function(ctx, form, name), signature).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn config(pdl: bool) -> LaunchConfig {
    let c = LaunchConfig::for_elements(N, 256);
    if pdl {
        c.programmatic_stream_serialization()
    } else {
        c
    }
}

/// Plain `add1` then plain `axpy_f32` (alpha) on fresh inputs, eagerly: the reference.
fn plain_step(ctx: &Context, stream: &Stream, x: &[f32], y: &[f32], alpha: f32) -> Vec<f32> {
    let add1 = function(ctx, &graph_rt_kernels::CHAIN, "add1");
    let axpy = function(ctx, &graph_rt_kernels::AXPY, "axpy_f32");
    let dx = DeviceBuffer::from_host(ctx, x).unwrap();
    let t = DeviceBuffer::<f32>::alloc(ctx, N).unwrap();
    let dy = DeviceBuffer::from_host(ctx, y).unwrap();
    let c = config(false);
    // SAFETY: add1 over N floats of x into t; axpy over N floats of t and y (distinct).
    unsafe {
        stream.launch(&add1, &c, (&dx, &t, N as i32)).unwrap();
        stream
            .launch(&axpy, &c, (alpha, &t, &dy, N as i32))
            .unwrap();
    }
    dy.read_on(stream).unwrap()
}

struct Forms {
    add1: TableKernel,
    axpy: TableKernel,
}

struct Slots {
    x: PtrSlot<f32>,
    t: PtrSlot<f32>,
    y: PtrSlot<f32>,
    alpha: ScalarSlot<f32>,
    n: ScalarSlot<i32>,
}

fn slots(table: &mut ArgTable) -> Slots {
    Slots {
        x: table.ptr_slot().unwrap(),
        t: table.ptr_slot().unwrap(),
        y: table.ptr_slot().unwrap(),
        alpha: table.scalar_slot().unwrap(),
        n: table.scalar_slot().unwrap(),
    }
}

/// One step in table form: `add1` x → t, then `axpy` alpha·t + y → y.
///
/// # Safety
/// The slots must be bound to N-float buffers (t distinct from x and y), n set to N.
unsafe fn launch_forms(stream: &Stream, forms: &Forms, s: &Slots, pdl: bool) {
    // The first kernel after an eager refresh waits for it fully (it reads the table before
    // `griddepcontrol.wait`); the next may overlap it.
    let (first, next) = (config(false), config(pdl));
    // SAFETY: forwarded.
    unsafe {
        forms
            .add1
            .launch(stream, &first, (&s.x, &s.t, N as i32))
            .unwrap();
        forms
            .axpy
            .launch(stream, &next, (&s.alpha, &s.t, &s.y, &s.n))
            .unwrap();
    }
}

fn check_forms(pdl: bool) {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let (chain_form, axpy_form) = if pdl {
        (
            &graph_rt_kernels::CHAIN_TABLE_PDL,
            &graph_rt_kernels::AXPY_TABLE_PDL,
        )
    } else {
        (
            &graph_rt_kernels::CHAIN_TABLE,
            &graph_rt_kernels::AXPY_TABLE,
        )
    };
    let forms = Forms {
        add1: shipped(&ctx, &graph_rt_kernels::CHAIN, chain_form, "add1", pdl),
        axpy: shipped(&ctx, &graph_rt_kernels::AXPY, axpy_form, "axpy_f32", pdl),
    };
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let s = slots(&mut table);
    table.set_scalar(&s.n, N as i32).unwrap();
    // Eager: refresh, then the two table-form kernels.
    for alpha in [2.0f32, -0.75, 1.0e-3] {
        let (x, y) = (random_f32(N), random_f32(N));
        let want = plain_step(&ctx, &stream, &x, &y, alpha);
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let dt = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
        let dy = DeviceBuffer::from_host(&ctx, &y).unwrap();
        table.bind(&s.x, &dx).unwrap();
        table.bind(&s.t, &dt).unwrap();
        table.bind(&s.y, &dy).unwrap();
        table.set_scalar(&s.alpha, alpha).unwrap();
        table.refresh(&stream).unwrap();
        // SAFETY: every slot bound to its own N-float buffer, n = N.
        unsafe { launch_forms(&stream, &forms, &s, pdl) };
        assert_eq!(bits(&dy.read_on(&stream).unwrap()), bits(&want), "eager");
    }
    // A graph of three steps (x → t0 → y0, t0 → t1 → y1 ... through one slot set each),
    // captured once, rebound to fresh inputs before each of 20 replays; checked at the end.
    let mut graph_table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let steps: Vec<Slots> = (0..3).map(|_| slots(&mut graph_table)).collect();
    let exec = stream
        .capture(CaptureMode::Global, |scope| {
            graph_table.record_refresh(scope)?;
            let c = config(pdl);
            for s in &steps {
                // SAFETY: bound before each launch to distinct N-float buffers, n = N.
                unsafe {
                    forms.add1.record(scope, &c, (&s.x, &s.t, N as i32))?;
                    forms.axpy.record(scope, &c, (&s.alpha, &s.t, &s.y, &s.n))?;
                }
            }
            Ok(())
        })
        .unwrap()
        .instantiate()
        .unwrap();
    let mut runs = Vec::new();
    for r in 0..20 {
        let mut kept = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            let (x, y) = (random_f32(N), random_f32(N));
            let alpha = 0.5 + r as f32 * 0.25 - i as f32;
            let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let dt = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
            let dy = DeviceBuffer::from_host(&ctx, &y).unwrap();
            graph_table.bind(&s.x, &dx).unwrap();
            graph_table.bind(&s.t, &dt).unwrap();
            graph_table.bind(&s.y, &dy).unwrap();
            graph_table.set_scalar(&s.alpha, alpha).unwrap();
            graph_table.set_scalar(&s.n, N as i32).unwrap();
            kept.push((x, y, alpha, dy));
        }
        graph_table.launch(&exec, &stream).unwrap();
        runs.push(kept);
    }
    stream.synchronize().unwrap();
    for kept in &runs {
        for (x, y, alpha, dy) in kept {
            let want = plain_step(&ctx, &stream, x, y, *alpha);
            assert_eq!(bits(&dy.to_vec().unwrap()), bits(&want), "graph replay");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pass_made_table_forms_match_the_plain_forms_bit_for_bit() {
    check_forms(false);
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0+"]
fn pass_made_pdl_table_forms_match_the_plain_forms_bit_for_bit() {
    check_forms(true);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn table_kernel_launches_are_checked_against_the_signature() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let axpy = shipped(
        &ctx,
        &graph_rt_kernels::AXPY,
        &graph_rt_kernels::AXPY_TABLE,
        "axpy_f32",
        false,
    );
    assert_eq!(
        axpy.params(),
        &[
            TableParam::Scalar {
                size: 4,
                kind: Some(ScalarKind::Float)
            },
            TableParam::Pointer { align: 16 },
            TableParam::Pointer { align: 16 },
            TableParam::Scalar {
                size: 4,
                kind: Some(ScalarKind::Integer)
            },
        ]
    );
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let mut other = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let s = slots(&mut table);
    let foreign: PtrSlot<f32> = other.ptr_slot().unwrap();
    let loose: PtrSlot<f32> = table.ptr_slot_with(4, 0).unwrap();
    let wide: ScalarSlot<f64> = table.scalar_slot().unwrap();
    let integer_alpha: ScalarSlot<i32> = table.scalar_slot().unwrap();
    let float_n: ScalarSlot<f32> = table.scalar_slot().unwrap();
    let buf = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let c = config(false);
    let misuse = |r: crate::Result<()>| r.err().and_then(|e| e.misuse_kind().cloned());
    let wrong = |index| Some(Misuse::WrongArgument { index });
    // SAFETY: every call below is refused before anything is launched.
    unsafe {
        // A buffer where the kernel reads a slot; a value where it reads a scalar slot.
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&s.alpha, &buf, &s.y, &s.n))),
            wrong(1)
        );
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (2.0f32, &s.t, &s.y, &s.n))),
            wrong(0)
        );
        // A pointer slot where a scalar slot is read, a scalar of the wrong size.
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&s.x, &s.t, &s.y, &s.n))),
            wrong(0)
        );
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&wide, &s.t, &s.y, &s.n))),
            wrong(0)
        );
        // Scalars of the right size but the wrong kind: an integer where the kernel reads a
        // float, a float where it reads an integer.
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&integer_alpha, &s.t, &s.y, &s.n))),
            wrong(0)
        );
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&s.alpha, &s.t, &s.y, &float_n))),
            wrong(3)
        );
        // A slot declaring less alignment than the kernel was compiled for; another table's.
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&s.alpha, &loose, &s.y, &s.n))),
            wrong(1)
        );
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&s.alpha, &foreign, &s.y, &s.n))),
            Some(Misuse::OtherTable)
        );
        // Too few arguments.
        assert_eq!(
            misuse(axpy.launch(&stream, &c, (&s.alpha, &s.t, &s.y))),
            Some(Misuse::CountMismatch {
                expected: 4,
                got: 3
            })
        );
    }
    // A signature that does not fit the kernel's parameter layout.
    let f = function(&ctx, &graph_rt_kernels::AXPY_TABLE, "axpy_f32");
    let signature = |r: crate::Result<TableKernel>| r.err().and_then(|e| e.misuse_kind().cloned());
    assert_eq!(
        signature(TableKernel::new(
            f.clone(),
            vec![TableParam::Value { size: 4 }; 3]
        )),
        Some(Misuse::SignatureMismatch)
    );
    assert_eq!(
        signature(TableKernel::new(f, vec![TableParam::Value { size: 4 }; 4])),
        Some(Misuse::SignatureMismatch)
    );
    stream.synchronize().unwrap();
}
