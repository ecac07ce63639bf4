//! What the example runs per batch size: the teacher-forced logits, the timings of the step
//! eagerly, as a graph and as the profiler chose, and the results file.

use std::cell::RefCell;
use std::path::Path;
use std::time::Instant;

use graph_rt::profile::{Mode, ProfileOptions, Profiled};
use graph_rt::step::{Step, StepMode, StepOptions, StepParams};
use graph_rt::timing::quantiles;
use graph_rt::{Context, DeviceBuffer, Event, EventFlags, LaunchConfig, Stream};
use serde_json::{json, Value};

use crate::model::{fail, token, Batch, Form, Gemms, KernelSource, Model, Params, Variant};
use crate::GemmChoice;
use crate::Options;

/// Timing blocks per mode: the fastest block's median is kept (as the PyTorch script does).
const REPEATS: usize = 3;

/// Median, 25th and 75th percentile of wall µs per synchronized call of `f`, after `warm`: of
/// the fastest of [`REPEATS`] blocks.
fn time(
    stream: &Stream,
    iters: usize,
    warm: usize,
    mut f: impl FnMut() -> graph_rt::Result<()>,
) -> graph_rt::Result<[f64; 3]> {
    let mut best = [f64::INFINITY; 3];
    for _ in 0..REPEATS {
        for _ in 0..warm {
            f()?;
        }
        stream.synchronize()?;
        let mut us = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            f()?;
            stream.synchronize()?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let q = quantiles(us, &[0.5, 0.25, 0.75]);
        if q[0] < best[0] {
            best = [q[0], q[1], q[2]];
        }
    }
    Ok(best)
}

/// Bytes read plus written per second by the copy kernel over 1 GiB (median of 20).
fn copy_bandwidth(ctx: &Context, stream: &Stream, model: &Model) -> graph_rt::Result<f64> {
    let words = (1usize << 30) / 16;
    let src = DeviceBuffer::<[u32; 4]>::zeroed(ctx, words)?;
    let dst = DeviceBuffer::<[u32; 4]>::zeroed(ctx, words)?;
    let cfg = LaunchConfig::new(132u32 * 16, 512u32);
    let (a, b) = (
        Event::new(ctx, EventFlags::default())?,
        Event::new(ctx, EventFlags::default())?,
    );
    let mut ms = Vec::new();
    for i in 0..25 {
        a.record(stream)?;
        // SAFETY: both buffers hold `words` 16-byte words.
        unsafe { stream.launch(&model.k.copy, &cfg, (&src, &dst, words as u64))? };
        b.record(stream)?;
        b.synchronize()?;
        if i >= 5 {
            ms.push(Event::elapsed_ms(&a, &b)? as f64);
        }
    }
    let median = quantiles(ms, &[0.5])[0];
    Ok(2.0 * (words * 16) as f64 / (median * 1e-3))
}

/// A variant in words.
fn describe(v: Variant) -> String {
    format!(
        "{}{}",
        match v.gemms {
            Gemms::Cublas => "cuBLAS products",
            Gemms::Own => "the example's matrix-vector products",
        },
        if v.pdl { ", PDL" } else { ", no PDL" }
    )
}

