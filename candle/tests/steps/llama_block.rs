//! Two Llama layers (embedding, RMSNorm, rotary embedding, grouped-query attention over a KV
//! cache, SwiGLU, the final norm and head, the greedy token) written with candle's own tensors,
//! layers and ops ([`graph_rt_candle::llama`]), captured through graph-rt's step API on candle's
//! stream ([`graph_rt_candle::decode`]) and rebound every call to fresh tokens, positions,
//! outputs and KV caches: every output and cache bit-identical to the same closure run
//! eagerly, and every kernel a replay runs candle's (candle-kernels) or cuBLAS's (candle's
//! matmul).
//!
//! The position is a declared `u32` tensor that candle's kernels read on the device
//! (`index_select` of the rotary tables, `scatter_set` into the caches, the mask over the whole
//! cache), so nothing a call changes is a host value baked into the graph.

use candle_core::{DType, Tensor};
use graph_rt::step::{Step, StepMode, StepOptions, Validated};
use graph_rt_candle::decode::{DecodeIo, DecodeParams};
use graph_rt_candle::llama::{Config, Llama};
use graph_rt_candle::CandleStream;

const BATCH: usize = 2;
const SEED: u64 = 1234;

/// Calls: 1000, or a few under a compute-sanitizer (`GRAPH_RT_SANITIZER`, set by `run.sh`).
fn calls() -> usize {
    match std::env::var_os("GRAPH_RT_SANITIZER") {
        Some(_) => 6,
        None => 1000,
    }
}

/// Fresh tokens at `position`, fresh random caches, zeroed outputs.
fn fresh(model: &Llama, call: usize, position: u32) -> DecodeIo {
    let cfg = model.config();
    let dev = model.device();
    let cache = || Tensor::rand(-1f32, 1f32, cfg.cache_shape(BATCH), dev).unwrap();
    let tokens: Vec<u32> = (0..BATCH)
        .map(|b| ((call * 7919 + b * 104_729) % cfg.vocab) as u32)
        .collect();
    DecodeIo {
        tokens: Tensor::new(tokens.as_slice(), dev).unwrap(),
        pos: Tensor::new(&[position], dev).unwrap(),
        ..DecodeIo::new(
            model,
            BATCH,
            (0..cfg.layers).map(|_| (cache(), cache())).collect(),
        )
        .unwrap()
    }
}

/// The same inputs, with outputs and caches of its own (copies of `io`'s caches).
fn twin(io: &DecodeIo) -> DecodeIo {
    DecodeIo {
        logits: io.logits.zeros_like().unwrap(),
        next: io.next.zeros_like().unwrap(),
        caches: io
            .caches
            .iter()
            .map(|(k, v)| (k.copy().unwrap(), v.copy().unwrap()))
            .collect(),
        ..io.clone()
    }
}

/// Every value a call wrote, as bits: the logits, the next tokens, then each cache.
fn written(io: &DecodeIo) -> Vec<Vec<u32>> {
    let bits = |t: &Tensor| -> Vec<u32> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let mut out = vec![bits(&io.logits), io.next.to_vec1::<u32>().unwrap()];
    for (k, v) in &io.caches {
        out.push(bits(k));
        out.push(bits(v));
    }
    out
}

