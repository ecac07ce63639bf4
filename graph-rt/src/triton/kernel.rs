//! A Triton kernel loaded from what Triton writes to its cache, launched as Triton's own launcher
//! launches it, in its original form or in table form (made by the PTX pass).

use std::collections::HashMap;
use std::sync::Arc;

use graph_rt_sys::{
    CUdevice_attribute, CUfunction_attribute, CUlaunchAttribute, CUlaunchAttributeID,
};
use parking_lot::Mutex;

use super::arg::{ArgKind, TritonArg};
use super::check::check_args;
use super::files::TritonFiles;
use super::meta::{ttir_args, TritonMetadata, TtirArg};
use crate::driver::{check_image, Context, DeviceBuffer, Function, Module, Stream};
use crate::error::{Error, Misuse, Result};
use crate::graph::{CaptureScope, CapturedNode};
use crate::launch::{KernelArgList, LaunchConfig};

const CALL: &str = "TritonKernel::load";

/// Which form of the kernel to load.
#[derive(Debug, Clone)]
pub enum TritonForm {
    /// As Triton built it (its cubin where it loads on this device, else its PTX).
    Original,
    /// Rewritten by the PTX pass with these options: the chosen parameters take table slots
    /// ([`TritonArg::ptr_slot`], [`TritonArg::scalar_slot`]); with `pdl`, launches are
    /// programmatic.
    Table(graph_rt_ptx::Options),
}

/// What one runtime parameter of a Triton kernel takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TritonParam {
    /// The argument's name (from the TTIR; the PTX parameter's name without it).
    pub name: String,
    /// Whether it is a pointer (else a scalar).
    pub pointer: bool,
    /// The value's size in bytes (8 for a pointer).
    pub size: usize,
    /// Whether the scalar is a float.
    pub float: bool,
    /// Whether the kernel was compiled for it divisible by 16 (a 16-byte-aligned pointer, an
    /// integer multiple of 16).
    pub divisible_16: bool,
    /// Whether the table form takes a slot for it.
    pub slot: bool,
}

/// Scratch buffers for one grid size.
struct Scratch {
    global: Option<DeviceBuffer<u8>>,
    profile: Option<DeviceBuffer<u8>>,
}

/// A Triton kernel: loaded from Triton's cache files, launched as Triton's launcher does
/// (`32 × num_warps` threads a block; `shared` bytes of dynamic shared memory, opted in above
/// 48 KiB; `num_ctas` CTAs a program as a cluster; scratch buffers of the metadata's sizes,
/// made once per grid size; cooperative and programmatic launch as the metadata says), eagerly
/// or into a capture, with every argument checked against its parameter and the specialization
/// Triton compiled for.
///
/// Scratch buffers: eager launches share one per stream and grid size (ordered on their
/// stream); every recorded node has its own, reserved before the capture
/// ([`TritonKernel::reserve_scratch`]) and owned by its graph.
pub struct TritonKernel {
    function: Function,
    meta: TritonMetadata,
    params: Vec<TritonParam>,
    pdl: bool,
    from_cubin: bool,
    // Eager launches: one scratch per (stream, programs). Captures: reserved ahead, one per
    // recorded node (owned by its graph).
    scratch: Mutex<HashMap<(usize, u64), Arc<Scratch>>>,
    reserved: Mutex<HashMap<u64, Vec<Arc<Scratch>>>>,
}

impl std::fmt::Debug for TritonKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TritonKernel")
            .field("name", &self.meta.name)
            .field("params", &self.params)
            .field("pdl", &self.pdl)
            .field("from_cubin", &self.from_cubin)
            .finish()
    }
}

impl TritonKernel {
    /// Loads `files` in `form`, taking the specialization from the TTIR (an error without it:
    /// use [`TritonKernel::load_with`]).
    pub fn load(ctx: &Context, files: &TritonFiles, form: TritonForm) -> Result<Self> {
        Self::load_inner(ctx, files, form, None)
    }

    /// Loads `files` in `form` with the caller's specialization: for each runtime parameter,
    /// whether Triton compiled it as divisible by 16. Where the TTIR is there too, they must
    /// agree.
    pub fn load_with(
        ctx: &Context,
        files: &TritonFiles,
        form: TritonForm,
        divisible_16: &[bool],
    ) -> Result<Self> {
        Self::load_inner(ctx, files, form, Some(divisible_16))
    }

