//! The decode example's model on the GPU against the CPU reference
//! (`graph_rt_dev::decode::reference`) on a small configuration, with the example's own matrix
//! products and with cuBLAS's: the step as a graph, rebinding the tokens and logits and setting
//! the position every call, gives the reference's logits to bf16 accuracy at every position
//! (its argmax the successor the head favours), and the same logits eagerly; a bad token makes
//! its row NaN.

#[path = "../examples/decode/generate.rs"]
mod generate;
#[path = "../examples/decode/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../examples/decode/step.rs"]
mod step;

use graph_rt::half::bf16;
use graph_rt::step::{Step, StepMode, StepOptions, StepParams};
use graph_rt::{Context, DeviceBuffer, Stream};
use graph_rt_dev::decode::reference::Reference;
use graph_rt_dev::decode::DecodeConfig;
use model::{Batch, Gemms, KernelSource, Model, Params, Variant};

fn tiny() -> DecodeConfig {
    DecodeConfig {
        layers: 2,
        d: 256,
        heads: 4,
        kv_heads: 2,
        mlp: 384,
        vocab: 500,
        max_len: 24,
        batches: vec![3],
        position: 0,
    }
}

/// An odd shape: head width 48 (attention's other path), one KV head, an MLP width the
/// example's matrix-vector kernel does not take (cuBLAS instead), a vocabulary of 333.
fn odd() -> DecodeConfig {
    DecodeConfig {
        layers: 1,
        d: 384,
        heads: 8,
        kv_heads: 1,
        mlp: 300,
        vocab: 333,
        max_len: 40,
        batches: vec![3],
        position: 0,
    }
}

fn token(pos: usize, row: usize, vocab: usize) -> i32 {
    ((7 + 31 * pos + 101 * row) % vocab) as i32
}

