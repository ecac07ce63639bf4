//! Pointer discovery on real graphs: two captures of the same work with different dynamic
//! buffers; patched words rebound by host node updates; coincidences refused.

use super::chain::{add1, N};
use super::{assert_close, capturing_ctx, random_f32};
use crate::foreign::{
    discover_graphs, Dynamic, HostPatcher, Prelude, PreludeMode, PreludeOptions, Unexplained,
};
use crate::table::{PtrSlot, SlotRef};
use crate::{ArgTable, CaptureMode, DeviceBuffer, LaunchConfig, Stream, TableOptions};

fn dynamic(b: &DeviceBuffer<f32>) -> Dynamic {
    Dynamic {
        base: b.as_raw(),
        len: b.num_bytes() as u64,
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn discovery_patches_addresses_and_refuses_a_coincidence() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let alloc = || DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    // Dynamic: the input x and the output y. `s`/`s2` are static inputs of a second kernel;
    // in the first capture `s` happens to be what is declared as dynamic buffer 2.
    let (x, y, s, s2, z) = (
        [alloc(), alloc()],
        [alloc(), alloc()],
        alloc(),
        alloc(),
        alloc(),
    );
    let other = alloc();
    let capture = |i: usize, static_in: &DeviceBuffer<f32>| {
        stream
            .capture(CaptureMode::Global, |scope| {
                // SAFETY: add1 over N floats of distinct N-float buffers.
                unsafe {
                    scope.launch(&f, &cfg, (&x[i], &y[i], N as i32))?;
                    scope.launch(&f, &cfg, (static_in, &z, N as i32))?;
                }
                Ok(())
            })
            .unwrap()
    };
    let (first, second) = (capture(0, &s), capture(1, &s2));
    let (snaps, d) = discover_graphs(
        &first,
        &second,
        &[dynamic(&x[0]), dynamic(&y[0]), dynamic(&s)],
        &[dynamic(&x[1]), dynamic(&y[1]), dynamic(&other)],
    )
    .unwrap();
    // Node 0's x and y are patched; node 1's input (equal to buffer 2 in the first capture
    // only) is reported, not patched; buffer 2 is seen by no node.
    let patched: Vec<(usize, usize)> = d.patches.iter().map(|p| (p.node, p.buffer)).collect();
    assert_eq!(patched, [(0, 0), (0, 1)]);
    assert!(matches!(
        d.unexplained.as_slice(),
        [Unexplained::WordDiffers { node: 1, .. }]
    ));
    assert_eq!(d.unseen, [2]);
    assert!(!snaps[0].via_extra);

    // Rebind the first capture's exec to fresh buffers before each of 20 replays.
    let mut exec = first.instantiate().unwrap();
    // The unexplained word (the coincidence) keeps the patcher from being made by default.
    assert!(HostPatcher::new(&snaps, &d, 3).is_err());
    let mut patcher = HostPatcher::with_unexplained(&snaps, &d, 3).unwrap();
    assert_eq!((patcher.node_count(), patcher.patch_count()), (1, 2));
    let mut runs = Vec::new();
    for _ in 0..20 {
        let host = random_f32(N);
        let (xi, yi) = (DeviceBuffer::from_host(&ctx, &host).unwrap(), alloc());
        // SAFETY: N-float buffers, kept until the end of the test.
        unsafe {
            patcher
                .rebind(&mut exec, &[xi.as_raw(), yi.as_raw(), 0])
                .unwrap()
        };
        exec.launch(&stream).unwrap();
        runs.push((host, xi, yi));
    }
    stream.synchronize().unwrap();
    for (host, _, yi) in &runs {
        let want: Vec<f64> = host.iter().map(|&v| v as f64 + 1.0).collect();
        assert_close(&yi.to_vec().unwrap(), &want, 1e-7);
    }
    // The static node still reads `s` (never patched).
    assert!(z.to_vec().unwrap().iter().all(|&v| v == 1.0));
    // SAFETY: refused before any update.
    unsafe { assert!(patcher.rebind(&mut exec, &[0, 0]).is_err()) };
}

/// The host patcher updates nodes through the exec: what an earlier rebinding of the node kept
/// is released, a whole-graph update keeps the first capture's nodes naming the exec's, and
/// `set_kernel_args` after it reads the node afresh.
#[test]
#[ignore = "needs a CUDA GPU"]
fn host_patcher_rebinds_through_the_exec() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let alloc = || DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    let (x, y) = ([alloc(), alloc()], [alloc(), alloc()]);
    let capture = |i: usize| {
        stream
            .capture(CaptureMode::Global, |scope| {
                // SAFETY: add1 over N floats of distinct N-float buffers.
                unsafe { scope.launch(&f, &cfg, (&x[i], &y[i], N as i32))? };
                Ok(())
            })
            .unwrap()
    };
    let (first, second) = (capture(0), capture(1));
    let dynamics = |i: usize| [dynamic(&x[i]), dynamic(&y[i])];
    let (snaps, d) = discover_graphs(&first, &second, &dynamics(0), &dynamics(1)).unwrap();
    let mut patcher = HostPatcher::new(&snaps, &d, 2).unwrap();
    assert_eq!(patcher.patch_count(), 2);
    let node = snaps[0].node;
    let mut exec = first.instantiate().unwrap();
    let base = exec.retained_count();
    // A fresh input (random) and output.
    let fresh = || {
        let host = random_f32(N);
        (DeviceBuffer::from_host(&ctx, &host).unwrap(), alloc(), host)
    };
    let replay = |exec: &crate::GraphExec, yi: &DeviceBuffer<f32>, host: &[f32]| {
        exec.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        let want: Vec<f64> = host.iter().map(|&v| v as f64 + 1.0).collect();
        assert_close(&yi.to_vec().unwrap(), &want, 1e-7);
    };
    // A rebinding through set_kernel_args keeps its two buffers ...
    let (x2, y2, _) = fresh();
    // SAFETY: add1 over N floats of distinct N-float buffers (kept by the exec).
    unsafe { exec.set_kernel_args(node, (&x2, &y2, N as i32)).unwrap() };
    assert_eq!(exec.retained_count(), base + 2);
    // ... until the patcher rewrites the node: released at once (no launch in flight).
    let (x3, y3, host3) = fresh();
    // SAFETY: N-float buffers, alive until the replay has been synchronized.
    unsafe {
        patcher
            .rebind(&mut exec, &[x3.as_raw(), y3.as_raw()])
            .unwrap()
    };
    assert_eq!(exec.retained_count(), base);
    replay(&exec, &y3, &host3);
    // After a whole-graph update from the second capture, the first capture's node still names
    // the exec's.
    exec.update(&second).unwrap();
    let (x4, y4, host4) = fresh();
    // SAFETY: as above.
    unsafe {
        patcher
            .rebind(&mut exec, &[x4.as_raw(), y4.as_raw()])
            .unwrap()
    };
    replay(&exec, &y4, &host4);
    // set_kernel_args after the patcher reads the node's kernel and dimensions again.
    let (x5, y5, host5) = fresh();
    // SAFETY: as for x2, y2.
    unsafe { exec.set_kernel_args(node, (&x5, &y5, N as i32)).unwrap() };
    replay(&exec, &y5, &host5);
    drop((x2, y2, x3, y3, x4, y4));
}

