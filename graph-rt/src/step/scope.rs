//! What a step's closure enqueues its work through: one scope for the eager runs and for the
//! captures, so that the same closure does both, and so that a call a capture would refuse is
//! seen in the eager warm-up, before any capture.

use std::cell::{Cell, RefCell};

use bytemuck::Pod;

use super::choice::Launched;
use super::params::{Bound, Buf, StepParams};
use crate::cublas::Cublas;
use crate::driver::{DeviceBuffer, Function, Parked, Stream};
use crate::error::{Error, Misuse, Result};
use crate::graph::CaptureScope;
use crate::launch::{KernelArgs, LaunchConfig};
use crate::nccl::Communicator;
use crate::table::TableKernel;
use crate::triton::{TritonArg, TritonKernel};

/// Where a run of the closure goes.
pub(super) enum Run<'a> {
    /// Eagerly, on the step's stream, after an eager refresh of the step's table.
    Eager(&'a Stream),
    /// Into a capture of the step's stream, after the table's refresh node.
    Capture(&'a CaptureScope<'a>),
}

/// The scope a step's closure enqueues one step through: kernels of graph-rt (plain, table
/// form, Triton), cuBLAS, copies, and the buffers bound to the step's declared parameters.
/// The same closure runs eagerly (the warm-up, and every call of a step that runs eagerly) and
/// into the step's captures.
pub struct StepScope<'a> {
    run: Run<'a>,
    params: &'a StepParams,
    // The second capture's stand-ins for the declared buffers (discovery), if this is it.
    stand_ins: Option<&'a [Bound]>,
    // The first call made through the scope that a capture refuses.
    pub(super) refused: Cell<Option<&'static str>>,
    // Eager: the next kernel is the first after the table's refresh, which must not start
    // before the refresh has finished (so: not programmatically).
    after_refresh: Cell<bool>,
    // graph-rt's kernels the closure launched, in order (for the step's choice of mix).
    pub(super) launched: RefCell<Vec<Launched>>,
    // Whether the closure made collectives (`StepScope::nccl`).
    pub(super) collectives: Cell<bool>,
    // The first free of a `StepBuffer` the capture refused (a drop cannot return it).
    pub(super) failed_free: RefCell<Option<Error>>,
}

/// A buffer the step's closure allocated through [`StepScope::alloc`], for this run only: it
/// borrows the scope, so it cannot outlive the closure's run. Use it as a shared
/// [`DeviceBuffer`] (it dereferences to `&DeviceBuffer`, never `&mut`, so the graph's memory
/// cannot be swapped out into a buffer of the caller's) and drop it before the closure returns.
///
/// Eagerly it is a stream-ordered allocation of the step's stream, freed in stream order when
/// dropped. In a capture it is the graph's own memory: an allocation node made where
/// [`StepScope::alloc`] was called and a free node made where the buffer is dropped, so every
/// replay allocates and frees it at the same address, and nothing outside the graph ever
/// frees it. Its memory is valid during a replay only, between those two nodes: a view of it
/// kept past the closure ([`DeviceBuffer::slice`]) must not be read, and neither it nor a view
/// of it can be bound to a table slot ([`Misuse::GraphMemory`]).
pub struct StepBuffer<'s, T: Pod> {
    buffer: DeviceBuffer<T>,
    // In a capture: the capturing stream, and where a failed free is kept.
    capture: Option<(&'s Stream, &'s RefCell<Option<Error>>)>,
}

impl<T: Pod> std::ops::Deref for StepBuffer<'_, T> {
    type Target = DeviceBuffer<T>;
    fn deref(&self) -> &DeviceBuffer<T> {
        &self.buffer
    }
}

impl<T: Pod> std::fmt::Debug for StepBuffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepBuffer")
            .field("buffer", &self.buffer)
            .field("captured", &self.capture.is_some())
            .finish()
    }
}

impl<T: Pod> Drop for StepBuffer<'_, T> {
    /// In a capture, records the free node (the buffer itself frees nothing then); eagerly,
    /// the buffer's own drop frees it in stream order.
    fn drop(&mut self) {
        if let Some((stream, failed)) = self.capture {
            if let Err(e) = self.buffer.free_captured(stream) {
                failed.borrow_mut().get_or_insert(e);
            }
        }
    }
}

impl<'a> StepScope<'a> {
    pub(super) fn new(
        run: Run<'a>,
        params: &'a StepParams,
        stand_ins: Option<&'a [Bound]>,
    ) -> Self {
        Self {
            run,
            params,
            stand_ins,
            refused: Cell::new(None),
            after_refresh: Cell::new(true),
            launched: RefCell::new(Vec::new()),
            collectives: Cell::new(false),
            failed_free: RefCell::new(None),
        }
    }

    /// The step's stream.
    pub fn stream(&self) -> &Stream {
        match &self.run {
            Run::Eager(s) => s,
            Run::Capture(c) => c.stream(),
        }
    }