    fn load_inner(
        ctx: &Context,
        files: &TritonFiles,
        form: TritonForm,
        given: Option<&[bool]>,
    ) -> Result<Self> {
        let Read {
            meta,
            ttir,
            ptx_params,
        } = read(files)?;
        let name = meta.name.clone();
        let (function, from_cubin, slots, pdl) = match &form {
            TritonForm::Original => {
                let (f, cubin) = load_original(ctx, files, &name)?;
                (f, cubin, Vec::new(), false)
            }
            TritonForm::Table(options) => {
                let ptx = files.ptx.as_deref().ok_or_else(|| {
                    let reason = "a table form is made from the PTX: none given";
                    Error::misuse(CALL, Misuse::MissingInput, reason)
                })?;
                let made = graph_rt_ptx::indirect(ptx.as_bytes(), options)
                    .map_err(|e| Error::ptx(CALL, "the PTX pass refused", e))?;
                let sig = made.kernels.iter().find(|k| k.name == name);
                let sig = sig.ok_or_else(|| no_kernel(&name))?;
                let slots: Vec<bool> = sig.params.iter().map(|p| p.slot.is_some()).collect();
                let f = Module::from_ptx(ctx, &made.ptx)?.function(&name)?;
                (f, false, slots, options.pdl)
            }
        };
        let layout = function.param_layout()?.to_vec();
        if let Some(p) = &ptx_params {
            if p.len() != layout.len() {
                return Err(Error::misuse(
                    CALL,
                    Misuse::MismatchedFiles,
                    format!(
                        "the PTX declares {} parameters, the loaded kernel has {}: PTX and cubin of different builds?",
                        p.len(),
                        layout.len()
                    ),
                ));
            }
        }
        let scratch = meta.scratch_params;
        let runtime = layout.len().checked_sub(scratch).ok_or_else(|| {
            let reason = "fewer parameters than Triton's scratch pointers";
            Error::misuse(CALL, Misuse::MismatchedFiles, reason)
        })?;
        if let Some(k) = slots.iter().skip(runtime).position(|&s| s) {
            return Err(Error::misuse(
                CALL,
                Misuse::WrongArgument { index: runtime + k },
                "the table form made a scratch pointer a slot: Triton's launcher passes them",
            ));
        }
        if let Some(t) = &ttir {
            if t.len() != runtime {
                return Err(Error::misuse(
                    CALL,
                    Misuse::MismatchedFiles,
                    format!(
                        "the TTIR declares {} arguments, the kernel has {runtime} besides {scratch} scratch pointers",
                        t.len()
                    ),
                ));
            }
        }
        let divisible: Vec<bool> = match (given, &ttir) {
            (Some(g), _) if g.len() != runtime => {
                return Err(Error::misuse(
                    CALL,
                    Misuse::CountMismatch {
                        expected: runtime,
                        got: g.len(),
                    },
                    format!("{} divisibility flags for {runtime} parameters", g.len()),
                ))
            }
            (Some(g), Some(t)) if t.iter().zip(g).any(|(a, &b)| a.divisible_16 != b) => {
                return Err(Error::misuse(
                    CALL,
                    Misuse::MismatchedFiles,
                    "the given specialization differs from the TTIR's",
                ))
            }
            (Some(g), _) => g.to_vec(),
            (None, Some(t)) => t.iter().map(|a| a.divisible_16).collect(),
            (None, None) => {
                return Err(Error::misuse(
                    CALL,
                    Misuse::MissingInput,
                    "the specialization is unknown: give the TTIR, or load_with the divisibility Triton compiled for",
                ))
            }
        };
        let mut params = Vec::with_capacity(runtime);
        for (i, info) in layout.iter().take(runtime).enumerate() {
            // Kinds: the TTIR's types where given (they tell fp16/bf16, which PTX declares as
            // `.b16`), else the PTX's.
            let (pointer, float) = match (&ttir, &ptx_params) {
                (Some(t), _) => (
                    t[i].ty.starts_with("!tt.ptr"),
                    t[i].ty.starts_with('f') || t[i].ty.starts_with("bf"),
                ),
                (None, Some(p)) => (p[i].ptr.is_some(), p[i].ty.is_float()),
                (None, None) => {
                    return Err(Error::misuse(
                        CALL,
                        Misuse::MissingInput,
                        "the parameters' kinds are unknown: give the PTX or the TTIR",
                    ))
                }
            };
            let name = match (&ttir, &ptx_params) {
                (Some(t), _) => t[i].name.clone(),
                (None, Some(p)) => p[i].name.clone(),
                (None, None) => format!("param_{i}"),
            };
            params.push(TritonParam {
                name,
                pointer,
                size: ptx_params.as_ref().map_or(info.size, |p| p[i].size),
                float,
                divisible_16: divisible[i],
                slot: slots.get(i).copied().unwrap_or(false),
            });
        }
        if meta.global_scratch_align > 256 || meta.profile_scratch_align > 256 {
            return Err(Error::misuse(
                CALL,
                Misuse::TooLarge { what: "alignment" },
                "scratch alignment above 256 bytes (device allocations give 256)",
            ));
        }
        opt_in_shared(ctx, &function, meta.shared)?;
        if meta.ctas().iter().product::<u32>() > 8 {
            function.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                1,
            )?;
        }
        Ok(Self {
            function,
            pdl: pdl || meta.launch_pdl,
            meta,
            params,
            from_cubin,
            scratch: Mutex::new(HashMap::new()),
            reserved: Mutex::new(HashMap::new()),
        })
    }

    /// The kernel.
    pub fn function(&self) -> &Function {
        &self.function
    }

    /// What Triton recorded about it.
    pub fn metadata(&self) -> &TritonMetadata {
        &self.meta
    }

    /// Its runtime parameters (what a launch passes, in order).
    pub fn params(&self) -> &[TritonParam] {
        &self.params
    }

    /// Whether Triton's cubin was loaded (else the PTX, JIT-compiled by the driver).
    pub fn from_cubin(&self) -> bool {
        self.from_cubin
    }

    /// Whether launches are programmatic (`launch_pdl`, or a PDL table form).
    pub fn pdl(&self) -> bool {
        self.pdl
    }

    /// The launch configuration of a grid of `grid` programs, as Triton's launcher makes it.
    pub fn config(&self, grid: [u32; 3]) -> Result<LaunchConfig> {
        let ctas = self.meta.ctas();
        let mut dims = [0u32; 3];
        for (d, (g, c)) in dims.iter_mut().zip(grid.iter().zip(ctas)) {
            *d = g.checked_mul(c).ok_or_else(|| {
                let too_large = Misuse::TooLarge { what: "grid" };
                Error::misuse(
                    "TritonKernel::launch",
                    too_large,
                    "grid × CTAs per program overflows",
                )
            })?;
        }
        let mut cfg =
            LaunchConfig::new(dims, [32 * self.meta.num_warps, 1, 1]).shared_mem(self.meta.shared);
        if ctas.iter().product::<u32>() > 1 {
            let mut spread = CUlaunchAttribute {
                id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                ..Default::default()
            };
            spread.value.clusterSchedulingPolicyPreference =
                graph_rt_sys::CUclusterSchedulingPolicy::CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
            cfg = cfg.cluster(ctas).attribute(spread);
        }
        if self.meta.launch_cooperative_grid {
            cfg = cfg.cooperative();
        }
        if self.pdl {
            cfg = cfg.programmatic_stream_serialization();
        }
        Ok(cfg)
    }

    /// Checks `args` against the parameters and builds the argument list (scratch pointers
    /// appended).
    fn args(
        &self,
        ctx: &Context,
        grid: [u32; 3],
        args: &[TritonArg<'_>],
        stream: Option<&Stream>,
    ) -> Result<KernelArgList> {
        check_args(&self.params, args)?;
        let mut list = KernelArgList::new();
        for a in args {
            match &a.kind {
                ArgKind::Pointer { addr, keep } => {
                    let l = list.push(*addr)?;
                    match keep {
                        Some(k) => l.keep_alive(k.clone()),
                        None => l,
                    }
                }
                ArgKind::Slot { addr, keep, .. } => list.push(*addr)?.keep_alive(keep.clone()),
                ArgKind::Value { bits, size, .. } => match size {
                    1 => list.push(*bits as u8)?,
                    2 => list.push(*bits as u16)?,
                    4 => list.push(*bits as u32)?,
                    _ => list.push(*bits)?,
                },
            };
        }
        if self.meta.scratch_params > 0 && !self.needs_scratch() {
            // Null scratch pointers, as Triton's launcher passes: no lookup on the launch path.
            for _ in 0..self.meta.scratch_params.min(2) {
                list.push(0u64)?;
            }
        } else if self.meta.scratch_params > 0 {
            let scratch = self.scratch_for(ctx, grid, stream)?;
            let addr = |b: &Option<DeviceBuffer<u8>>| b.as_ref().map_or(0, |b| b.as_raw());
            list.push(addr(&scratch.global))?;
            if self.meta.scratch_params > 1 {
                list.push(addr(&scratch.profile))?;
            }
            list.keep_alive(scratch);
        }
        Ok(list)
    }

    fn needs_scratch(&self) -> bool {
        self.meta.global_scratch_size > 0 || self.meta.profile_scratch_size > 0
    }

    /// Scratch for a launch: eager launches share one per stream and grid size (they are
    /// ordered on their stream); a recorded node takes one reserved for it, its graph's alone.
    fn scratch_for(
        &self,
        ctx: &Context,
        grid: [u32; 3],
        stream: Option<&Stream>,
    ) -> Result<Arc<Scratch>> {
        let programs = grid.iter().map(|&g| g as u64).product::<u64>();
        let Some(stream) = stream else {
            // Allocating (and zeroing) is not allowed while the stream captures.
            return self
                .reserved
                .lock()
                .get_mut(&programs)
                .and_then(Vec::pop)
                .ok_or_else(|| {
                    Error::misuse(
                        "TritonKernel::record",
                        Misuse::Capturing,
                        format!("the kernel needs scratch memory for {programs} programs: reserve_scratch(ctx, grid, nodes) before capturing (one per recorded node)"),
                    )
                });
        };
        let key = (stream.as_raw() as usize, programs);
        if let Some(s) = self.scratch.lock().get(&key) {
            return Ok(s.clone());
        }
        let s = Arc::new(self.alloc_scratch(ctx, programs)?);
        self.scratch.lock().insert(key, s.clone());
        Ok(s)
    }

    fn alloc_scratch(&self, ctx: &Context, programs: u64) -> Result<Scratch> {
        let ctas = self.meta.ctas().iter().map(|&c| c as u64).product::<u64>();
        let alloc = |size: u64| -> Result<Option<DeviceBuffer<u8>>> {
            if size == 0 {
                return Ok(None);
            }
            let bytes = programs
                .checked_mul(ctas)
                .and_then(|n| n.checked_mul(size))
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    let too_large = Misuse::TooLarge { what: "scratch" };
                    Error::misuse("TritonKernel::launch", too_large, "scratch size overflows")
                })?;
            DeviceBuffer::zeroed(ctx, bytes).map(Some)
        };
        Ok(Scratch {
            global: alloc(self.meta.global_scratch_size)?,
            profile: alloc(self.meta.profile_scratch_size)?,
        })
    }

    /// Makes scratch memory for `nodes` recordings of the kernel at `grid` (outside any
    /// capture): each [`TritonKernel::record`] at that grid takes one, so that no two graphs
    /// (or nodes) share it. Nothing to do for kernels without scratch.
    pub fn reserve_scratch(&self, ctx: &Context, grid: [u32; 3], nodes: usize) -> Result<()> {
        if !self.needs_scratch() {
            return Ok(());
        }
        let programs = grid.iter().map(|&g| g as u64).product::<u64>();
        let made = (0..nodes)
            .map(|_| self.alloc_scratch(ctx, programs).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        self.reserved
            .lock()
            .entry(programs)
            .or_default()
            .extend(made);
        Ok(())
    }

    /// Launches a grid of `grid` programs on `stream`, as Triton's launcher does; a grid of no
    /// program launches nothing, as there.
    ///
    /// # Safety
    /// The arguments must be what the kernel expects beyond their kinds and specialization
    /// (which are checked): buffers as large as it reads and writes, slots bound so by the
    /// table's refresh.
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        grid: [u32; 3],
        args: &[TritonArg<'_>],
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { self.launch_as(stream, grid, args, self.pdl) }
    }

    /// Launches as [`TritonKernel::launch`] does, but never programmatically: for the first
    /// kernel after an eager [`ArgTable::refresh`](crate::ArgTable::refresh), which reads what
    /// the refresh writes (a PDL table form loads its slots before `griddepcontrol.wait`). In
    /// captures [`TritonKernel::record`] does this by itself after `record_refresh`.
    ///
    /// # Safety
    /// As [`TritonKernel::launch`].
    pub unsafe fn launch_after_refresh(
        &self,
        stream: &Stream,
        grid: [u32; 3],
        args: &[TritonArg<'_>],
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { self.launch_as(stream, grid, args, false) }
    }

    unsafe fn launch_as(
        &self,
        stream: &Stream,
        grid: [u32; 3],
        args: &[TritonArg<'_>],
        programmatic: bool,
    ) -> Result<()> {
        let list = self.args(stream.context(), grid, args, Some(stream))?;
        if grid.contains(&0) {
            return Ok(());
        }
        let mut cfg = self.config(grid)?;
        if self.pdl && !programmatic {
            cfg = cfg.without_programmatic();
        }
        // SAFETY: forwarded to the caller; kinds and specialization checked above.
        unsafe { stream.launch(&self.function, &cfg, &list) }
    }

    /// Records the launch as the next node of a capture (see [`TritonKernel::launch`]); a grid
    /// of no program is an error here, since it would record nothing.
    ///
    /// # Safety
    /// As [`TritonKernel::launch`], for every replay.
    pub unsafe fn record(
        &self,
        scope: &CaptureScope<'_>,
        grid: [u32; 3],
        args: &[TritonArg<'_>],
    ) -> Result<CapturedNode> {
        if grid.contains(&0) {
            return Err(Error::misuse(
                "TritonKernel::record",
                Misuse::Empty,
                "a grid of no program records no node",
            ));
        }
        let list = self.args(scope.stream().context(), grid, args, None)?;
        let cfg = self.config(grid)?;
        // SAFETY: forwarded to the caller.
        unsafe { scope.launch(&self.function, &cfg, &list) }
    }
}

/// What loading reads from the files before any driver call.
pub(super) struct Read {
    pub(super) meta: TritonMetadata,
    pub(super) ttir: Option<Vec<TtirArg>>,
    /// The PTX parameters (types), where there is PTX.
    pub(super) ptx_params: Option<Vec<graph_rt_ptx::ParamInfo>>,
}

/// Parses the metadata, the TTIR and the PTX, and checks that the cubin is whole (its headers
/// within its bytes), so that files cut short or put together by hand are refused before the
/// driver reads them.
pub(super) fn read(files: &TritonFiles) -> Result<Read> {
    let meta = TritonMetadata::from_json(&files.metadata)?;
    let name = &meta.name;
    if let Some(cubin) = &files.cubin {
        check_image(CALL, &format!("{name}.cubin"), cubin)?;
    }
    let ttir = files
        .ttir
        .as_deref()
        .map(|t| ttir_args(t, name))
        .transpose()?;
    let ptx_params = match &files.ptx {
        Some(ptx) => {
            let info = graph_rt_ptx::inspect(ptx.as_bytes())
                .map_err(|e| Error::ptx(CALL, "the PTX does not parse", e))?;
            let k = info.kernels.into_iter().find(|k| &k.name == name);
            Some(k.ok_or_else(|| no_kernel(name))?.params)
        }
        None => None,
    };
    Ok(Read {
        meta,
        ttir,
        ptx_params,
    })
}

fn no_kernel(name: &str) -> Error {
    let reason = format!("the PTX has no kernel `{name}`");
    Error::misuse(CALL, Misuse::NoSuchKernel, reason)
}

/// Loads the original form: Triton's cubin where it loads on this device, else its PTX.
fn load_original(ctx: &Context, files: &TritonFiles, name: &str) -> Result<(Function, bool)> {
    if let Some(cubin) = &files.cubin {
        // Checked whole in `read`, and checked again here; a cubin the driver refuses (built
        // for another GPU) falls back to the PTX.
        match Module::from_image(ctx, cubin) {
            Ok(m) => return Ok((m.function(name)?, true)),
            Err(e) if files.ptx.is_none() => return Err(e),
            // Built for another GPU: the PTX is JIT-compiled below (TritonKernel::from_cubin
            // says which was loaded).
            Err(_) => {}
        }
    }
    let ptx = files.ptx.as_deref().ok_or_else(|| {
        let reason = "neither a cubin nor PTX was given";
        Error::misuse(CALL, Misuse::MissingInput, reason)
    })?;
    Ok((Module::from_ptx(ctx, ptx)?.function(name)?, false))
}

/// Opts the function in to `shared` bytes of dynamic shared memory above the 48 KiB default,
/// as Triton's loader does (up to the device's opt-in limit less the static shared memory).
fn opt_in_shared(ctx: &Context, f: &Function, shared: u32) -> Result<()> {
    if shared <= 48 * 1024 {
        return Ok(());
    }
    let optin = ctx
        .device()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let static_bytes = f.static_shared_bytes()?;
    if shared as i64 > optin as i64 - static_bytes as i64 {
        return Err(Error::misuse(
            "TritonKernel::load",
            Misuse::DeviceUnsupported,
            format!("{shared} bytes of shared memory; this device allows {optin} a block"),
        ));
    }
    f.set_max_dynamic_shared_bytes(optin - static_bytes)
}
