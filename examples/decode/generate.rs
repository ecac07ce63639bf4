//! Generation through the step (`--generate N --prompt L`): the prompt's tokens prefilled by the
//! step one position at a time (positions 0 … L − 2), then N steps from position L − 1, each fed
//! the token the one before picked (its next-token output bound as the next call's input: the
//! tokens never leave the device), one synchronization at the end. The same definitions as
//! `scripts/decode_pytorch.py --generate`.

use std::time::Instant;

use graph_rt::step::{Step, StepScope};
use graph_rt::{Context, DeviceBuffer, Stream};

use crate::model::{token, Params};

/// What a generation measured: the tokens (`[n, rows]`, row-major), and the seconds of the
/// prefill and of the `n` generating steps.
pub struct Generated {
    pub tokens: Vec<i32>,
    pub prefill_s: f64,
    pub generate_s: f64,
}

/// Generates `n` tokens after a prompt of `prompt` positions with `step` (bound to its fixed
/// logits buffer meanwhile; the caches are rewritten from position 0).
#[allow(clippy::too_many_arguments)] // the step, its parameters and the run's shape
pub fn generate<F>(
    ctx: &Context,
    stream: &Stream,
    step: &mut Step<F>,
    p: &Params,
    (rows, vocab): (usize, usize),
    (prompt, n): (usize, usize),
    logits: &DeviceBuffer<f32>,
    scratch_next: &DeviceBuffer<i32>,
) -> graph_rt::Result<Generated>
where
    F: FnMut(&StepScope<'_>) -> graph_rt::Result<()>,
{
    let inputs: Vec<DeviceBuffer<i32>> = (0..prompt)
        .map(|pos| {
            let t: Vec<i32> = (0..rows).map(|r| token(pos, r, vocab)).collect();
            DeviceBuffer::from_host(ctx, &t)
        })
        .collect::<graph_rt::Result<_>>()?;
    let outs: Vec<DeviceBuffer<i32>> = (0..n)
        .map(|_| DeviceBuffer::zeroed(ctx, rows))
        .collect::<graph_rt::Result<_>>()?;
    let at = |step: &mut Step<F>, pos: usize, input: &DeviceBuffer<i32>, next| {
        step.bind(&p.tokens, input)?;
        step.bind(&p.next, next)?;
        step.set(&p.pos, pos as i32)?;
        step.set(&p.len, pos as i32 + 1)?;
        step.run()
    };
    step.bind(&p.logits, logits)?;
    stream.synchronize()?;
    let t = Instant::now();
    for (pos, input) in inputs.iter().enumerate().take(prompt - 1) {
        at(step, pos, input, scratch_next)?;
    }
    stream.synchronize()?;
    let prefill_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for k in 0..n {
        let input = if k == 0 {
            &inputs[prompt - 1]
        } else {
            &outs[k - 1]
        };
        at(step, prompt - 1 + k, input, &outs[k])?;
    }
    stream.synchronize()?;
    let generate_s = t.elapsed().as_secs_f64();
    let mut tokens = Vec::with_capacity(n * rows);
    for o in &outs {
        tokens.extend(o.to_vec()?);
    }
    Ok(Generated {
        tokens,
        prefill_s,
        generate_s,
    })
}