/// Runs every batch size; prints the table and writes `--out`. Ok(false): a step did not run
/// as a graph.
pub fn run(o: &Options) -> graph_rt::Result<bool> {
    let c = &o.config;
    let ctx = Context::new(0).map_err(|e| {
        fail(format!(
            "needs an NVIDIA GPU and driver (CUDA >= 12.4): {e}"
        ))
    })?;
    let stream = Stream::new(&ctx)?;
    let t = Instant::now();
    let source = if o.jit {
        KernelSource::Ptx
    } else {
        KernelSource::Shipped
    };
    let model = Model::new(&ctx, &stream, c, source)?;
    let setup_s = t.elapsed().as_secs_f64();
    let bandwidth = copy_bandwidth(&ctx, &stream, &model)?;
    let floor_us = c.weight_read_bytes() as f64 / bandwidth * 1e6;
    println!(
        "decode: {} layers, d {}, {} heads ({} KV), MLP {}, vocabulary {}, cache {}, bf16 on {}; weights {:.1} MB made and uploaded in {:.1} s, the kernels ({}) and cuBLAS loaded in {:.1} s{}; a copy kernel moves {:.2} TB/s: the weight-read floor is {floor_us:.1} µs",
        c.layers, c.d, c.heads, c.kv_heads, c.mlp, c.vocab, c.max_len,
        ctx.device().name()?,
        c.weight_read_bytes() as f64 / 1e6,
        model.weights_s,
        model.k.form,
        model.kernels_s,
        if model.k.form == Form::Ptx {
            " (the driver compiles PTX on a machine's first run, then caches it)"
        } else {
            ""
        },
        bandwidth / 1e12,
    );
    if let Some(dir) = &o.out {
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("--out {}: {e}", dir.display())))?;
    }
    let mut batches = serde_json::Map::new();
    let mut generation = serde_json::Map::new();
    let mut all_graph = true;
    let mut finite = true;
    for &rows in &c.batches {
        let mut r = run_batch(&ctx, &stream, &model, rows, o)?;
        if let Some(g) = r.get_mut("generation").map(Value::take) {
            if !g.is_null() {
                generation.insert(rows.to_string(), g);
            }
        }
        all_graph &= r["graph"].as_bool().unwrap_or(false);
        finite &= r["margin_min"].as_f64().is_some_and(f64::is_finite);
        batches.insert(rows.to_string(), r);
    }
    println!("decode: batch | eager µs | graph µs | chosen µs (mode) | chosen ÷ floor");
    for (b, r) in &batches {
        println!(
            "decode: {b:>5} | {:8.1} | {:8.1} | {:8.1} ({}) | {:.2}×",
            r["eager_us"].as_f64().unwrap_or(f64::NAN),
            r["graph_us"].as_f64().unwrap_or(f64::NAN),
            r["chosen_us"].as_f64().unwrap_or(f64::NAN),
            r["chosen"].as_str().unwrap_or("?"),
            r["chosen_us"].as_f64().unwrap_or(f64::NAN) / floor_us,
        );
    }
    let pass = all_graph && finite;
    println!(
        "decode: {} every batch size ({:?}) captured as one step's graph: {all_graph}; teacher-forced logits finite: {finite}",
        if pass { "PASS" } else { "FAIL" },
        c.batches,
    );
    if let Some(dir) = &o.out {
        let v = json!({
            "commit": env!("GRAPH_RT_DEV_COMMIT"),
            "device": ctx.device().name()?,
            "config": {
                "layers": c.layers, "d": c.d, "heads": c.heads, "kv_heads": c.kv_heads,
                "mlp": c.mlp, "vocab": c.vocab, "max_len": c.max_len, "position": c.position,
                "steps": o.steps,
            },
            "logits_dtype": "f32",
            "weight_bytes": c.weight_read_bytes(),
            "copy_bytes_per_s": bandwidth,
            "floor_us": floor_us,
            "setup_s": setup_s,
            "weights_s": model.weights_s,
            "kernels_s": model.kernels_s,
            "kernels_form": model.k.form.to_string(),
            "batches": Value::Object(batches),
            "generation": Value::Object(generation),
        });
        write(&dir.join("graph-rt.json"), v.to_string().as_bytes())?;
    }
    Ok(pass)
}

fn write(path: &Path, bytes: &[u8]) -> graph_rt::Result<()> {
    std::fs::write(path, bytes).map_err(|e| fail(format!("{}: {e}", path.display())))
}