fn std_dev(v: &[f32]) -> f64 {
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
    (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn the_gpu_step_is_the_reference_at_every_position_with_its_own_products() -> graph_rt::Result<()> {
    against_the_reference(tiny(), Gemms::Own)
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn an_odd_shape_is_the_reference_too() -> graph_rt::Result<()> {
    against_the_reference(odd(), Gemms::Own)
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn the_gpu_step_is_the_reference_at_every_position_with_cublas() -> graph_rt::Result<()> {
    against_the_reference(tiny(), Gemms::Cublas)
}

/// The tests above load the shipped cubin where one is for this device (sm_90, and they check
/// that it was); this one compiles the PTX, as every other architecture does.
#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn the_kernels_from_their_ptx_are_the_reference_too() -> graph_rt::Result<()> {
    against_the_reference_from(odd(), Gemms::Own, KernelSource::Ptx)
}

/// One GPU test at a time in this process: a capture in one would be broken by an allocation in
/// another.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What every test here starts from: a context and stream on device 0, the model of `c`, the
/// buffers of `rows` rows, and the step's parameters declared.
type Setup = (
    Context,
    Stream,
    Model,
    std::cell::RefCell<Batch>,
    StepParams,
    Params,
);

fn setup(c: &DecodeConfig, rows: usize, source: KernelSource) -> graph_rt::Result<Setup> {
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let m = Model::new(&ctx, &stream, c, source)?;
    // A cubin ships for sm_90: build.rs leaves it out only when it is stale (a warning), which
    // must not pass unseen here.
    let cc = ctx.device().compute_capability()?;
    let want = match source {
        KernelSource::Shipped if cc == (9, 0) => "cubin sm_90",
        _ => "PTX",
    };
    for k in std::iter::once(&m.k).chain(&m.k_pdl) {
        assert_eq!(
            k.form.to_string(),
            want,
            "the kernels' form on sm_{}{}",
            cc.0,
            cc.1
        );
    }
    let batch = std::cell::RefCell::new(Batch::new(&ctx, c, rows)?);
    let mut sp = StepParams::new(&ctx, 8)?;
    let p = Params::declare(&mut sp, rows, c.vocab)?;
    Ok((ctx, stream, m, batch, sp, p))
}

fn against_the_reference(c: DecodeConfig, gemms: Gemms) -> graph_rt::Result<()> {
    against_the_reference_from(c, gemms, KernelSource::Shipped)
}

fn against_the_reference_from(
    c: DecodeConfig,
    gemms: Gemms,
    source: KernelSource,
) -> graph_rt::Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rows = 3;
    let (ctx, stream, m, batch, mut sp, p) = setup(&c, rows, source)?;
    let tok = |pos: usize| -> graph_rt::Result<DeviceBuffer<i32>> {
        DeviceBuffer::from_host(
            &ctx,
            &(0..rows)
                .map(|r| token(pos, r, c.vocab))
                .collect::<Vec<_>>(),
        )
    };
    let positions = 20;
    let inputs: Vec<_> = (0..positions).map(tok).collect::<graph_rt::Result<_>>()?;
    let logits: Vec<DeviceBuffer<f32>> = (0..positions)
        .map(|_| DeviceBuffer::zeroed(&ctx, rows * c.vocab))
        .collect::<graph_rt::Result<_>>()?;
    let next: Vec<DeviceBuffer<i32>> = (0..positions)
        .map(|_| DeviceBuffer::zeroed(&ctx, rows))
        .collect::<graph_rt::Result<_>>()?;
    sp.bind(&p.tokens, &inputs[0])?;
    sp.bind(&p.logits, &logits[0])?;
    sp.bind(&p.next, &next[0])?;
    sp.set(&p.pos, 0)?;
    sp.set(&p.len, 1)?;
    let options = StepOptions {
        recapturable: true,
        ..StepOptions::default()
    };
    // With PDL where the device has it (the example's default).
    let v = Variant {
        gemms,
        pdl: m.k_pdl.is_some(),
    };
    let mut step = Step::new(&stream, sp, options, |s| {
        m.enqueue(s, &mut batch.borrow_mut(), &p, v)
    })?;
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
    for pos in 0..positions {
        step.bind(&p.tokens, &inputs[pos])?;
        step.bind(&p.logits, &logits[pos])?;
        step.bind(&p.next, &next[pos])?;
        step.set(&p.pos, pos as i32)?;
        step.set(&p.len, pos as i32 + 1)?;
        step.run()?;
    }
    stream.synchronize()?;

    let mut reference = Reference::new(&c, rows);
    for pos in 0..positions {
        let tokens: Vec<usize> = (0..rows).map(|r| token(pos, r, c.vocab) as usize).collect();
        let want = reference.step(&tokens, pos);
        let got: Vec<f32> = logits[pos].to_vec()?;
        let argmax = next[pos].to_vec()?;
        for r in 0..rows {
            let (w, g) = (&want[r], &got[r * c.vocab..(r + 1) * c.vocab]);
            let sd = std_dev(w);
            let worst = w
                .iter()
                .zip(g)
                .map(|(a, b)| (a - b).abs() as f64)
                .fold(0.0, f64::max);
            assert!(
                worst <= 0.06 * sd,
                "position {pos}, row {r}: worst |Δlogit| {worst:.4} vs std {sd:.4}"
            );
            // The kernel's argmax is that of the logits rounded to bf16 (first of equals).
            let r16: Vec<f32> = g.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
            let top = r16
                .iter()
                .enumerate()
                .fold(0, |best, (i, &x)| if x > r16[best] { i } else { best });
            assert_eq!(argmax[r] as usize, top, "position {pos}, row {r}");
        }
    }

    // Eagerly at the last position: the same logits as the graph's.
    let again = DeviceBuffer::<f32>::zeroed(&ctx, rows * c.vocab)?;
    step.bind(&p.logits, &again)?;
    step.run_eagerly()?;
    stream.synchronize()?;
    assert_eq!(again.to_vec()?, logits[positions - 1].to_vec()?);

    // A token outside the vocabulary: its row's logits are NaN, the others' unchanged.
    let bad = DeviceBuffer::from_host(
        &ctx,
        &[token(positions - 1, 0, c.vocab), c.vocab as i32, -1],
    )?;
    step.bind(&p.tokens, &bad)?;
    step.run()?;
    stream.synchronize()?;
    let v = again.to_vec()?;
    let row = |r: usize| &v[r * c.vocab..(r + 1) * c.vocab];
    assert!(row(1).iter().chain(row(2)).all(|x| x.is_nan()));
    assert_eq!(row(0), &logits[positions - 1].to_vec()?[..c.vocab]);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn generation_follows_the_reference_until_a_near_tie() -> graph_rt::Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = tiny();
    let (rows, prompt, n) = (2, 5, 12);
    let (ctx, stream, m, batch, mut sp, p) = setup(&c, rows, KernelSource::Shipped)?;
    let (tokens, logits) = (
        DeviceBuffer::from_host(&ctx, &vec![0i32; rows])?,
        DeviceBuffer::<f32>::zeroed(&ctx, rows * c.vocab)?,
    );
    let next = DeviceBuffer::<i32>::zeroed(&ctx, rows)?;
    sp.bind(&p.tokens, &tokens)?;
    sp.bind(&p.logits, &logits)?;
    sp.bind(&p.next, &next)?;
    sp.set(&p.pos, 0)?;
    sp.set(&p.len, 1)?;
    let v = Variant {
        gemms: Gemms::Cublas,
        pdl: m.k_pdl.is_some(),
    };
    let mut step = Step::new(&stream, sp, StepOptions::default(), |s| {
        m.enqueue(s, &mut batch.borrow_mut(), &p, v)
    })?;
    let g = generate::generate(
        &ctx,
        &stream,
        &mut step,
        &p,
        (rows, c.vocab),
        (prompt, n),
        &logits,
        &next,
    )?;
    assert!(g.prefill_s > 0.0 && g.generate_s > 0.0);

    // The reference, each row fed its own picks: the same tokens until a pick whose margin is
    // within bf16's error (after which the two contexts differ).
    let mut reference = Reference::new(&c, rows);
    for pos in 0..prompt - 1 {
        let t: Vec<usize> = (0..rows)
            .map(|r| model::token(pos, r, c.vocab) as usize)
            .collect();
        reference.step(&t, pos);
    }
    let mut input: Vec<usize> = (0..rows)
        .map(|r| model::token(prompt - 1, r, c.vocab) as usize)
        .collect();
    let mut diverged = vec![false; rows];
    let mut compared = 0;
    for k in 0..n {
        let out = reference.step(&input, prompt - 1 + k);
        for r in 0..rows {
            let l = &out[r];
            let r16: Vec<f32> = l.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
            let want = r16
                .iter()
                .enumerate()
                .fold(0, |best, (i, &x)| if x > r16[best] { i } else { best });
            let got = g.tokens[k * rows + r] as usize;
            if diverged[r] {
                continue;
            }
            if got != want {
                let (_, margin) = graph_rt_dev::decode::reference::top1_margin(l);
                assert!(
                    (margin as f64) < 0.06 * std_dev(l),
                    "row {r}, token {k}: {got} vs the reference's {want} at a margin of {margin}"
                );
                diverged[r] = true;
            } else {
                compared += 1;
            }
            input[r] = want;
        }
    }
    assert!(compared >= rows * n / 2, "only {compared} tokens compared");
    Ok(())
}
