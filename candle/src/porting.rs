//! Porting a candle model to a step: what to write differently, and why.
//!
//! A step captures the closure once and replays that capture at every call, rebinding only its
//! declared buffers. A candle forward pass goes through as it is — candle's kernels, cuBLAS
//! through candle's matmul, candle allocating each intermediate (the graph's memory nodes) —
//! once the few things below hold. [`crate::llama`] is a Llama-style decoder written both ways;
//! its `forward_natural` is candle's examples' form, its `forward_static` the one a step takes.
//!
//! # The device and its stream
//!
//! Make the device with [`CandleStream::new`](crate::CandleStream::new), before any tensor:
//! a stream of its own (candle's default device runs on the per-thread stream, which a step
//! refuses), cudarc's event tracking off (its events would join work made before a capture to
//! it), and a cuBLAS workspace of its own (a captured GEMM allocates nothing).
//!
//! # What changes between calls is a declared buffer
//!
//! Inputs, outputs and KV caches are declared ([`graph_rt::step::StepParams::buffer`]), bound
//! each call to the caller's tensors ([`crate::bind`]), and seen inside the closure as candle
//! tensors ([`crate::tensor`]). The closure writes its results into the declared output with a
//! kernel (`slice_set`); a tensor made in the closure and kept after it is a graph allocation
//! that outlives the graph, which a capture refuses.
//!
//! # The closure keeps no state between runs
//!
//! The closure runs eagerly once, then in captures whose work never runs: a tensor it makes
//! is, in a capture, memory the graph maps during its replays only. So nothing made in a run
//! may outlive it (a KV cache grown by `cat` and stored, a running total replaced each run),
//! and nothing made before the step may be dropped in it (its free would be the capture's).
//! The step refuses such a capture and runs eagerly ([`graph_rt::Misuse::AllocationKept`],
//! [`graph_rt::Misuse::FreedInCapture`], or candle's error), but what the closure stored from
//! the capture is then memory no replay maps: state lives in declared buffers.
//!
//! # The position lives on the device
//!
//! candle's examples pass the decode position as a host `usize`: `cos.narrow(0, pos, 1)` and a
//! KV cache grown by `Tensor::cat` bake it into pointers and shapes, so a capture would replay
//! the first call's position for ever (validation catches it: see the tests). A step's
//! position is a declared `u32` tensor of one element, read by candle's own kernels:
//!
//! - the rotary rows: `cos.index_select(pos, 0)`;
//! - the cache write: `cache.scatter_set(rows, k, 2)`, `rows` the position broadcast to the new
//!   row's shape;
//! - the attention: over the whole cache, every row after `pos` masked
//!   (`positions.broadcast_le(pos)` and `where_cond`), so that every call does the same work.
//!
//! The caches are preallocated at their full length (`[batch, kv_heads, cache, head_dim]`)
//! and bound every call: a sequence's own cache, a fresh one, another sequence's — no copy.
//! Reading the whole cache costs more than reading the positions filled; for decode at batch
//! sizes where weights dominate, little.
//!
//! # Shapes stay the same
//!
//! A launch's grid follows its tensor's element count, fixed at capture: a batch size or
//! cache length of its own is a step of its own.
//!
//! # candle's uploads come from its cache
//!
//! candle uploads dims and strides for non-contiguous ops (a broadcast, `where_cond`,
//! `index_select`) from pageable host memory, which a capture cannot replay. Hold
//! `enable_cuda_graph_htod_cache()`'s guard inside the closure: the step's first (eager) run
//! fills candle's cache, and its captures read from it. No `Tensor::new`, `to_vec` or
//! `to_scalar` inside the closure: an upload or a host read has nothing to replay.
//!
//! # Copies are rebound; host offsets are not
//!
//! A contiguous copy of a declared tensor (`Tensor::copy`, a fallback of `cat`) is a copy
//! node, which the step points at the tensor bound before each launch (one driver call a copy
//! whose buffers moved). A view at a host offset that changes between calls (`narrow(pos)`) is
//! not a parameter: declare what it views, or index it on the device.
//!
//! # Greedy decoding stays on the device
//!
//! The argmax of the logits can be written into a declared buffer that the next call binds as
//! its tokens ([`crate::llama::Llama::forward_static_greedy`]): generation then needs no host
//! round trip per token.
