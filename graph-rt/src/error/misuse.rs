//! The misuses graph-rt names: what [`Error::Misuse`](super::Error::Misuse) carries.

/// The misuses graph-rt names (in [`Error::Misuse`](super::Error::Misuse)), for callers and
/// tests to match on: each says what was wrong and what to do instead (the error's `reason`
/// says it in words, with the values involved).
///
/// Grouped by meaning: objects that do not belong together; the state of graphs, execs and
/// nodes; captures and streams; counts, sizes and values; argument tables and slots; kernels,
/// their arguments and signatures; cuBLAS GEMMs; inputs read from files and discoveries; the
/// device; steps.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Misuse {
    // Objects that do not belong together.
    /// A slot, binding set or exec of another argument table (or a table other than the one a
    /// prelude reads): use the table the object was made by.
    OtherTable,
    /// A buffer or stream of another context than the object it is used with: use one of the
    /// same context.
    OtherContext,
    /// Work on another stream than the one the object is tied to: a table launched or refreshed
    /// on another stream than the one it first used, a cuBLAS handle recorded into the capture
    /// of another stream than its own. Use that stream.
    OtherStream,
    /// Snapshots, nodes, execs or words of another graph than the one they are used with (or of
    /// a graph that is gone): use the graph's own (for a clone, [`Graph::node_in_clone`]; for a
    /// capture, [`Graph::node`] of the graph captured into).
    ///
    /// [`Graph::node_in_clone`]: crate::Graph::node_in_clone
    /// [`Graph::node`]: crate::Graph::node
    OtherGraph,
    /// A node of a graph the exec was updated from that has no counterpart in the exec: name a
    /// node of the graph the exec runs now.
    NoCounterpart,
    /// A table's exec launched another way than through its table, or a table launched with an
    /// exec that does not refresh it.
    NotThroughTable,
    /// An exec updated from another graph since its instantiation, where what is used was made
    /// for the graph it was instantiated from.
    ExecUpdated,
    /// A stream-ordered buffer of another stream that nothing can order before the work now
    /// (that stream is capturing).
    UnorderedBuffer,

    // The state of graphs, execs and nodes.
    /// A graph a failed capture into left undefined (CUDA): only dropping it is allowed.
    GraphBroken,
    /// A node of another kind than the call needs (e.g. not a kernel node where kernel
    /// parameters are changed): name a node of that kind.
    WrongNodeKind,
    /// A kernel node whose function graph-rt did not launch (another library's node, or one made
    /// by raw driver calls), so graph-rt does not know its parameters: record the kernel through
    /// a capture scope or [`Graph::add_kernel`](crate::Graph::add_kernel), or change the node
    /// through the driver.
    ForeignKernel,
    /// A graph that already has an exec where the call needs none, or allows one at a time: a
    /// prelude is installed before instantiating, and a graph with device-updatable kernel nodes
    /// has one exec at a time (CUDA). Drop the exec first, or install before instantiating.
    ExecExists,
    /// A graph with device-updatable kernel nodes (an in-graph prelude patches them), which CUDA
    /// does not clone, update as a whole or patch from the host, and which holds one prelude:
    /// launch it through its [`Prelude`](crate::foreign::Prelude), or capture the graph again.
    DeviceUpdatable,
    /// A graph that would refresh argument tables more than once (another table, the same table
    /// again, or a child graph that refreshes one in a graph that does too): a graph refreshes
    /// one table, once.
    SecondRefresh,
    /// A graph that does not run the table's refresh (exactly once) where it must.
    NoRefresh,
    /// A table's refresh that is not the graph's first node where it must be.
    RefreshNotFirst,
    /// A capture scope's call made from inside [`KernelArg::retain`](crate::KernelArg::retain)
    /// of one of its own launches: `retain` only records what to keep alive.
    Reentrant,

    // Captures and streams.
    /// A call that cannot be made while the stream captures: its effect would happen at
    /// replay rather than now, or it allocates, synchronizes or keeps nothing alive, which a
    /// capture cannot hold. Make the call before or after the capture, or use what the reason
    /// names instead (e.g. [`Graph::add_mem_alloc`](crate::Graph::add_mem_alloc),
    /// `Cublas::record`, reserving Triton's scratch memory before capturing).
    Capturing,
    /// The legacy default stream (the null handle, `CU_STREAM_LEGACY`) or the per-thread default
    /// stream (`CU_STREAM_PER_THREAD`), which cannot be captured: use a stream of your own
    /// (`Stream::new`, or another library's created stream).
    DefaultStream,
    /// A null handle where a live one of another library was expected (a cuBLAS handle lent
    /// with `Cublas::borrow_raw`): pass the live handle.
    NullHandle,
    /// A step's closure made a call through its scope that a capture refuses (a
    /// synchronization, a host read, an upload): the step runs eagerly, or make the call
    /// outside the step.
    CaptureRefused {
        /// The scope's call.
        call: &'static str,
    },

    // Counts, sizes and values.
    /// A copy between two sides of different lengths (elements): give sides of one length.
    LengthMismatch {
        /// This side's elements (the buffer or view; a copy's destination).
        ours: usize,
        /// The other side's.
        theirs: usize,
    },
    /// Two lists that pair up one to one have different lengths (dependency sources and
    /// targets, slots and dynamic buffers, addresses and dynamic buffers, arguments and
    /// parameters, divisibility flags and parameters): give as many of each.
    CountMismatch {
        /// How many the call expects (the targets, the buffers, the parameters).
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// A range that is not within the buffer or view.
    OutOfRange {
        /// The buffer's or view's elements.
        len: usize,
    },
    /// Fewer elements than needed: than a slot declares, or than a GEMM's operand spans. Give a
    /// longer buffer (or smaller dimensions).
    TooShort {
        /// The elements given.
        len: usize,
        /// The elements needed at least.
        min: usize,
    },
    /// An operation on no elements (an empty buffer, a grid of no program, an allocation of no
    /// byte), which would make no graph node or no allocation: skip the call, or give at least
    /// one element.
    Empty,
    /// A count, dimension or list that is zero (or empty, or below 1) where the call needs at
    /// least one: a GEMM dimension, leading dimension or batch, a table's capacity or depth,
    /// calibration sizes or rounds. Give at least 1.
    Zero {
        /// What is zero, as the reason names it (e.g. `k`, `ldc`, `batch`, `rounds`).
        what: &'static str,
    },
    /// A size, count, dimension or index larger than the call takes: beyond the integer the
    /// driver or cuBLAS takes, beyond `usize` (elements × element size, a batch's extent),
    /// or beyond a limit graph-rt or CUDA sets (a table's capacity, eight launch attribute
    /// kinds, 8-byte scalar slots, 256-byte scratch alignment). Use smaller values.
    TooLarge {
        /// What is too large, as the reason names it (e.g. `m`, `lda`, `A`, `bytes`).
        what: &'static str,
    },
    /// Arguments beyond the bytes any kernel takes.
    ArgumentsTooLarge {
        /// The bytes the arguments would take.
        bytes: usize,
        /// The most a kernel takes.
        max: usize,
    },
    /// An alignment or multiple that is not a power of two (or, for a pointer slot, below the
    /// element's alignment or above 2^31): give a power of two in range.
    NotPowerOfTwo {
        /// The alignment (or multiple) given.
        align: usize,
    },
    /// A value that is not a multiple of what it must be: a scalar a slot takes only multiples
    /// of, the bytes of a 32-bit fill (and its element size), which must be multiples of 4.
    NotMultiple {
        /// The multiple required.
        multiple: u64,
    },
    /// An address not aligned as the slot declares.
    Misaligned {
        /// The address.
        addr: u64,
        /// The alignment the slot declares (bytes).
        align: usize,
    },
    /// A string handed to the driver (a path, a kernel's name, PTX text) that contains a NUL
    /// byte, which a C string cannot hold: remove it.
    NulByte,

    // Argument tables and slots.
    /// A slot index beyond the table's slots.
    SlotOutOfRange {
        /// The index.
        slot: usize,
    },
    /// A launch while a slot of the table was never bound.
    Unbound {
        /// The first slot never bound.
        slot: usize,
    },
    /// Slots added to a table whose refresh was already recorded or launched.
    TableSealed,
    /// A table already holding its capacity of slots.
    TableFull {
        /// The table's capacity.
        capacity: usize,
    },
    /// A binding set with no binding.
    EmptySet,
    /// A slot given to a prelude that accepts buffers the captured kernels may not read:
    /// shorter than the captured buffer, or aligned to less than 16 bytes. Make the slot with
    /// [`ArgTable::ptr_slot_with`](crate::ArgTable::ptr_slot_with)`(16, len)` or stricter.
    SlotTooPermissive {
        /// The slot's position among the slots given (the dynamic buffer it stands for).
        slot: usize,
    },

    // Kernels, their arguments and signatures.
    /// The arguments' parameter sizes (bytes, in order) are not the kernel's.
    ArgumentLayout {
        /// The kernel's parameter sizes (`cuFuncGetParamInfo`).
        kernel: Vec<usize>,
        /// The sizes the arguments give.
        given: Vec<usize>,
    },
    /// A table-form signature that is not the function's (another kernel's, another parameter
    /// count, a parameter of another size): make the signature from the PTX the function was
    /// loaded from (or use [`TableKernel::load`](crate::table::TableKernel::load)).
    SignatureMismatch,
    /// An argument of the wrong kind for its parameter: a slot where the kernel takes a plain
    /// value or the reverse, a pointer slot where it reads a scalar slot, a scalar of another
    /// size or kind (integer, float), a slot declaring less alignment than the kernel was
    /// compiled for; or a parameter made a slot that cannot be one (Triton's scratch pointers).
    /// Pass what the parameter takes (see the kernel's `params()`).
    WrongArgument {
        /// The argument's (parameter's) index.
        index: usize,
    },
    /// An argument list that cannot say what each argument is (raw bytes, as a
    /// [`KernelArgList`](crate::KernelArgList) may hold), given to a call that checks each
    /// argument against a signature: pass a tuple of arguments.
    UndescribedArguments,
    /// An argument that breaks the specialization Triton compiled the kernel for: a pointer not
    /// 16-byte aligned or an integer not a multiple of 16 where the parameter is divisible by
    /// 16, or a slot that allows such values. Pass aligned buffers and multiples of 16, slots
    /// made with `ptr_slot_with(16, ..)` or `scalar_slot_with(16)`, or use a kernel Triton
    /// compiled without that specialization.
    Specialization {
        /// The argument's index.
        index: usize,
    },
    /// A kernel name the PTX or TTIR does not define: check the name (`extern "C"` avoids C++
    /// name mangling; Triton's is the metadata's `name`).
    NoSuchKernel,
    /// An image that does not start with the magic number of its format (a cubin's ELF header,
    /// a fatbin's): load it with the call of its format (`from_cubin`, `from_fatbin`,
    /// `from_ptx`; `from_image` takes either binary format).
    WrongImage,
    /// A cubin or fatbin whose headers do not fit in its bytes: shorter than its header, or a
    /// header table, section or segment that reaches past its end (a file cut short by an
    /// interrupted write or a full disk). The driver takes no length, so graph-rt refuses it
    /// before the driver reads it: give the whole image as its compiler wrote it.
    MalformedImage,
    /// The PTX pass refused the PTX or the options, or could not read the PTX: `error` says
    /// why (match on it); change the selection of parameters, or use the original form.
    Ptx {
        /// The pass's error.
        error: graph_rt_ptx::PtxError,
    },

    // cuBLAS GEMMs.
    /// A GEMM operand's leading dimension below the rows of the operand as stored (rows for op
    /// N, columns for op T): give a leading dimension of at least `rows`.
    LeadingDimension {
        /// The leading dimension's name (`lda`, `ldb`, `ldc`).
        name: &'static str,
        /// Its value.
        ld: usize,
        /// The stored rows it must cover.
        rows: usize,
    },
    /// A batch stride cuBLAS cannot take: a negative stride, or `stride_c` 0 for a batch of
    /// more than one matrix (every matrix would write the same C). Give non-negative strides,
    /// and C its own matrix per batch entry.
    BadStride {
        /// The stride's name (`stride_a`, `stride_b`, `stride_c`).
        name: &'static str,
    },

    // Inputs read from files, and discoveries.
    /// Input graph-rt parses that is malformed or lacks what graph-rt needs (Triton's metadata
    /// JSON, its TTIR, a file that is not UTF-8): the reason names the field or argument; give
    /// the files Triton wrote.
    Malformed,
    /// A file graph-rt refuses to read or load, which another user could have written or which
    /// is not what it should be: a symbolic link where graph-rt follows none (Triton's cache
    /// files, decisions and cost-model files, an NCCL unique id), not a regular file (a FIFO,
    /// a folder, a device), owned by a user other than the process's (or root's, for a library
    /// found below a Python folder), writable by others, or, for an NCCL unique id, readable by
    /// others. Nothing was read from it or loaded: the reason names the path; fix its owner or
    /// mode, or give another path.
    UntrustedFile,
    /// A name joined to a folder to make a file's path (a Triton kernel's) that could reach
    /// outside the folder: empty, `.` or `..`, or holding `/`, `\` or `..`. Give the kernel's
    /// name as Triton's metadata has it.
    BadFileName,
    /// A call that needs an input it was not given: the PTX for a table form, the TTIR or the
    /// divisibility flags for Triton's specialization, the PTX or the TTIR for the parameters'
    /// kinds, a cubin or PTX to load. Give it.
    MissingInput,
    /// A kernel's files that do not agree with each other (PTX and cubin of different builds, a
    /// TTIR of another parameter count, fewer parameters than Triton's scratch pointers, a
    /// specialization other than the TTIR's): give the files of one build.
    MismatchedFiles,
    /// A discovery that left differences between the two captures unexplained: rebinding would
    /// leave those words as the first capture has them. Declare the buffers that differ as
    /// dynamic and discover again, or accept them (`HostPatcher::with_unexplained`,
    /// `PreludeOptions::allow_unexplained`) when they are known to be harmless.
    Unexplained {
        /// The differences left unexplained.
        count: usize,
    },
    /// A discovery and what it is used with that do not fit together: dynamic buffers declared
    /// differently in the two captures (or a buffer whose two allocations overlap), a patch
    /// naming a node, buffer or offset that the snapshots or slots lack. Use the snapshots and
    /// dynamic buffers the discovery was made from, declared alike in both captures.
    DiscoveryMismatch,

    // The device.
    /// What this device (or driver) does not offer: more shared memory per block than it allows,
    /// a mechanism that needs compute capability 9.0 (programmatic dependent launch), a prelude
    /// that does not load on it. Use a smaller configuration, another mechanism or another
    /// device.
    DeviceUnsupported,

    // Communicators (NCCL).
    /// Two ranks of one communicator on one GPU (NCCL takes one rank a GPU): give each rank
    /// its own device.
    RankPerGpu {
        /// The device's ordinal.
        device: usize,
    },
    /// A rank or peer that is not in `0..nranks`, or a communicator of no rank.
    BadRank {
        /// The rank given.
        rank: usize,
        /// The communicator's ranks.
        nranks: usize,
    },
    /// A communicator that was aborted (after a timeout, an error, or [`abort`]): make a new
    /// one on every rank.
    ///
    /// [`abort`]: crate::nccl::Communicator::abort
    Aborted,
    /// A peer of the socket a unique id goes through that runs as another user than this
    /// process (`SO_PEERCRED`): a server that would hand out a forged id, or a client that would
    /// take a rank's place. Put the socket in a folder only this user can reach
    /// (`$XDG_RUNTIME_DIR`), and run every rank as one user.
    ForeignPeer {
        /// The peer's user id.
        uid: u32,
    },
    /// A path to serve a unique id at that a live process serves already, or that is a file
    /// other than a socket: give every clique its own path.
    PathInUse,

    // Steps.
    /// Memory freed inside a capture that the capture did not allocate: a buffer made before
    /// it (graph-rt's stream-ordered buffer dropped while its stream captures, which graph-rt
    /// then frees once the capture has ended), or a framework's tensor made before a step and
    /// dropped by its closure. A capture's free node may free only what an allocation node
    /// made: keep what was made before the capture alive until it has ended.
    FreedInCapture,
    /// A step's capture allocated memory it did not free: allocation `allocation` (in node
    /// order) would outlive each replay, and CUDA launches no graph again while an allocation
    /// of it is live. Drop what the closure allocates (through
    /// [`StepScope::alloc`](crate::step::StepScope::alloc) or a framework) before it returns;
    /// what a step hands out is a declared buffer.
    AllocationKept {
        /// The allocation's index among the capture's allocation nodes.
        allocation: usize,
    },
    /// A buffer or view of a graph's own memory (a [`StepScope::alloc`](crate::step::StepScope::alloc)
    /// buffer in a capture) bound to a table slot or binding set: that memory is valid during
    /// the graph's replays only, between its allocation and free nodes. Bind a buffer of your
    /// own.
    GraphMemory,
    /// A step's closure did other work in one run than in another (node count, kernel, launch
    /// dimensions, or an argument that is neither a declared buffer nor the same each run).
    StepChanged,
    /// A step's parameter that its closure does not read through the scope, or of another step.
    UnknownParam,
    /// A copy or set in a step's capture that covers bytes of a declared buffer past its
    /// declared length: a later binding need only be as long as declared. Declare the buffer
    /// as long as the copy.
    ParamCopied,
    /// [`Step::recapture`](crate::step::Step::recapture) of a step not made
    /// [`recapturable`](crate::step::StepOptions::recapturable) (it keeps no handle on its
    /// buffers): make it with the option.
    NotRecapturable,
    /// A step's closure, captured again to validate the step, did other work than its graph
    /// replays ([`Step::validate`](crate::step::Step::validate)): it depends on something it
    /// does not declare (a host value that sets a grid, a length or an offset). `node` is where
    /// the work first differs (in capture order; `None`: another number of nodes). Declare what
    /// the closure depends on, or let the step recapture.
    StepDiverged {
        /// The node.
        node: Option<usize>,
    },
}
