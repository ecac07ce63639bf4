//! A [`Llama`]'s decode step as a graph-rt step: its declared buffers ([`DecodeParams`]),
//! what one call reads and writes ([`DecodeIo`]), and the closure
//! ([`DecodeParams::body`]) — the capture-safe form over the tensors bound.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use candle_core::DType;
//! use graph_rt::step::{Step, StepOptions};
//! use graph_rt_candle::decode::{DecodeIo, DecodeParams};
//! use graph_rt_candle::llama::{Config, Llama};
//! use graph_rt_candle::CandleStream;
//!
//! let on = CandleStream::new(0)?;
//! let model = Llama::new(Config::llama_8x2048(), DType::F32, 1, on.device())?;
//! let io = DecodeIo::new(&model, 1, model.static_cache(1)?)?;
//! let (params, p) = DecodeParams::<f32>::declare(&on, &model, &io)?;
//! let mut step = Step::new(on.stream(), params, StepOptions::default(), p.body(&on, &model))?;
//! for pos in 0..16u32 {
//!     // The next call's tokens are this call's greedy tokens, on the device.
//!     let call = DecodeIo { tokens: io.next.copy()?, pos: candle_core::Tensor::new(&[pos], on.device())?, ..io.clone() };
//!     p.bind(&mut step, &call)?;
//!     step.run()?;
//! }
//! # Ok(())
//! # }
//! ```

use candle_core::cuda_backend::CudaDType;
use candle_core::{DType, Tensor, WithDType};
use graph_rt::step::{Buf, Step, StepParams, StepScope};
use graph_rt::Pod;

use crate::llama::Llama;
use crate::{bind, buffer_of, error, tensor, CandleStream};

/// What one decode call reads and writes.
#[derive(Debug, Clone)]
pub struct DecodeIo {
    /// Each sequence's token (`[batch]`, u32).
    pub tokens: Tensor,
    /// The position the call decodes (`[1]`, u32): every sequence of the batch is at it.
    pub pos: Tensor,
    /// The logits (`[batch, vocab]`, f32), written.
    pub logits: Tensor,
    /// Each sequence's greedy next token (`[batch]`, u32), written.
    pub next: Tensor,
    /// Each layer's key and value cache (`Config::cache_shape`, the model's dtype): row `pos`
    /// written, rows up to it read.
    pub caches: Vec<(Tensor, Tensor)>,
}

impl DecodeIo {
    /// Zeroed tokens, position, logits and next tokens for `batch` sequences, with `caches`.
    pub fn new(
        model: &Llama,
        batch: usize,
        caches: Vec<(Tensor, Tensor)>,
    ) -> candle_core::Result<Self> {
        let dev = model.device();
        Ok(Self {
            tokens: Tensor::zeros(batch, DType::U32, dev)?,
            pos: Tensor::zeros(1, DType::U32, dev)?,
            logits: Tensor::zeros((batch, model.config().vocab), DType::F32, dev)?,
            next: Tensor::zeros(batch, DType::U32, dev)?,
            caches,
        })
    }

    /// The batch size.
    pub fn batch(&self) -> usize {
        self.tokens.elem_count()
    }

    /// The call run eagerly through candle ([`Llama::forward_static_greedy`]).
    pub fn forward(&self, model: &Llama) -> candle_core::Result<()> {
        model.forward_static_greedy(
            &self.tokens,
            &self.pos,
            &self.caches,
            &self.logits,
            &self.next,
        )
    }
}

/// The decode step's declared buffers; `T`, the caches' element type (the model's dtype).
#[derive(Debug)]
pub struct DecodeParams<T> {
    tokens: Buf<u32>,
    pos: Buf<u32>,
    logits: Buf<f32>,
    next: Buf<u32>,
    caches: Vec<(Buf<T>, Buf<T>)>,
    batch: usize,
}

