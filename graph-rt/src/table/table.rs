//! The table, its slots and bindings, the ring of host mirrors, and launches that read it.
//!
//! Layout: slot `i` is the 8-byte word `i` of a table in device memory. Bindings are written on
//! the host into a staging copy (the [`Ledger`]); each launch writes into one of `depth` mirrors
//! in mapped host memory the words bound since that mirror was last written, and launches a graph
//! whose first node, the shipped `table_refresh` kernel, copies the mirror into the device table
//! (spread over as many blocks as the table needs). Launches are numbered; launch
//! `s` uses mirror `s % depth`, and its refresh writes `s + 1` into acknowledgement word
//! `s % depth` (mapped host memory) once it has read the mirror. A mirror is rewritten only
//! after its previous launch's acknowledgement: rebinding while earlier launches are in flight
//! is correct by construction. When every mirror is in flight, the launch spins on the oldest
//! acknowledgement (counted in [`TableStats::waits`]).
//!
//! A refresh runs only after all earlier work of its stream has finished, so the acknowledgement
//! of launch `s` also proves that every launch before `s` has finished: bindings replaced before
//! launch `s` are retired on the table's lane of the context's lifetime tracker behind `s` on
//! the table's timeline of launches, and released once an acknowledgement shows it, with no
//! event or driver call.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytemuck::Pod;
use graph_rt_sys::CUcontext;

use super::ledger::{Ledger, Replaced};
use super::order::Waits;
use super::refresh::RefreshArgs;
use super::set::{Layout, SetKeep};
use super::slot::{PtrSlot, ScalarSlot, SlotScalar};
use super::timeline::Timeline;
use crate::driver::{
    Allocation, CaptureStatus, Context, DeviceBuffer, Function, Lane, MappedHostBuffer, Module,
    Stream, StreamInner,
};
use crate::error::{Error, Misuse, Result};
use crate::graph::{CaptureScope, CapturedNode, GraphExec};
use crate::launch::LaunchConfig;

/// How a table is made.
#[derive(Debug, Clone, Copy)]
pub struct TableOptions {
    /// Slots the table holds at most (8 bytes each).
    pub capacity: usize,
    /// Host mirrors in the ring: how many launches may be in flight before a launch waits.
    pub depth: usize,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            capacity: 1024,
            depth: 4,
        }
    }
}

/// What a table did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Launches (and eager refreshes) through the table.
    pub launches: u64,
    /// Launches that found every mirror in flight and waited for the oldest acknowledgement.
    pub waits: u64,
    /// Bindings made.
    pub binds: u64,
}

/// What the table's slots and graphs share: the device table, the mirrors, the counters. Graphs
/// that read the table keep it alive.
pub(crate) struct Shared {
    pub(crate) table: DeviceBuffer<u64>,
    // The refreshes counted, and the blocks of the running refresh that finished reading.
    seq: DeviceBuffer<u64>,
    mirrors: MappedHostBuffer<u64>,
    pub(crate) acks: MappedHostBuffer<u64>,
    pub(crate) refresh: Function,
}

/// `words` rounded up to whole 64-byte blocks of eight words.
#[inline]
pub(super) fn padded(words: usize) -> usize {
    words.div_ceil(8) * 8
}

/// An allocation's identity: the address of its shared state (never 0).
#[inline]
pub(super) fn key_of(alloc: &Arc<Allocation>) -> usize {
    Arc::as_ptr(alloc) as usize
}

/// Identifies tables for slots and graphs; never reused.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// Marks the launch key of a graph whose foreign nodes a host-mode prelude rewrites before each
/// launch (see `ArgTable::host_patched_key`); table ids never reach this bit.
pub(super) const HOST_PATCHED: u64 = 1 << 63;

