//! cuBLAS GEMMs of shapes nobody picked, each one step rebound to fresh buffers at every call:
//! random sizes (1 to thousands, odd sizes, GEMV-like and split-K-like extremes), transposes,
//! padded leading dimensions, f32 / bf16 / bf16 → f32, β ≠ 0 (C read too). Each call's C must
//! equal eager cuBLAS on the same inputs. `GRAPH_RT_CUBLAS_SEED` picks other shapes.

use bytemuck::Pod;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{capturing_ctx, sized};
use crate::cublas::{Cublas, Op};
use crate::step::{Step, StepMode, StepOptions, StepParams, Validated};
use crate::{Context, DeviceBuffer, Stream};

#[derive(Debug, Clone, Copy)]
enum Kind {
    F32,
    Bf16,
    Bf16F32,
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
    ta: Op,
    tb: Op,
    ld: (usize, usize, usize),
    alpha: f32,
    beta: f32,
    kind: Kind,
}

impl Shape {
    /// Stored sizes of A, B and C (column-major, `ld` elements a column).
    fn lens(&self) -> (usize, usize, usize) {
        let a_cols = if self.ta == Op::N { self.k } else { self.m };
        let b_cols = if self.tb == Op::N { self.n } else { self.k };
        (self.ld.0 * a_cols, self.ld.1 * b_cols, self.ld.2 * self.n)
    }
}

/// Log-uniform in `lo..=hi`.
fn size(rng: &mut StdRng, lo: usize, hi: usize) -> usize {
    let u: f64 = rng.random();
    ((lo as f64) * (hi as f64 / lo as f64).powf(u)).round() as usize
}

fn shapes(rng: &mut StdRng, count: usize, most: usize) -> Vec<Shape> {
    // Extremes first (GEMV-like M or N of 1, K of 1, a long K over a small C), then random.
    let fixed = [
        (1, most, most),
        (most, 1, most),
        (97, 89, 1),
        (16, 16, most * 8),
        (7, most / 3 + 1, 131),
    ];
    (0..count)
        .map(|i| {
            let (m, n, k) = match fixed.get(i) {
                Some(&(m, n, k)) => (m.max(1), n.max(1), k.max(1)),
                None => (
                    size(rng, 1, most),
                    size(rng, 1, most),
                    size(rng, 1, most * 2),
                ),
            };
            let op = |rng: &mut StdRng| if rng.random_bool(0.5) { Op::N } else { Op::T };
            let (ta, tb) = (op(rng), op(rng));
            let pad = |rng: &mut StdRng| {
                if rng.random_bool(0.3) {
                    rng.random_range(1..9)
                } else {
                    0
                }
            };
            let lda = if ta == Op::N { m } else { k } + pad(rng);
            let ldb = if tb == Op::N { k } else { n } + pad(rng);
            let ldc = m + pad(rng);
            let kind = [Kind::F32, Kind::Bf16, Kind::Bf16F32][rng.random_range(0..3)];
            let beta = if rng.random_bool(0.4) {
                rng.random_range(-1.0..1.0)
            } else {
                0.0
            };
            Shape {
                m,
                n,
                k,
                ta,
                tb,
                ld: (lda, ldb, ldc),
                alpha: rng.random_range(0.25..2.0),
                beta,
                kind,
            }
        })
        .collect()
}

/// What one shape gave: the step's mode, its calls' elements equal to eager cuBLAS bit for bit,
/// and the largest difference seen relative to the tolerance (≤ 1 passes).
struct Outcome {
    mode: String,
    identical: usize,
    elements: usize,
    worst: f64,
}

trait Element: Pod {
    fn from_f32(x: f32) -> Self;
    fn to_f64(self) -> f64;
    /// Relative tolerance of a result of this type against eager cuBLAS.
    const TOL: f64;
}

impl Element for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    const TOL: f64 = 1e-5;
}

impl Element for half::bf16 {
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
    fn to_f64(self) -> f64 {
        f64::from(self.to_f32())
    }
    const TOL: f64 = 1.0 / 64.0;
}