/// The names of the kernels candle-kernels ships for unquantized tensors (`.entry` in its PTX
/// modules).
fn candle_kernel_names() -> std::collections::HashSet<String> {
    use candle_core::cuda_backend::kernels as k;
    let mut names = std::collections::HashSet::new();
    for m in [
        k::AFFINE,
        k::BINARY,
        k::CAST,
        k::CONV,
        k::FILL,
        k::INDEXING,
        k::REDUCE,
        k::SORT,
        k::TERNARY,
        k::UNARY,
    ] {
        for line in m.ptx().lines() {
            if let Some(rest) = line.trim_start().split(".entry ").nth(1) {
                let name = rest.split(['(', ' ']).next().unwrap_or_default();
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// Whether `name` reads as a cuBLAS or cuBLASLt kernel (their GEMM, GEMV and reduction
/// kernels, by family).
fn is_cublas(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "gemm",
        "gemv",
        "splitk",
        "xmma",
        "cutlass",
        "cublas",
        "nvjet",
        "dot_kernel",
    ]
    .iter()
    .any(|k| n.contains(k))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_llama_blocks_in_candle_are_rebound_every_call_and_equal_candle_eager() {
    let on = CandleStream::new(0).unwrap();
    let ctx = on.stream().context().clone();
    let cfg = Config::small();
    let model = Llama::new(cfg, DType::F32, SEED, on.device()).unwrap();
    let first = DecodeIo::new(&model, BATCH, model.static_cache(BATCH).unwrap()).unwrap();
    let (sp, gp) = DecodeParams::<f32>::declare(&on, &model, &first).unwrap();
    let mut graphed = Step::new(
        on.stream(),
        sp,
        StepOptions::default(),
        gp.body(&on, &model),
    )
    .unwrap();
    assert!(
        matches!(graphed.mode(), StepMode::Graph { .. }),
        "{:?}",
        graphed.mode()
    );
    // Every kernel a replay runs is candle's or cuBLAS's: no graph-rt kernel, no custom op.
    let kernels = graphed.kernels();
    let graph_rts: Vec<&str> = graph_rt::kernels::ALL
        .iter()
        .flat_map(|k| k.entry_points.iter().copied())
        .collect();
    assert!(
        kernels
            .iter()
            .all(|k| !graph_rts.contains(&k.name.as_str())),
        "a graph-rt kernel among the step's"
    );
    let ours = candle_kernel_names();
    let (candle, rest): (Vec<_>, Vec<_>) = kernels.iter().partition(|k| ours.contains(&k.name));
    println!(
        "{} kernel nodes: {} candle's, {} cuBLAS's",
        kernels.len(),
        candle.len(),
        rest.len()
    );
    for k in &kernels {
        println!("  {} {:?} {:?}", k.name, k.dims.grid, k.dims.block);
    }
    assert!(
        rest.iter().all(|k| is_cublas(&k.name)),
        "kernels neither candle's nor cuBLAS's: {:?}",
        rest.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    // Each layer's q, k, v, o, gate, up, down and two attention products, and the head.
    assert!(rest.len() > 9 * cfg.layers, "{} cuBLAS kernels", rest.len());
    let eager_first = twin(&first);
    let (sp, ep) = DecodeParams::<f32>::declare(&on, &model, &eager_first).unwrap();
    let eager_options = StepOptions {
        eager: true,
        ..StepOptions::default()
    };
    let mut eager = Step::new(on.stream(), sp, eager_options, ep.body(&on, &model)).unwrap();
    let mut kept = Vec::new();
    let mut positions = std::collections::HashSet::new();
    for call in 0..calls() {
        let position = ((call * 37 + 11) % cfg.cache) as u32;
        positions.insert(position);
        let g = fresh(&model, call, position);
        let e = twin(&g);
        gp.bind(&mut graphed, &g).unwrap();
        graphed.run().unwrap();
        ep.bind(&mut eager, &e).unwrap();
        eager.run().unwrap();
        kept.push((g, e));
        if kept.len() == 50 || call + 1 == calls() {
            for (g, e) in kept.drain(..) {
                let (gw, ew) = (written(&g), written(&e));
                for (i, (a, b)) in gw.iter().zip(&ew).enumerate() {
                    assert!(
                        a == b,
                        "call {call}: written value {i} (0: the logits, 1: the next tokens, then k, v of each layer) differs from eager's"
                    );
                }
                let logits = g.logits.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                assert!(logits.iter().all(|v| v.is_finite()));
            }
        }
    }
    assert!(positions.len() > cfg.cache / 2 || calls() < cfg.cache);
    assert_eq!(graphed.validate().unwrap(), Validated::Same);
    assert!(ctx.take_deferred_errors().is_empty());
}

/// The control for the sanitizers (`run.sh candle-sanitize`): the same calls in candle alone,
/// no step, on the same device.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_llama_blocks_in_candle_alone_control() {
    let on = CandleStream::new(0).unwrap();
    let cfg = Config::small();
    let model = Llama::new(cfg, DType::F32, SEED, on.device()).unwrap();
    for call in 0..calls() {
        let io = fresh(&model, call, ((call * 37 + 11) % cfg.cache) as u32);
        io.forward(&model).unwrap();
        let logits = io.logits.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(logits.iter().all(|v| v.is_finite()));
    }
}