/// A device-resident argument table: kernels in table form read their pointers and scalars from
/// its slots, so a graph captured once is rebound to new buffers and values by host writes.
///
/// Kernels in table form ([`TableKernel`](crate::table::TableKernel), made by the PTX pass) take slot
/// addresses ([`PtrSlot`], [`ScalarSlot`]) where the plain form takes buffers and values. A
/// graph that reads the table begins with [`ArgTable::record_refresh`] and is launched with
/// [`ArgTable::launch`]; eager launches follow [`ArgTable::refresh`].
///
/// * **Binding** ([`bind`](ArgTable::bind), [`bind_view`](ArgTable::bind_view),
///   [`set_scalar`](ArgTable::set_scalar), the unsafe [`bind_raw`](ArgTable::bind_raw)) is a
///   host write and bookkeeping, no driver call. It checks the slot's table, the element type
///   (the slot's `T`), the context, the alignment and the minimum length the slot declares; an
///   error changes nothing. Each launch reads the bindings made before it, whatever launches
///   are still in flight.
/// * **Refresh**: a launch copies the bindings into the next of `depth` mirrors in mapped host
///   memory; the graph's first node, the shipped `table_refresh` kernel, copies that mirror
///   into the device table and acknowledges it by writing the launch's number into mapped host
///   memory; the next kernel waits for it fully (no programmatic edge). A mirror is rewritten
///   only after the device acknowledged reading it. When all `depth` mirrors are in flight, the
///   launch spins on the oldest acknowledgement (yielding the thread every 1,024 polls), counted
///   in [`TableStats::waits`]; it gives up with an error if the stream goes idle without the
///   acknowledgement (a graph that refreshes the table was launched another way, or a launch
///   failed) or after 60 s.
/// * **Retention**: a buffer bound to a slot stays alive until every launch that may read it has
///   finished, whatever the caller drops. A slot remembers its current binding and the three
///   before it (so rebinding among up to four buffers a slot — double or triple buffering —
///   costs no reference counting; a binding new to its slot costs one count, and the one it
///   evicts one more, later); evicted ones are released once the launches made before their
///   eviction have finished (known from the acknowledgements the launch path reads, no event;
///   a dropped table lets go of them with itself, after its last launch). [`ArgTable::trim`]
///   lets go of the earlier ones.
/// * **Streams**: every launch and refresh through one table goes to one stream, the first one
///   used; another stream is refused ([`Misuse::OtherStream`](crate::Misuse::OtherStream)),
///   since the stream's order is what keeps each launch's bindings its own. Use one table per
///   stream. Execs and eager launches may share a table on that stream.
/// * **Errors**: misuse is an [`Error::Misuse`] whose [`Misuse`](crate::Misuse) says which
///   (another table's slot, a misaligned or short buffer, an unbound slot, a capturing stream,
///   ...), to match on; the message says it in words.
///
/// ```no_run
/// # use graph_rt::*;
/// # use graph_rt::table::*;
/// # fn main() -> Result<()> {
/// let ctx = Context::new(0)?;
/// let stream = Stream::new(&ctx)?;
/// let chain = graph_rt_kernels::CHAIN.ptx; // graph_rt::kernels::CHAIN in the `graph-rt` crate
/// let add1 = TableKernel::load(&ctx, chain, "add1", &ptx::Options::default())?;
/// let mut table = ArgTable::new(&ctx, TableOptions::default())?;
/// let (x, y) = (table.ptr_slot::<f32>()?, table.ptr_slot::<f32>()?);
/// let exec = stream
///     .capture(CaptureMode::Global, |s| {
///         table.record_refresh(s)?;
///         // SAFETY: add1 reads 1024 floats through x and writes 1024 through y.
///         unsafe { add1.record(s, &LaunchConfig::for_elements(1024, 256), (&x, &y, 1024i32))? };
///         Ok(())
///     })?
///     .instantiate()?;
/// for step in 0..10 {
///     let input = DeviceBuffer::from_host(&ctx, &vec![step as f32; 1024])?;
///     let output = DeviceBuffer::<f32>::alloc(&ctx, 1024)?;
///     table.bind(&x, &input)?;
///     table.bind(&y, &output)?;
///     table.launch(&exec, &stream)?; // no copy; a capture-status query and the launch
/// }
/// stream.synchronize()?;
/// # Ok(())
/// # }
/// ```
// `repr(C)`, the fields in this order: what every launch reads comes first, with the ledger's
// own first fields (its launch count and what it checks), so that a launch with nothing rebound
// reads two or three cache lines of the table rather than one here and one there (the host's
// caches are often cold between a model's steps).
#[repr(C)]
pub struct ArgTable {
    pub(super) id: u64,
    // `ctx`'s raw handle, which the launch path compares with the stream's without reaching the
    // context's shared state.
    pub(super) ctx_raw: CUcontext,
    pub(super) stream: Option<Arc<StreamInner>>,
    pub(super) stats: TableStats,
    // The bindings, what they keep alive, what each mirror lacks, the launch count.
    pub(super) ledger: Ledger<Arc<Allocation>, SetKeep>,
    // What launches replaced, retired behind counts of the table's timeline of launches.
    pub(super) lane: Lane<Replaced<Arc<Allocation>, SetKeep>>,
    pub(super) timeline: Arc<Timeline>,
    pub(super) shared: Arc<Shared>,
    pub(super) ctx: Context,
    pub(super) capacity: usize,
    // The slot lists of the binding sets made so far (sets over the same slots share one).
    pub(super) layouts: Vec<std::sync::Weak<Layout>>,
    pub(super) sealed: bool,
    // Streams of stream-ordered buffers bound since the last launch, which it waits for.
    pub(super) waits: Waits,
}