impl<T: Pod + CudaDType + WithDType> DecodeParams<T> {
    /// Declares the step's buffers for `io`'s batch and binds `io` (the tensors `Step::new`'s
    /// runs read and write).
    pub fn declare(
        on: &CandleStream,
        model: &Llama,
        io: &DecodeIo,
    ) -> graph_rt::Result<(StepParams, Self)> {
        let cfg = model.config();
        let batch = io.batch();
        if T::DTYPE != model.dtype() {
            return Err(error(candle_core::Error::Msg(format!(
                "the caches are declared {:?}, the model is {:?}",
                T::DTYPE,
                model.dtype()
            ))));
        }
        let (b, kv, c, hd) = cfg.cache_shape(batch);
        let mut sp = StepParams::new(on.stream().context(), 4 + 2 * cfg.layers)?;
        let p = Self {
            tokens: sp.buffer(batch)?,
            pos: sp.buffer(1)?,
            logits: sp.buffer(batch * cfg.vocab)?,
            next: sp.buffer(batch)?,
            caches: (0..cfg.layers)
                .map(|_| Ok((sp.buffer(b * kv * c * hd)?, sp.buffer(b * kv * c * hd)?)))
                .collect::<graph_rt::Result<Vec<_>>>()?,
            batch,
        };
        let s = on.stream();
        sp.bind(&p.tokens, &buffer_of(s, &io.tokens)?)?;
        sp.bind(&p.pos, &buffer_of(s, &io.pos)?)?;
        sp.bind(&p.logits, &buffer_of(s, &io.logits)?)?;
        sp.bind(&p.next, &buffer_of(s, &io.next)?)?;
        for ((kb, vb), (k, v)) in p.caches.iter().zip(&io.caches) {
            sp.bind(kb, &buffer_of(s, k)?)?;
            sp.bind(vb, &buffer_of(s, v)?)?;
        }
        Ok((sp, p))
    }

    /// Binds `io` for the calls that follow (no synchronize: its tensors are made on the step's
    /// stream).
    pub fn bind<F>(&self, step: &mut Step<F>, io: &DecodeIo) -> graph_rt::Result<()>
    where
        F: FnMut(&StepScope<'_>) -> graph_rt::Result<()>,
    {
        bind(step, &self.tokens, &io.tokens)?;
        bind(step, &self.pos, &io.pos)?;
        bind(step, &self.logits, &io.logits)?;
        bind(step, &self.next, &io.next)?;
        for ((kb, vb), (k, v)) in self.caches.iter().zip(&io.caches) {
            bind(step, kb, k)?;
            bind(step, vb, v)?;
        }
        Ok(())
    }

    /// The step's closure: [`Llama::forward_static_greedy`] over the tensors bound, with
    /// candle's uploads of dims and strides served from its cache (filled by the step's eager
    /// run).
    pub fn body<'a>(
        &'a self,
        on: &'a CandleStream,
        model: &'a Llama,
    ) -> impl FnMut(&StepScope<'_>) -> graph_rt::Result<()> + 'a {
        move |s| {
            let cfg = model.config();
            let _cache = on.cuda_device()?.enable_cuda_graph_htod_cache();
            let batch = self.batch;
            // SAFETY: these tensors, and what shares their storage, live in this run only.
            let (tokens, pos, logits, next) = unsafe {
                (
                    tensor(s, on, &self.tokens, batch)?,
                    tensor(s, on, &self.pos, 1)?,
                    tensor(s, on, &self.logits, (batch, cfg.vocab))?,
                    tensor(s, on, &self.next, batch)?,
                )
            };
            let caches = self
                .caches
                .iter()
                .map(|(kb, vb)| {
                    // SAFETY: as above.
                    unsafe {
                        Ok((
                            tensor(s, on, kb, cfg.cache_shape(batch))?,
                            tensor(s, on, vb, cfg.cache_shape(batch))?,
                        ))
                    }
                })
                .collect::<graph_rt::Result<Vec<_>>>()?;
            model
                .forward_static_greedy(&tokens, &pos, &caches, &logits, &next)
                .map_err(error)
        }
    }
}