fn random<T: Element>(ctx: &Context, rng: &mut StdRng, len: usize) -> DeviceBuffer<T> {
    let v: Vec<T> = (0..len)
        .map(|_| T::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    DeviceBuffer::from_host(ctx, &v).unwrap()
}

/// One shape as a step of one GEMM, `calls` calls each on fresh A, B and C, every C compared with
/// eager cuBLAS's on copies of the same inputs.
fn one<A: Element, C: Element>(
    ctx: &Context,
    stream: &Stream,
    blas: &Cublas,
    shape: &Shape,
    rng: &mut StdRng,
    calls: usize,
    gemm: impl Fn(
        &Cublas,
        &DeviceBuffer<A>,
        &DeviceBuffer<A>,
        &mut DeviceBuffer<C>,
    ) -> crate::Result<()>,
) -> Outcome {
    let (la, lb, lc) = shape.lens();
    let mut p = StepParams::new(ctx, 3).unwrap();
    let (pa, pb, pc) = (
        p.buffer::<A>(la).unwrap(),
        p.buffer::<A>(lb).unwrap(),
        p.buffer::<C>(lc).unwrap(),
    );
    let first = (
        random::<A>(ctx, rng, la),
        random::<A>(ctx, rng, lb),
        random::<C>(ctx, rng, lc),
    );
    p.bind(&pa, &first.0).unwrap();
    p.bind(&pb, &first.1).unwrap();
    p.bind(&pc, &first.2).unwrap();
    let mut step = Step::new(stream, p, StepOptions::default(), |s| {
        let (a, b, mut c) = (s.buffer(&pa)?, s.buffer(&pb)?, s.buffer(&pc)?);
        s.cublas(blas, |bl| gemm(bl, &a, &b, &mut c))
    })
    .unwrap_or_else(|e| panic!("{shape:?}: Step::new: {e}"));
    let mode = match step.mode() {
        StepMode::Graph {
            kernel_nodes,
            patched_words,
            prelude,
            ..
        } => {
            format!(
                "graph, {kernel_nodes} kernel nodes, {patched_words} words patched ({prelude:?})"
            )
        }
        StepMode::Eager(why) => panic!("{shape:?}: the step runs eagerly: {why:?}"),
    };
    let mut kept = Vec::new();
    for _ in 0..calls {
        let (a, b, c) = (
            random::<A>(ctx, rng, la),
            random::<A>(ctx, rng, lb),
            random::<C>(ctx, rng, lc),
        );
        let mut eager = DeviceBuffer::from_host(ctx, &c.to_vec().unwrap()).unwrap();
        step.bind(&pa, &a).unwrap();
        step.bind(&pb, &b).unwrap();
        step.bind(&pc, &c).unwrap();
        step.run()
            .unwrap_or_else(|e| panic!("{shape:?}: Step::run: {e}"));
        gemm(blas, &a, &b, &mut eager).unwrap();
        kept.push((a, b, c, eager));
    }
    // cuBLAS's kernels, rebound to other buffers, are the work captured.
    let validated = step.validate();
    assert!(
        matches!(validated, Ok(Validated::Same)),
        "{shape:?}: {validated:?}"
    );
    stream.synchronize().unwrap();
    // Dot products of k terms in (−1, 1): of size about √k.
    let scale = (shape.k as f64).sqrt() * shape.alpha as f64 + 1.0;
    let (mut identical, mut elements, mut worst) = (0, 0, 0f64);
    for (_, _, c, eager) in &kept {
        let (got, want) = (c.to_vec().unwrap(), eager.to_vec().unwrap());
        for j in 0..shape.n {
            for i in 0..shape.m {
                let (g, w) = (got[i + j * shape.ld.2], want[i + j * shape.ld.2]);
                elements += 1;
                if bytemuck::bytes_of(&g) == bytemuck::bytes_of(&w) {
                    identical += 1;
                    continue;
                }
                let err = (g.to_f64() - w.to_f64()).abs() / (C::TOL * (w.to_f64().abs() + scale));
                worst = worst.max(if err.is_nan() { f64::INFINITY } else { err });
            }
        }
        // Past C's columns' ends (padding) nothing was written.
        for j in 0..shape.n {
            for i in shape.m..shape.ld.2 {
                let at = i + j * shape.ld.2;
                assert_eq!(
                    bytemuck::bytes_of(&got[at]),
                    bytemuck::bytes_of(&want[at]),
                    "{shape:?}: padding of C changed"
                );
            }
        }
    }
    Outcome {
        mode,
        identical,
        elements,
        worst,
    }
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn cublas_gemms_of_random_shapes_rebound_through_a_step_every_call_equal_eager_cublas() {
    let seed = std::env::var("GRAPH_RT_CUBLAS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261203u64);
    let mut rng = StdRng::seed_from_u64(seed);
    let (count, most, calls) = sized((28, 3000, 4), (6, 256, 2), (4, 128, 2));
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let blas = Cublas::new(&stream).unwrap();
    println!("cublas shapes (seed {seed}): m n k ta tb lda ldb ldc kind α β · mode · identical · worst ÷ tolerance");
    let mut failed = Vec::new();
    for s in shapes(&mut rng, count, most) {
        let (m, n, k, ta, tb, (lda, ldb, ldc), al, be) =
            (s.m, s.n, s.k, s.ta, s.tb, s.ld, s.alpha, s.beta);
        let o = match s.kind {
            Kind::F32 => {
                one::<f32, f32>(&ctx, &stream, &blas, &s, &mut rng, calls, |bl, a, b, c| {
                    bl.sgemm(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc)
                })
            }
            Kind::Bf16 => one::<half::bf16, half::bf16>(
                &ctx,
                &stream,
                &blas,
                &s,
                &mut rng,
                calls,
                |bl, a, b, c| bl.gemm_bf16(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc),
            ),
            Kind::Bf16F32 => {
                one::<half::bf16, f32>(&ctx, &stream, &blas, &s, &mut rng, calls, |bl, a, b, c| {
                    bl.gemm_bf16_f32(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc)
                })
            }
        };
        println!(
            "cublas shapes: {m} {n} {k} {ta:?} {tb:?} {lda} {ldb} {ldc} {:?} {al:.3} {be:.3} · {} · {}/{} · {:.3}",
            s.kind, o.mode, o.identical, o.elements, o.worst
        );
        if o.worst > 1.0 {
            failed.push(format!("{s:?}: worst {:.3} × the tolerance", o.worst));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