impl std::fmt::Debug for ArgTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgTable")
            .field("slots", &self.ledger.words.len())
            .field("depth", &self.ledger.depth())
            .field("stats", &self.stats())
            .finish()
    }
}

impl ArgTable {
    /// A table of up to `options.capacity` slots with a ring of `options.depth` mirrors, in
    /// `ctx`. Loads the shipped `table_refresh` kernel.
    pub fn new(ctx: &Context, options: TableOptions) -> Result<Self> {
        const CALL: &str = "ArgTable::new";
        let range = "capacity and depth must be at least 1 (capacity below 2^32 - 7)";
        if options.capacity == 0 || options.depth == 0 {
            let what = if options.capacity == 0 {
                "capacity"
            } else {
                "depth"
            };
            return Err(Error::misuse(CALL, Misuse::Zero { what }, range));
        }
        if options.capacity > (u32::MAX - 7) as usize {
            let too_large = Misuse::TooLarge { what: "capacity" };
            return Err(Error::misuse(CALL, too_large, range));
        }
        // Mirrors and the device table in whole 64-byte blocks: a mirror is written a block at a
        // time, each block one cache line.
        let padded = padded(options.capacity);
        let refresh =
            Module::from_ptx(ctx, graph_rt_kernels::TABLE.ptx)?.function("table_refresh")?;
        let mirror_words = padded.checked_mul(options.depth).ok_or_else(|| {
            let too_large = Misuse::TooLarge { what: "depth" };
            Error::misuse(CALL, too_large, "capacity × depth overflows")
        })?;
        let shared = Shared {
            table: DeviceBuffer::zeroed(ctx, padded)?,
            seq: DeviceBuffer::zeroed(ctx, 2)?,
            mirrors: MappedHostBuffer::zeroed(ctx, mirror_words)?,
            acks: MappedHostBuffer::zeroed(ctx, options.depth)?,
            refresh,
        };
        let shared = Arc::new(shared);
        Ok(Self {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            ctx: ctx.clone(),
            timeline: Timeline::new(),
            lane: Lane::new(&ctx.inner),
            shared,
            capacity: options.capacity,
            ledger: Ledger::new(options.depth),
            layouts: Vec::new(),
            sealed: false,
            waits: Waits::default(),
            stream: None,
            stats: TableStats::default(),
            ctx_raw: ctx.as_raw(),
        })
    }

    fn add_slot(&mut self) -> Result<u32> {
        const CALL: &str = "ArgTable::slot";
        if self.sealed {
            return Err(Error::misuse(
                CALL,
                Misuse::TableSealed,
                "slots are added before the first refresh is recorded or launched (the refresh copies the slots that exist then)",
            ));
        }
        if self.ledger.words.len() == self.capacity {
            return Err(Error::misuse(
                CALL,
                Misuse::TableFull {
                    capacity: self.capacity,
                },
                format!("the table is full ({} slots)", self.capacity),
            ));
        }
        // capacity ≤ u32::MAX (checked in `new`).
        Ok(self.ledger.push_slot() as u32)
    }

    /// A new pointer slot for `T` elements, bound to addresses aligned to 16 bytes (what
    /// compiled kernels vectorize on) and buffers of any length.
    pub fn ptr_slot<T: Pod>(&mut self) -> Result<PtrSlot<T>> {
        self.ptr_slot_with(16, 0)
    }

    /// A new pointer slot for `T` elements, bound to addresses aligned to `align` bytes (a power
    /// of two, at least `T`'s alignment) and buffers of at least `min_len` elements.
    pub fn ptr_slot_with<T: Pod>(&mut self, align: usize, min_len: usize) -> Result<PtrSlot<T>> {
        if !align.is_power_of_two() || align < std::mem::align_of::<T>() || align > 1 << 31 {
            return Err(Error::misuse(
                "ArgTable::ptr_slot",
                Misuse::NotPowerOfTwo { align },
                format!(
                    "alignment {align} is not a power of two of at least the element's alignment"
                ),
            ));
        }
        let index = self.add_slot()?;
        Ok(PtrSlot {
            table: self.id,
            index,
            align: align as u32,
            min_len,
            keep: self.shared.clone(),
            _t: PhantomData,
        })
    }

    /// A new scalar slot for a `T` (an integer or a float of at most 8 bytes): table-form
    /// kernels check at launch that the parameter they read through it is of `T`'s kind.
    pub fn scalar_slot<T: SlotScalar>(&mut self) -> Result<ScalarSlot<T>> {
        self.scalar_slot_with(1)
    }

