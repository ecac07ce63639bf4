//! A decode step of a decoder-only transformer (bf16; the configuration from the command line)
//! through graph-rt's step API and profiler, against PyTorch on the same GPU
//! (`scripts/decode_pytorch.py`).
//!
//! Per batch size: one step (captured once; the tokens in, the logits and next tokens out, the
//! position and the attended length declared as parameters, so one capture serves every token
//! and position), fed the same tokens as the PyTorch script (teacher-forced from position 0, the
//! logits of `--steps` positions from `--position` written to `--out` for the script to
//! compare); the step timed eagerly and as a graph, and the profiler's choice between them
//! (`graph_rt::profile::Profiled`, its report printed) timed as it runs. Every time is the
//! median wall µs of a synchronized call, warm-up first, as the PyTorch script measures.
//!
//! ```text
//! cargo run --release --example decode -- --out /tmp/decode      # the reference configuration
//! cargo run --release --example decode -- --layers 2 --d 512 --heads 8 --kv-heads 2 --mlp 1408 --batches 1,4
//! ```
//!
//! Options: the model's (`--layers --d --heads --kv-heads --mlp --vocab --max-len --batches
//! --position`, see `graph_rt_dev::decode::DecodeConfig`) and `--steps N` (64), `--iters N`
//! (200), `--warm N` (20), `--out DIR`, `--gemm auto|cublas|own` (the matrix products: cuBLAS's,
//! or the example's own matrix-vector kernels up to 8 rows, with the residual add, the norm and
//! SiLU·up fused in; `auto`, the default, times both as graphs and takes the faster),
//! `--no-pdl` (no programmatic dependent launch; by default the variants with it are timed too
//! from compute capability 9.0), `--jit` (load the kernels from their PTX, compiled by the driver,
//! even where a cubin for the device ships: `examples/decode/cubin/`, sm_90), `--generate N` with `--prompt L` (128): N tokens generated
//! greedily after a prompt of L formula tokens, tokens per second, written to `--out`
//! (`generated-b{B}.bin`, i32 [N, B]) for the PyTorch script to compare. Each batch size reports
//! every variant it timed. A bad configuration is an error naming the option and
//! exit code 2; no GPU, exit code 1.

mod generate;
mod model;
mod run;
mod step;

use std::path::PathBuf;
use std::process::ExitCode;

use graph_rt_dev::decode::DecodeConfig;

/// `--gemm`: which matrix products the steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmChoice {
    /// The faster measured, per batch size: cuBLAS's or the example's own (up to 8 rows).
    Auto,
    /// cuBLAS everywhere.
    Cublas,
    /// The example's kernel wherever it fits.
    Own,
}

/// The command line: the model's configuration and what to run.
pub struct Options {
    pub config: DecodeConfig,
    pub gemm: GemmChoice,
    /// `--no-pdl`: launch the kernels without programmatic dependent launch.
    pub no_pdl: bool,
    /// `--jit`: load the kernels from their PTX even where a cubin for the device is shipped.
    pub jit: bool,
    pub steps: usize,
    /// `--generate N`: tokens to generate after the prompt (0: no generation).
    pub generate: usize,
    /// `--prompt L`: the generation's prompt length.
    pub prompt: usize,
    pub iters: usize,
    pub warm: usize,
    pub out: Option<PathBuf>,
}

impl Options {
    fn parse(args: Vec<String>) -> Result<Self, String> {
        let (mut steps, mut iters, mut warm, mut out) = (64, 200, 20, None);
        let mut gemm = GemmChoice::Auto;
        let mut no_pdl = false;
        let mut jit = false;
        let (mut generate, mut prompt) = (0, 128);
        let mut rest = Vec::new();
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
            let mut num = |name: &str| -> Result<usize, String> {
                let v = value(name)?;
                v.parse()
                    .map_err(|_| format!("{name} {v:?}: not a whole number"))
            };
            match flag.as_str() {
                "--steps" => steps = num("--steps")?,
                "--iters" => iters = num("--iters")?,
                "--warm" => warm = num("--warm")?,
                "--out" => out = Some(PathBuf::from(value("--out")?)),
                "--gemm" => {
                    gemm = match value("--gemm")?.as_str() {
                        "auto" => GemmChoice::Auto,
                        "cublas" => GemmChoice::Cublas,
                        "own" => GemmChoice::Own,
                        other => return Err(format!("--gemm {other:?}: auto, cublas or own")),
                    }
                }
                "--no-pdl" => no_pdl = true,
                "--jit" => jit = true,
                "--generate" => generate = num("--generate")?,
                "--prompt" => prompt = num("--prompt")?,
                "--help" | "-h" => return Err(HELP.into()),
                _ => rest.push(flag),
            }
        }
        let config = DecodeConfig::parse(rest).map_err(|e| e.0)?;
        if steps == 0 || iters == 0 {
            return Err("--steps and --iters are at least 1".into());
        }
        if config.position + steps > config.max_len {
            return Err(format!(
                "--position {} + --steps {steps} is beyond the cache of {} positions",
                config.position, config.max_len
            ));
        }
        if generate > 0 && (prompt == 0 || prompt + generate - 1 > config.max_len) {
            return Err(format!(
                "--prompt {prompt} and --generate {generate}: the prompt needs at least 1 position and prompt + generate - 1 must fit the cache of {} positions",
                config.max_len
            ));
        }
        Ok(Self {
            config,
            gemm,
            generate,
            prompt,
            no_pdl,
            jit,
            steps,
            iters,
            warm,
            out,
        })
    }
}

const HELP: &str = "usage: decode [--layers N --d N --heads N --kv-heads N --mlp N --vocab N \
--max-len N --batches 1,4,16 --position N] [--steps 64 --iters 200 --warm 20 --out DIR \
--gemm auto|cublas|own --no-pdl --jit --generate N --prompt L]";

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1).collect()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("decode: {e}");
            return ExitCode::from(2);
        }
    };
    match run::run(&options) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        // The example's own errors (no GPU, a file) say what they are; graph-rt's name the call.
        Err(graph_rt::Error::InvalidArgument {
            call: "decode",
            reason,
        }) => {
            eprintln!("decode: {reason}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("decode: {e}");
            ExitCode::FAILURE
        }
    }
}