    /// Whether this run is being captured (rather than run eagerly).
    pub fn is_capturing(&self) -> bool {
        matches!(self.run, Run::Capture(_))
    }

    /// The buffer bound to `param` for this run: another handle on the same allocation (in the
    /// second capture, which graph-rt makes to find where the step's kernels take their
    /// buffers, a stand-in of the same length). Use it for this run only.
    pub fn buffer<T: Pod>(&self, param: &Buf<T>) -> Result<DeviceBuffer<T>> {
        const CALL: &str = "StepScope::buffer";
        let index = self.params.index(param, CALL)?;
        let Some(bound) = self.bound_at(index) else {
            return Err(Error::misuse(
                CALL,
                Misuse::Unbound { slot: index },
                format!("declared buffer {index} is not bound"),
            ));
        };
        match bound.buffer.downcast_ref::<DeviceBuffer<T>>() {
            Some(b) => Ok(b.alias()),
            None => Err(Error::misuse(
                CALL,
                Misuse::UnknownParam,
                "the parameter's element type is not the one it was declared with",
            )),
        }
    }

    /// Allocates `len` uninitialised elements for this run of the closure (see [`StepBuffer`]):
    /// eagerly a stream-ordered allocation of the step's stream ([`DeviceBuffer::alloc_async`]),
    /// in a capture an allocation node of the step's graph (`cuMemAllocAsync` on the capturing
    /// stream), freed by the free node recorded when the buffer drops. Drop it before the
    /// closure returns: a capture that keeps an allocation past its end (a forgotten buffer) is
    /// refused ([`Misuse::AllocationKept`]) and the step runs eagerly. The memory is valid during
    /// the run only; what a step hands out is a declared buffer.
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<StepBuffer<'_, T>> {
        match &self.run {
            Run::Eager(s) => Ok(StepBuffer {
                buffer: DeviceBuffer::alloc_async(s, len)?,
                capture: None,
            }),
            Run::Capture(c) => Ok(StepBuffer {
                buffer: DeviceBuffer::alloc_captured(c.stream(), len)?,
                capture: Some((c.stream(), &self.failed_free)),
            }),
        }
    }

    /// What declared buffer `index` is bound to for this run (a stand-in in the second capture).
    fn bound_at(&self, index: usize) -> Option<&Bound> {
        match self.stand_ins {
            Some(s) => s.get(index),
            None => self.params.params.get(index)?.bound.as_ref(),
        }
    }

    /// Notes a launch of one of graph-rt's kernels, in a capture (what the step's choice of
    /// mix reads; an eager run, every call of an eager step, notes nothing).
    fn note(&self, launched: impl FnOnce() -> Launched) {
        if self.is_capturing() {
            self.launched.borrow_mut().push(launched());
        }
    }

    /// The configuration of the next eager kernel: the first after the refresh not
    /// programmatic.
    fn eager_config(&self, config: &LaunchConfig) -> LaunchConfig {
        if self.after_refresh.replace(false) {
            config.without_programmatic()
        } else {
            *config
        }
    }

    /// Launches (eagerly) or records (in a capture) `f` over `args`, as
    /// [`Stream::launch`] and [`CaptureScope::launch`]. Its buffer arguments taken from
    /// [`StepScope::buffer`] are rebound on every call by the in-graph prelude.
    ///
    /// # Safety
    /// As [`Stream::launch`], for this run and every replay.
    pub unsafe fn launch<A: KernelArgs>(
        &self,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        self.note(|| Launched {
            function: f.as_raw() as usize,
            table_form: false,
        });
        match &self.run {
            // SAFETY: forwarded to the caller.
            Run::Eager(s) => unsafe { s.launch(f, &self.eager_config(config), args) },
            // SAFETY: forwarded to the caller.
            Run::Capture(c) => unsafe { c.launch(f, config, args) }.map(drop),
        }
    }

    /// Launches or records a table-form kernel; its slot arguments (from [`Buf::slot`] and
    /// [`Scalar::slot`](super::Scalar::slot)) follow every rebinding with no patching.
    ///
    /// # Safety
    /// As [`TableKernel::launch`], for this run and every replay.
    pub unsafe fn launch_table(
        &self,
        kernel: &TableKernel,
        config: &LaunchConfig,
        args: impl KernelArgs,
    ) -> Result<()> {
        self.note(|| Launched {
            function: kernel.function().as_raw() as usize,
            table_form: true,
        });
        match &self.run {
            // SAFETY: forwarded to the caller.
            Run::Eager(s) => unsafe { kernel.launch(s, &self.eager_config(config), args) },
            // SAFETY: forwarded to the caller.
            Run::Capture(c) => unsafe { kernel.record(c, config, args) }.map(drop),
        }
    }

    /// Launches or records a Triton kernel over a grid of `grid` programs.
    ///
    /// # Safety
    /// As [`TritonKernel::launch`], for this run and every replay.
    pub unsafe fn launch_triton(
        &self,
        kernel: &TritonKernel,
        grid: [u32; 3],
        args: &[TritonArg<'_>],
    ) -> Result<()> {
        self.note(|| Launched {
            function: kernel.function().as_raw() as usize,
            table_form: kernel.params().iter().any(|p| p.slot),
        });
        match &self.run {
            Run::Eager(s) => {
                if self.after_refresh.replace(false) {
                    // SAFETY: forwarded to the caller.
                    unsafe { kernel.launch_after_refresh(s, grid, args) }
                } else {
                    // SAFETY: forwarded to the caller.
                    unsafe { kernel.launch(s, grid, args) }
                }
            }
            // SAFETY: forwarded to the caller.
            Run::Capture(c) => unsafe { kernel.record(c, grid, args) }.map(drop),
        }
    }

    /// Runs `gemms`, GEMMs of `blas` (a handle on the step's stream): eagerly, or recorded into
    /// the capture with their buffers and workspace kept alive ([`Cublas::record`]). Their
    /// buffers taken from [`StepScope::buffer`] are rebound on every call by the prelude.
    pub fn cublas<R>(&self, blas: &Cublas, gemms: impl FnOnce(&Cublas) -> Result<R>) -> Result<R> {
        self.after_refresh.set(false);
        match &self.run {
            Run::Eager(_) => gemms(blas),
            Run::Capture(c) => blas.record(c, gemms),
        }
    }

    /// Runs `calls`, collectives of `comm` on the step's stream: eagerly, or recorded into the
    /// capture with their buffers and the communicator kept alive ([`Communicator::record`]).
    /// Their buffers taken from [`StepScope::buffer`] are rebound on every call by the prelude,
    /// as cuBLAS's (NCCL's ring and tree kernels take their buffers as kernel parameters). Every
    /// rank's step must make the same collectives in the same order, each call.
    pub fn nccl<R>(
        &self,
        comm: &Communicator,
        calls: impl FnOnce(&Communicator) -> Result<R>,
    ) -> Result<R> {
        self.after_refresh.set(false);
        self.collectives.set(true);
        match &self.run {
            Run::Eager(_) => calls(comm),
            Run::Capture(c) => comm.record(c, calls),
        }
    }

    /// Copies `src` into `dst` (same lengths) on the step's stream: a copy node in the graph,
    /// which each call points at the buffers its declared parameters are bound to then (one
    /// driver call before the launch, for each copy whose buffers changed).
    pub fn copy<T: Pod>(&self, dst: &mut DeviceBuffer<T>, src: &DeviceBuffer<T>) -> Result<()> {
        self.after_refresh.set(false);
        match &self.run {
            Run::Eager(s) => {
                // SAFETY: both buffers' allocations are kept until the copy has run (below).
                unsafe { dst.copy_from_device_async(src, s)? };
                let keep: Vec<Parked> = vec![
                    Box::new(dst.allocation().clone()),
                    Box::new(src.allocation().clone()),
                ];
                s.ctx_inner().tracker.park(&s.shared(), keep)
            }
            Run::Capture(c) => c.copy(dst, src).map(drop),
        }
    }

    /// A call a capture refuses: noted in an eager run (the step then runs eagerly, and says
    /// why), refused in a capture.
    fn refuse(&self, call: &'static str) -> Result<()> {
        match self.run {
            Run::Eager(_) => {
                if self.refused.get().is_none() {
                    self.refused.set(Some(call));
                }
                Ok(())
            }
            Run::Capture(_) => Err(Error::misuse(
                call,
                Misuse::CaptureRefused { call },
                "a capture cannot synchronize, read to the host or upload from it",
            )),
        }
    }

    /// Waits for the step's stream. A capture refuses it: a step whose closure calls this runs
    /// eagerly ([`StepMode::Eager`](super::StepMode::Eager) says so).
    pub fn synchronize(&self) -> Result<()> {
        self.refuse("StepScope::synchronize")?;
        self.stream().synchronize()
    }

    /// Reads `buffer` to the host after the work queued so far. A capture refuses it, as
    /// [`StepScope::synchronize`].
    pub fn read<T: Pod>(&self, buffer: &DeviceBuffer<T>) -> Result<Vec<T>> {
        self.refuse("StepScope::read")?;
        buffer.read_on(self.stream())
    }

    /// Writes `src` into `dst` in stream order. A capture refuses it (the host memory would be
    /// read at every replay, not now), as [`StepScope::synchronize`].
    pub fn upload<T: Pod>(&self, dst: &mut DeviceBuffer<T>, src: &[T]) -> Result<()> {
        self.refuse("StepScope::upload")?;
        dst.write_on(self.stream(), src)
    }
}