    /// A new scalar slot for an integer `T` of at most 8 bytes whose every value is a multiple
    /// of `multiple_of` (a power of two): [`ArgTable::set_scalar`] refuses other values. For
    /// kernels compiled on that assumption (Triton specializes integers divisible by 16).
    pub fn scalar_slot_with<T: SlotScalar>(&mut self, multiple_of: u32) -> Result<ScalarSlot<T>> {
        if !multiple_of.is_power_of_two() {
            return Err(Error::misuse(
                "ArgTable::scalar_slot",
                Misuse::NotPowerOfTwo {
                    align: multiple_of as usize,
                },
                format!("{multiple_of} is not a power of two"),
            ));
        }
        if std::mem::size_of::<T>() > 8 {
            return Err(Error::misuse(
                "ArgTable::scalar_slot",
                Misuse::TooLarge { what: "scalar" },
                format!(
                    "a scalar slot holds 8 bytes; the type has {}",
                    std::mem::size_of::<T>()
                ),
            ));
        }
        let index = self.add_slot()?;
        Ok(ScalarSlot {
            table: self.id,
            index,
            multiple_of,
            keep: self.shared.clone(),
            _t: PhantomData,
        })
    }

    /// What the table did.
    pub fn stats(&self) -> TableStats {
        TableStats {
            binds: self.ledger.binds,
            ..self.stats
        }
    }

    /// Bytes the table holds: of device memory (its words and counters) and of mapped host
    /// memory (its mirrors and acknowledgements).
    pub fn memory_bytes(&self) -> (u64, u64) {
        let s = &self.shared;
        let bytes = |words: usize| (words * std::mem::size_of::<u64>()) as u64;
        (
            bytes(s.table.len() + s.seq.len()),
            bytes(s.mirrors.len() + s.acks.len()),
        )
    }

    /// Slots made so far.
    pub fn len(&self) -> usize {
        self.ledger.words.len()
    }

    /// Whether the table has no slots.
    pub fn is_empty(&self) -> bool {
        self.ledger.words.is_empty()
    }

    pub(crate) fn refresh_args(&self) -> RefreshArgs {
        let s = &self.shared;
        RefreshArgs {
            mirrors: s.mirrors.device_ptr(),
            table: s.table.as_raw(),
            // The mirror stride and the words copied: whole blocks (the padding is zeros).
            words: padded(self.ledger.words.len()) as u32,
            depth: self.ledger.depth() as u32,
            seq: s.seq.as_raw(),
            acks: s.acks.device_ptr(),
        }
    }

    /// The blocks of 256 threads the refresh of the table's slots is launched with: one per
    /// 1,024 words (four in flight per thread), at most 1,024 blocks (more words loop).
    pub(crate) fn refresh_blocks(&self) -> u32 {
        self.ledger.words.len().div_ceil(1024).clamp(1, 1024) as u32
    }

    /// Records the table's refresh as the next node of a capture: the graph then begins by
    /// copying the launch's bindings into the device table, and the next kernel it launches waits
    /// for it fully (no programmatic edge). Record it first, once per graph; launch the graph with
    /// [`ArgTable::launch`].
    pub fn record_refresh(&mut self, scope: &CaptureScope<'_>) -> Result<CapturedNode> {
        self.sealed = true;
        let args = self.refresh_args().params();
        let config = LaunchConfig::new(self.refresh_blocks(), 256u32);
        // SAFETY: table_refresh reads `depth` mirrors of `words` words, writes `words` words of
        // the device table, two counter words and `depth` acknowledgement words, all of which
        // the table holds (and the graph keeps alive below); any grid of 256-thread blocks.
        let node = unsafe { scope.launch(&self.shared.refresh, &config, args)? };
        scope.keep_alive(self.shared.clone());
        scope.require_launcher(self.id, "ArgTable::record_refresh")?;
        Ok(node)
    }

    /// Launches `exec`, which must begin with this table's refresh, with the bindings made so
    /// far: copies them into the next mirror (after waiting for its previous launch's
    /// acknowledgement if every mirror is in flight) and launches. Driver calls: a query of the
    /// stream's capture status (a launch captured now would run its refresh at replay, out of
    /// the table's count) and the launch.
    pub fn launch(&mut self, exec: &GraphExec, stream: &Stream) -> Result<()> {
        const CALL: &str = "ArgTable::launch";
        if exec.launch_key() == Some(self.host_patched_key()) {
            return Err(Error::misuse(
                CALL,
                Misuse::NotThroughTable,
                "a Prelude in host mode rewrites this graph's foreign nodes before each launch: launch it with Prelude::launch",
            ));
        }
        if exec.launch_key() != Some(self.id) {
            return Err(Error::misuse(
                CALL,
                Misuse::NotThroughTable,
                "the exec does not refresh this table (record_refresh in its capture)",
            ));
        }
        self.launch_checked(exec, stream, CALL)
    }