/// One batch size: teacher-forced logits (written to `--out`), timings, the profiler's choice.
fn run_batch(
    ctx: &Context,
    stream: &Stream,
    model: &Model,
    rows: usize,
    o: &Options,
) -> graph_rt::Result<Value> {
    let c = &model.c;
    let vocab = c.vocab;
    let tokens_at = |pos: usize| -> graph_rt::Result<DeviceBuffer<i32>> {
        let t: Vec<i32> = (0..rows).map(|r| token(pos, r, vocab)).collect();
        DeviceBuffer::from_host(ctx, &t)
    };
    let batch = RefCell::new(Batch::new(ctx, c, rows)?);
    let fixed_tokens = tokens_at(c.position)?;
    let fixed_logits = DeviceBuffer::<f32>::zeroed(ctx, rows * vocab)?;
    let fixed_next = DeviceBuffer::<i32>::zeroed(ctx, rows)?;
    // A step's parameters, declared and bound to the fixed buffers at the timed position.
    let declared = || -> graph_rt::Result<(StepParams, Params)> {
        let mut sp = StepParams::new(ctx, 8)?;
        let p = Params::declare(&mut sp, rows, vocab)?;
        sp.bind(&p.tokens, &fixed_tokens)?;
        sp.bind(&p.logits, &fixed_logits)?;
        sp.bind(&p.next, &fixed_next)?;
        sp.set(&p.pos, c.position as i32)?;
        sp.set(&p.len, c.position as i32 + 1)?;
        Ok((sp, p))
    };

    // The variants this device runs (the example's own products where they apply, PDL on and
    // off where it has PDL), each captured and timed as a graph; the fastest is the step's
    // (--gemm and --no-pdl pin one).
    // The example's products apply where any one of them does (each product checks itself).
    let own_fits = model.k.gemv_fits(rows, c.d) || model.k.gemv_fits(rows, c.mlp);
    let mut candidates = Vec::new();
    for gemms in [Gemms::Cublas, Gemms::Own] {
        for pdl in [true, false] {
            let pinned = match o.gemm {
                GemmChoice::Auto => true,
                GemmChoice::Cublas => gemms == Gemms::Cublas,
                GemmChoice::Own => gemms == Gemms::Own,
            };
            let runs = (gemms == Gemms::Cublas || own_fits)
                && (!pdl || model.k_pdl.is_some())
                && !(pdl && o.no_pdl)
                && pinned;
            if runs {
                candidates.push(Variant { gemms, pdl });
            }
        }
    }
    let mut measured = Vec::new();
    let mut failed = Vec::new();
    for &candidate in &candidates {
        let (sp, pa) = declared()?;
        // A variant that fails (a launch this device refuses) is reported and left out; the
        // context stays usable after a failed capture.
        let timed = Step::new(stream, sp, StepOptions::default(), |s| {
            model.enqueue(s, &mut batch.borrow_mut(), &pa, candidate)
        })
        .and_then(|mut step| time(stream, o.iters, o.warm, || step.run()));
        match timed {
            Ok(us) => measured.push((candidate, us[0])),
            Err(e) => {
                eprintln!(
                    "decode: batch {rows}: {} left out: {e}",
                    describe(candidate)
                );
                stream.synchronize()?;
                failed.push(describe(candidate));
            }
        }
    }
    let Some(&(v, _)) = measured.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
        return Err(fail(
            "no variant of the step to run (--gemm own where the example's products do not apply?)"
                .into(),
        ));
    };
    let alternatives: Vec<(String, f64)> = measured
        .iter()
        .filter(|(w, _)| *w != v)
        .map(|&(w, us)| (describe(w), us))
        .collect();

    // The step, captured once.
    let (sp, p) = declared()?;
    let t = Instant::now();
    let options = StepOptions {
        recapturable: true,
        ..StepOptions::default()
    };
    let mut step = Step::new(stream, sp, options, |s| {
        model.enqueue(s, &mut batch.borrow_mut(), &p, v)
    })?;
    let capture_s = t.elapsed().as_secs_f64();
    let (graph, nodes) = match step.mode() {
        StepMode::Graph { kernel_nodes, .. } => (true, *kernel_nodes),
        other => {
            eprintln!("decode: batch {rows}: the step runs eagerly: {other:?}");
            (false, 0)
        }
    };

    // Teacher-forced: position 0 on, the logits of the compared positions kept on the device.
    let t = Instant::now();
    let end = c.position + o.steps;
    let kept: Vec<DeviceBuffer<f32>> = (0..o.steps)
        .map(|_| DeviceBuffer::zeroed(ctx, rows * vocab))
        .collect::<graph_rt::Result<_>>()?;
    let inputs: Vec<DeviceBuffer<i32>> =
        (0..end).map(tokens_at).collect::<graph_rt::Result<_>>()?;
    for (pos, input) in inputs.iter().enumerate() {
        step.bind(&p.tokens, input)?;
        let out = pos
            .checked_sub(c.position)
            .map_or(&fixed_logits, |s| &kept[s]);
        step.bind(&p.logits, out)?;
        step.set(&p.pos, pos as i32)?;
        step.set(&p.len, pos as i32 + 1)?;
        step.run()?;
    }
    stream.synchronize()?;
    let forced_s = t.elapsed().as_secs_f64();
    let mut margins = Vec::new();
    let mut bytes = Vec::with_capacity(o.steps * rows * vocab * 4);
    for k in &kept {
        let v = k.to_vec()?;
        for row in v.chunks(vocab) {
            let mut top = [f32::NEG_INFINITY; 2];
            for &x in row {
                if x > top[0] {
                    top = [x, top[0]];
                } else if x > top[1] {
                    top[1] = x;
                }
            }
            margins.push((top[0] - top[1]) as f64);
        }
        bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    }
    if let Some(dir) = &o.out {
        write(&dir.join(format!("logits-b{rows}.bin")), &bytes)?;
    }
    let margin = quantiles(margins, &[0.0, 0.5]);

    // Timing at the fixed position: eagerly, as the graph, then as the profiler chose.
    step.bind(&p.tokens, &fixed_tokens)?;
    step.bind(&p.logits, &fixed_logits)?;
    step.set(&p.pos, c.position as i32)?;
    step.set(&p.len, c.position as i32 + 1)?;
    let eager = time(stream, o.iters, o.warm, || step.run_eagerly())?;
    let graph_us = if graph {
        Some(time(stream, o.iters, o.warm, || step.run())?)
    } else {
        None
    };
    // Generation with the same step (its caches rewritten from position 0).
    let generation = if o.generate > 0 {
        let g = crate::generate::generate(
            ctx,
            stream,
            &mut step,
            &p,
            (rows, vocab),
            (o.prompt, o.generate),
            &fixed_logits,
            &fixed_next,
        )?;
        if let Some(dir) = &o.out {
            let bytes: Vec<u8> = g.tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
            write(&dir.join(format!("generated-b{rows}.bin")), &bytes)?;
        }
        let per_s = o.generate as f64 / g.generate_s;
        println!(
            "decode: batch {rows}: generated {} tokens after a prompt of {}: prefill {:.1} ms, generation {:.1} ms, {per_s:.0} tokens/s a sequence ({:.0} over the batch)",
            o.generate,
            o.prompt,
            g.prefill_s * 1e3,
            g.generate_s * 1e3,
            per_s * rows as f64,
        );
        json!({
            "prompt": o.prompt, "tokens": o.generate,
            "prefill_s": g.prefill_s, "generate_s": g.generate_s,
            "tokens_per_s": per_s, "batch_tokens_per_s": per_s * rows as f64,
        })
    } else {
        Value::Null
    };
    drop(step);

    let (sp, p2) = declared()?;
    let t = Instant::now();
    let options = ProfileOptions {
        rerunnable: true,
        key: format!("batch={rows}"),
        ..ProfileOptions::default()
    };
    let mut profiled = Profiled::new("decode", stream, sp, StepOptions::default(), options, |s| {
        model.enqueue(s, &mut batch.borrow_mut(), &p2, v)
    })?;
    let profile_s = t.elapsed().as_secs_f64();
    let report = profiled.report().to_string();
    println!("decode: batch {rows}: the profiler's report:\n{report}");
    let chosen = match profiled.mode() {
        Mode::Eager => "eager",
        Mode::Graph => "graph",
    };
    let chosen_us = time(stream, o.iters, o.warm, || profiled.run())?;
    let instead: Vec<String> = alternatives
        .iter()
        .map(|(what, us)| format!("{what} {us:.1} µs"))
        .collect();
    println!(
        "decode: batch {rows}: {} (the fastest variant as a graph; the others: {}); {nodes} kernel nodes; captured in {capture_s:.2} s, profiled in {profile_s:.2} s; {end} teacher-forced steps in {forced_s:.2} s (top-1 margin min {:.4}, median {:.4}); µs per step: eager {:.1} · graph {} · chosen ({chosen}) {:.1}",
        describe(v), instead.join(" · "),
        margin[0], margin[1], eager[0],
        graph_us.map_or("—".into(), |g| format!("{:.1}", g[0])),
        chosen_us[0],
    );
    Ok(json!({
        "generation": generation,
        "graph": graph,
        "kernel_nodes": nodes,
        "eager_us": eager[0], "eager_spread": [eager[1], eager[2]],
        "variant": describe(v), "failed_variants": failed,
        "alternatives": alternatives.iter().map(|(w, us)| json!({"variant": w, "graph_us": us})).collect::<Vec<_>>(),
        "graph_us": graph_us.map(|g| g[0]), "graph_spread": graph_us.map(|g| vec![g[1], g[2]]),
        "chosen": chosen, "chosen_us": chosen_us[0], "chosen_spread": [chosen_us[1], chosen_us[2]],
        "capture_s": capture_s, "profile_s": profile_s, "forced_s": forced_s,
        "margin_min": margin[0], "margin_median": margin[1],
        "report": report,
    }))
}
