//! Steps over what a framework owns: a cuBLAS handle lent for the step (its stream and
//! workspace given back when graph-rt's value is dropped).

use super::chain::{buffers, fresh_input, N};
use super::{assert_close, capturing_ctx, sized};
use crate::cublas::{raw_handle, Cublas, Op};
use crate::foreign::PreludeMode;
use crate::step::{Step, StepMode, StepOptions, StepParams};
use crate::{DeviceBuffer, Stream};

/// Rows of the GEMM: `out (M × 16) = x (M × N/M) · ones (N/M × 16)`.
const M: usize = 16;

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_with_a_cublas_handle_the_framework_owns_gives_its_stream_and_workspace_back() {
    let ctx = capturing_ctx();
    ctx.bind().unwrap();
    // The framework's handle, on its stream with its workspace.
    let (theirs, ours) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let their_workspace = DeviceBuffer::<u8>::zeroed(&ctx, 4 << 20).unwrap();
    let h = raw_handle::create();
    raw_handle::set(
        h,
        theirs.as_raw(),
        (their_workspace.as_raw(), their_workspace.len()),
    );
    let k = N / M;
    let ones = DeviceBuffer::from_host(&ctx, &vec![1.0f32; k * 16]).unwrap();
    {
        // SAFETY: a live handle of this context made by the cuBLAS graph-rt loads, unused
        // elsewhere while lent, destroyed below after the value is gone; the workspace named
        // is the handle's own and lives to the end.
        let blas = unsafe {
            Cublas::borrow_raw(
                h,
                &ours,
                Cublas::DEFAULT_WORKSPACE_BYTES,
                Some((their_workspace.as_raw(), their_workspace.len())),
            )
        }
        .unwrap();
        assert!(blas.is_borrowed());
        assert_eq!(
            raw_handle::stream(h),
            ours.as_raw(),
            "lent: graph-rt's stream"
        );
        let mut p = StepParams::new(&ctx, 4).unwrap();
        let (x, out) = (
            p.buffer::<f32>(N).unwrap(),
            p.buffer::<f32>(M * 16).unwrap(),
        );
        let first = buffers(&ctx, 1);
        let first_out = DeviceBuffer::<f32>::zeroed(&ctx, M * 16).unwrap();
        p.bind(&x, &first[0]).unwrap();
        p.bind(&out, &first_out).unwrap();
        let mut step = Step::new(&ours, p, StepOptions::default(), |s| {
            let (xb, mut ob) = (s.buffer(&x)?, s.buffer(&out)?);
            s.cublas(&blas, |b| {
                b.sgemm(
                    Op::N,
                    Op::N,
                    M,
                    16,
                    k,
                    1.0,
                    &xb,
                    M,
                    &ones,
                    k,
                    0.0,
                    &mut ob,
                    M,
                )
            })
        })
        .unwrap();
        match step.mode() {
            StepMode::Graph { prelude, .. } => {
                assert_eq!(prelude.as_ref(), Some(&PreludeMode::Device))
            }
            mode => panic!("the step runs as {mode:?}"),
        }
        let mut kept = Vec::new();
        for _ in 0..sized(100, 20, 6) {
            let mut b = buffers(&ctx, 1);
            let input = fresh_input(&mut b[0]);
            let o = DeviceBuffer::<f32>::zeroed(&ctx, M * 16).unwrap();
            step.bind(&x, &b[0]).unwrap();
            step.bind(&out, &o).unwrap();
            step.run().unwrap();
            kept.push((input, o));
        }
        ours.synchronize().unwrap();
        for (input, got) in kept {
            let want: Vec<f64> = (0..M * 16)
                .map(|e| (0..k).map(|l| input[e % M + l * M] as f64).sum())
                .collect();
            assert_close(&got.to_vec().unwrap(), &want, 1e-5);
        }
    }
    // graph-rt's value is gone: the handle is the framework's again, on its stream (and its
    // workspace), and still works there.
    assert_eq!(raw_handle::stream(h), theirs.as_raw(), "stream given back");
    assert!(ctx.take_deferred_errors().is_empty());
    {
        // SAFETY: as above (lent again, on the framework's stream this time).
        let again = unsafe { Cublas::borrow_raw(h, &theirs, 0, None) }.unwrap();
        let mut b = buffers(&ctx, 1);
        let input = fresh_input(&mut b[0]);
        let mut o = DeviceBuffer::<f32>::zeroed(&ctx, M * 16).unwrap();
        again
            .sgemm(
                Op::N,
                Op::N,
                M,
                16,
                k,
                1.0,
                &b[0],
                M,
                &ones,
                k,
                0.0,
                &mut o,
                M,
            )
            .unwrap();
        let want: Vec<f64> = (0..M * 16)
            .map(|e| (0..k).map(|l| input[e % M + l * M] as f64).sum())
            .collect();
        assert_close(&o.read_on(&theirs).unwrap(), &want, 1e-5);
    }
    ctx.synchronize().unwrap();
    raw_handle::destroy(h);
}