/// bf16 bits of `v` (round to nearest even).
fn bf16(v: f32) -> half::bf16 {
    half::bf16::from_f32(v)
}

fn from_bf16(b: half::bf16) -> f32 {
    b.to_f32()
}

/// One GEMM of the captured sequence: C (m×n) = A (m×k) · B (k×n), column-major.
struct Gemm {
    m: usize,
    bf16: bool,
}

/// 100 replays of a captured sequence of cuBLAS GEMMs (bf16 GemmEx at M = 1, 16, 64 and sgemm
/// at M = 1, 16; N = K = 4096), A, B and C of every GEMM rebound to fresh buffers (random
/// contents) before each replay through discovery + the in-graph prelude (argument-table slots
/// patched into the device-updatable cuBLAS nodes), no synchronization between replays;
/// sampled outputs of every replay checked against a CPU reference.
#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn cublas_gemms_rebound_by_the_prelude_every_replay() {
    cublas_gemms_rebound(PreludeOptions::default());
}

/// As above, the words rewritten from the host (per-node exec updates) instead.
#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn cublas_gemms_rebound_from_the_host_every_replay() {
    cublas_gemms_rebound(PreludeOptions {
        host_only: true,
        ..Default::default()
    });
}

fn cublas_gemms_rebound(options: PreludeOptions) {
    use crate::cublas::{Cublas, Op as CublasOp};
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let blas = Cublas::new(&stream).unwrap();
    let sanitized = std::env::var_os("GRAPH_RT_SANITIZER").is_some();
    let (nk, replays) = if sanitized { (512, 3) } else { (4096, 100) };
    let gemms = [
        Gemm { m: 1, bf16: true },
        Gemm { m: 16, bf16: true },
        Gemm { m: 64, bf16: true },
        Gemm { m: 1, bf16: false },
        Gemm { m: 16, bf16: false },
    ];
    // A pool of random contents per GEMM operand; fresh buffers are copies of them.
    let pool = |len: usize, seeds: usize| -> Vec<Vec<f32>> {
        (0..seeds).map(|_| random_f32(len)).collect()
    };
    // Element buffers: f32 as is, bf16 as half::bf16; one "set" = A, B, C of every GEMM.
    enum Buf {
        F(DeviceBuffer<f32>),
        H(DeviceBuffer<half::bf16>),
    }
    impl Buf {
        fn raw(&self) -> u64 {
            match self {
                Buf::F(b) => b.as_raw(),
                Buf::H(b) => b.as_raw(),
            }
        }
        fn bytes(&self) -> u64 {
            match self {
                Buf::F(b) => b.num_bytes() as u64,
                Buf::H(b) => b.num_bytes() as u64,
            }
        }
        fn host(&self) -> Vec<f32> {
            match self {
                Buf::F(b) => b.to_vec().unwrap(),
                Buf::H(b) => b.to_vec().unwrap().into_iter().map(from_bf16).collect(),
            }
        }
    }
    let upload = |v: &[f32], half: bool| {
        if half {
            let h: Vec<half::bf16> = v.iter().map(|&x| bf16(x)).collect();
            Buf::H(DeviceBuffer::from_host(&ctx, &h).unwrap())
        } else {
            Buf::F(DeviceBuffer::from_host(&ctx, v).unwrap())
        }
    };
    let pools: Vec<[Vec<Vec<f32>>; 2]> = gemms
        .iter()
        .map(|g| [pool(g.m * nk, 3), pool(nk * nk, 2)])
        .collect();
    // A set of fresh buffers: operands from pool entry `r` (and B from `r % 2`), C zero.
    let make_set = |r: usize| -> Vec<[Buf; 3]> {
        gemms
            .iter()
            .zip(&pools)
            .map(|(g, [pa, pb])| {
                let c = vec![0.0f32; g.m * nk];
                [
                    upload(&pa[r % 3], g.bf16),
                    upload(&pb[r % 2], g.bf16),
                    upload(&c, g.bf16),
                ]
            })
            .collect()
    };
    let run = |blas: &Cublas, set: &mut Vec<[Buf; 3]>| {
        for (g, [a, b, c]) in gemms.iter().zip(set.iter_mut()) {
            match (a, b, c) {
                (Buf::H(a), Buf::H(b), Buf::H(c)) => blas
                    .gemm_bf16(
                        CublasOp::N,
                        CublasOp::N,
                        g.m,
                        nk,
                        nk,
                        1.0,
                        a,
                        g.m,
                        b,
                        nk,
                        0.0,
                        c,
                        g.m,
                    )
                    .unwrap(),
                (Buf::F(a), Buf::F(b), Buf::F(c)) => blas
                    .sgemm(
                        CublasOp::N,
                        CublasOp::N,
                        g.m,
                        nk,
                        nk,
                        1.0,
                        a,
                        g.m,
                        b,
                        nk,
                        0.0,
                        c,
                        g.m,
                    )
                    .unwrap(),
                _ => unreachable!(),
            }
        }
    };
    let run_refused = |blas: &Cublas, set: &mut Vec<[Buf; 3]>| match &mut set[3] {
        [Buf::F(a), Buf::F(b), Buf::F(c)] => blas
            .sgemm(
                CublasOp::N,
                CublasOp::N,
                1,
                nk,
                nk,
                1.0,
                a,
                1,
                b,
                nk,
                0.0,
                c,
                1,
            )
            .is_err(),
        _ => false,
    };
    let (mut s0, mut s1) = (make_set(0), make_set(1));
    run(&blas, &mut s0); // warm-up: cuBLAS picks and loads its kernels outside the capture
    stream.synchronize().unwrap();
    // One table slot per operand of every GEMM, long enough for the captured buffers.
    enum Slot {
        F(PtrSlot<f32>),
        H(PtrSlot<half::bf16>),
    }
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let slots: Vec<Slot> = s0
        .iter()
        .flatten()
        .map(|b| match b {
            Buf::F(b) => Slot::F(table.ptr_slot_with(16, b.len()).unwrap()),
            Buf::H(b) => Slot::H(table.ptr_slot_with(16, b.len()).unwrap()),
        })
        .collect();
    let mut capture = |set: &mut Vec<[Buf; 3]>| {
        stream
            .capture(CaptureMode::Global, |scope| {
                table.record_refresh(scope)?;
                // A GEMM on the capturing stream outside `record` is refused.
                assert!(run_refused(&blas, set));
                blas.record(scope, |b| {
                    run(b, set);
                    Ok(())
                })
            })
            .unwrap()
    };
    let (mut first, second) = (capture(&mut s0), capture(&mut s1));
    let dynamics = |set: &Vec<[Buf; 3]>| -> Vec<Dynamic> {
        set.iter()
            .flat_map(|ops| {
                ops.iter().map(|b| Dynamic {
                    base: b.raw(),
                    len: b.bytes(),
                })
            })
            .collect()
    };
    let (snaps, d) = discover_graphs(&first, &second, &dynamics(&s0), &dynamics(&s1)).unwrap();
    println!(
        "discover: {} kernel nodes ({} via extra), {} words patched in {} nodes, unexplained {:?}, unseen {:?}",
        snaps.len(),
        snaps.iter().filter(|s| s.via_extra).count(),
        d.patches.len(),
        d.patches.iter().map(|p| p.node).collect::<std::collections::BTreeSet<_>>().len(),
        d.unexplained,
        d.unseen
    );
    assert!(d.unseen.is_empty(), "a dynamic buffer was found in no node");
    let refs: Vec<SlotRef> = slots
        .iter()
        .map(|s| match s {
            Slot::F(s) => s.erased(),
            Slot::H(s) => s.erased(),
        })
        .collect();
    let mut prelude = Prelude::install(
        &mut first,
        &table,
        &snaps,
        &d,
        &dynamics(&s0),
        &refs,
        options,
    )
    .unwrap();
    println!("discover: {}", prelude.report());
    if options.host_only {
        assert!(matches!(prelude.report().mode, PreludeMode::Host { .. }));
    }
    let mut exec = first.instantiate().unwrap();
    let sets: Vec<Vec<[Buf; 3]>> = (0..replays).map(|r| make_set(r + 2)).collect();
    for set in &sets {
        for (slot, b) in slots.iter().zip(set.iter().flatten()) {
            match (slot, b) {
                (Slot::F(s), Buf::F(b)) => table.bind(s, b).unwrap(),
                (Slot::H(s), Buf::H(b)) => table.bind(s, b).unwrap(),
                _ => unreachable!("slots follow the first set's types"),
            }
        }
        prelude.launch(&mut table, &mut exec, &stream).unwrap();
    }
    stream.synchronize().unwrap();
    // Sampled entries of every C against a CPU reference (f64 accumulation over bf16- or
    // f32-rounded inputs).
    let mut worst = 0.0f64;
    let round = |v: &[f32], half: bool| -> Vec<f32> {
        v.iter()
            .map(|&x| if half { from_bf16(bf16(x)) } else { x })
            .collect()
    };
    // The operands as uploaded (bf16-rounded where bf16), per GEMM and pool entry.
    type Operands = (Vec<Vec<f32>>, Vec<Vec<f32>>);
    let host_ops: Vec<Operands> = gemms
        .iter()
        .zip(&pools)
        .map(|(g, [pa, pb])| {
            (
                pa.iter().map(|v| round(v, g.bf16)).collect(),
                pb.iter().map(|v| round(v, g.bf16)).collect(),
            )
        })
        .collect();
    for (r, set) in sets.iter().enumerate() {
        for (gi, (g, [_, _, c])) in gemms.iter().zip(set).enumerate() {
            let (ha, hb, hc) = (
                &host_ops[gi].0[(r + 2) % 3],
                &host_ops[gi].1[(r + 2) % 2],
                c.host(),
            );
            for t in 0..16 {
                let (i, j) = ((t * 7 + r) % g.m, (t * 977 + r * 31 + gi) % nk);
                let want: f64 = (0..nk)
                    .map(|l| ha[i + l * g.m] as f64 * hb[l + j * nk] as f64)
                    .sum();
                let got = hc[i + j * g.m] as f64;
                let tol = if g.bf16 { 1.0 / 128.0 } else { 1e-4 } * (want.abs() + 1.0);
                worst = worst.max((got - want).abs() / (want.abs() + 1.0));
                assert!(
                    (got - want).abs() <= tol,
                    "replay {r}, GEMM {gi} (m={}, bf16={}): C[{i},{j}] = {got}, CPU {want}",
                    g.m,
                    g.bf16
                );
            }
        }
    }
    println!("discover: {replays} replays right; worst relative error {worst:.2e}");
}