    /// [`ArgTable::launch`] of an exec whose foreign nodes a host-mode prelude has just
    /// rewritten from this table's bindings (`Prelude::launch`).
    pub(crate) fn launch_host_patched(&mut self, exec: &GraphExec, stream: &Stream) -> Result<()> {
        const CALL: &str = "Prelude::launch";
        if exec.launch_key() != Some(self.host_patched_key()) {
            return Err(Error::misuse(
                CALL,
                Misuse::NotThroughTable,
                "the exec's graph is not the one this prelude was installed in on the host",
            ));
        }
        self.launch_checked(exec, stream, CALL)
    }

    fn launch_checked(
        &mut self,
        exec: &GraphExec,
        stream: &Stream,
        call: &'static str,
    ) -> Result<()> {
        self.stage(stream, call)?;
        exec.launch_unchecked(stream)?;
        self.launched();
        Ok(())
    }

    /// Refreshes the device table on `stream` with the bindings made so far, for kernels
    /// launched eagerly after it (the first of which must not be launched programmatically: it
    /// reads what the refresh writes).
    pub fn refresh(&mut self, stream: &Stream) -> Result<()> {
        self.sealed = true;
        self.stage(stream, "ArgTable::refresh")?;
        let args = self.refresh_args().params();
        let config = LaunchConfig::new(self.refresh_blocks(), 256u32);
        // SAFETY: as in record_refresh; the table lives while a launch may use it (drop parks it).
        unsafe { stream.launch(&self.shared.refresh, &config, args)? };
        self.launched();
        Ok(())
    }

    /// Checks the launch and writes the bindings into the next mirror.
    fn stage(&mut self, stream: &Stream, call: &'static str) -> Result<()> {
        if stream.context_raw() != self.ctx_raw {
            return Err(Error::misuse(
                call,
                Misuse::OtherContext,
                "the stream belongs to another context than the table",
            ));
        }
        // A launch or refresh captured now would run later, at replay, while this staged a
        // mirror for it now: the device's count of refreshes would leave the host's.
        if stream.capture_status()? != CaptureStatus::None {
            return Err(Error::misuse(
                call,
                Misuse::Capturing,
                "the stream is capturing: record the refresh with record_refresh and launch the graph with ArgTable::launch after the capture",
            ));
        }
        if self
            .stream
            .as_ref()
            .is_some_and(|s| s.raw() != stream.as_raw())
        {
            return Err(Error::misuse(
                call,
                Misuse::OtherStream,
                "all launches through a table go to one stream (its refreshes are ordered by it)",
            ));
        }
        if self.ledger.unbound > 0 {
            let first = self.ledger.first_unbound().unwrap_or(0);
            return Err(Error::misuse(
                call,
                Misuse::Unbound { slot: first },
                format!("slot {first} is not bound"),
            ));
        }
        let (mirror, wait) = self.ledger.next_mirror();
        if let Some(at_least) = wait {
            let ack = self.latest_ack(at_least, mirror, stream)?;
            self.ledger.acknowledged(ack);
            self.timeline.seen(ack);
        }
        // The table's stream is the first one a launch was staged for.
        if self.stream.is_none() {
            self.stream = Some(stream.shared());
        }
        self.wait_for_allocations(stream)?;
        if !self.ledger.pending() {
            // Nothing bound since the mirror was written: it holds every binding, and nothing
            // of it (nor of the windows of changes) is touched. The first launch staged always.
            return Ok(());
        }
        // Mirror `m` holds the slots' words at `m × slots` (the refresh kernel's layout; the
        // slots are fixed once a refresh exists).
        let n = padded(self.ledger.words.len());
        let base = mirror * n;
        debug_assert!(base + n <= self.shared.mirrors.len());
        // SAFETY: words `base..base + n` are inside the mirrors (padded capacity × depth words,
        // n ≤ padded capacity), and the device neither reads nor writes this mirror now: its previous launch
        // has acknowledged reading it (above), and the next reads it only after the launch
        // below; no other reference to it exists while the slice lives.
        let words =
            unsafe { std::slice::from_raw_parts_mut(self.shared.mirrors.as_ptr().add(base), n) };
        self.ledger.stage(words);
        // The mirror's words reach memory before the launch that reads them.
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }
}
