//! Modules (loaded PTX, cubin or fatbin images) and the kernels in them.

use std::ffi::{c_uint, c_void, CString};
use std::sync::{Arc, OnceLock};

use graph_rt_sys::{CUfunction, CUfunction_attribute as FnAttr, CUjit_option, CUmodule};

use super::call::{cu, cu_code};
use super::image::{check_image, ELF_MAGIC, FATBIN_MAGIC};
use super::Context;
use crate::error::{Error, Misuse, Result};

/// A loaded module. Cloning shares it; it is unloaded when the last clone and the last
/// [`Function`] taken from it are gone.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    raw: CUmodule,
    ctx: Context,
    owned: bool,
}

// SAFETY: module handles may be used from any thread of the process.
unsafe impl Send for ModuleInner {}
// SAFETY: as above; a module is immutable once loaded.
unsafe impl Sync for ModuleInner {}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("raw", &self.inner.raw)
            .finish()
    }
}

const LOG_BYTES: usize = 8192;

impl Module {
    /// JIT-compiles and loads PTX text (`cuModuleLoadDataEx`). On failure the error carries the
    /// JIT compiler's log.
    pub fn from_ptx(ctx: &Context, ptx: &str) -> Result<Self> {
        let text = CString::new(ptx).map_err(|_| {
            let reason = "the PTX text contains a NUL byte";
            Error::misuse("cuModuleLoadDataEx", Misuse::NulByte, reason)
        })?;
        Self::load(ctx, text.as_ptr().cast())
    }

    /// Checks that `image`, a cubin or a fatbin (told by its magic number), is whole before a
    /// driver call reads it: the driver takes no length and follows the offsets in the image's
    /// headers. A cubin's ELF header, program and section header tables, and the bytes of each
    /// section and segment must lie within `image`, its string tables end with a NUL, and its
    /// symbol and relocation tables have entries of their ELF size; a fatbin's header and the
    /// payload size it announces must lie within `image` (its entries, whose layout NVIDIA does
    /// not publish, are the driver's to bound). What the sections hold is the driver's to judge.
    ///
    /// Errors: [`Misuse::WrongImage`] for neither format, [`Misuse::MalformedImage`] (naming the
    /// header, section or segment and where it ends) for an image cut short or whose headers
    /// point past its end.
    pub fn check_image(image: &[u8]) -> Result<()> {
        check_image("Module::check_image", "the image", image).map(|_| ())
    }

    /// Loads a cubin or a fatbin (told by its magic number) after [`Module::check_image`]: the
    /// checked form of [`Module::from_cubin`] and [`Module::from_fatbin`], for images read from
    /// files or given by callers.
    pub fn from_image(ctx: &Context, image: &[u8]) -> Result<Self> {
        check_image("Module::from_image", "the image", image)?;
        Self::load_binary(ctx, image)
    }

    /// Loads a cubin (an ELF image for this GPU's architecture) without checking its headers;
    /// [`Module::from_image`] checks them.
    ///
    /// # Safety
    /// `image` must be a whole, well-formed cubin: the driver takes no length, so every header,
    /// section and segment its headers point at must lie within `image` (what
    /// [`Module::check_image`] checks). graph-rt only checks the magic number here.
    pub unsafe fn from_cubin(ctx: &Context, image: &[u8]) -> Result<Self> {
        Self::with_magic(ctx, image, ELF_MAGIC, "cubin")
    }

    /// Loads a fatbin (as written by `nvcc -fatbin`) without checking its headers;
    /// [`Module::from_image`] checks them.
    ///
    /// # Safety
    /// As [`Module::from_cubin`]: a whole, well-formed fatbin, its header, its entries and what
    /// they hold within `image`.
    pub unsafe fn from_fatbin(ctx: &Context, image: &[u8]) -> Result<Self> {
        Self::with_magic(ctx, image, &FATBIN_MAGIC, "fatbin")
    }

    fn with_magic(ctx: &Context, image: &[u8], magic: &[u8], kind: &str) -> Result<Self> {
        if !image.starts_with(magic) {
            return Err(Error::misuse(
                "cuModuleLoadDataEx",
                Misuse::WrongImage,
                format!("the image is not a {kind} (wrong magic number)"),
            ));
        }
        Self::load_binary(ctx, image)
    }

    // A binary image whose framing was checked, or promised by an unsafe caller.
    fn load_binary(ctx: &Context, image: &[u8]) -> Result<Self> {
        // The driver reads the image through typed headers: give it 8-byte-aligned memory.
        let mut aligned = vec![0u64; image.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..image.len()].copy_from_slice(image);
        Self::load(ctx, aligned.as_ptr().cast())
    }

    fn load(ctx: &Context, image: *const c_void) -> Result<Self> {
        ctx.bind()?;
        let mut log = vec![0u8; LOG_BYTES];
        let mut options = [
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values = [log.as_mut_ptr().cast::<c_void>(), LOG_BYTES as *mut c_void];
        let mut raw = std::ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX string or an aligned binary image; the option
        // arrays have matching lengths; the log buffer holds LOG_BYTES bytes.
        let r = unsafe {
            cu!(cuModuleLoadDataEx(
                &mut raw,
                image,
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            ))
        };
        if let Err(e) = r {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..end]).trim().to_owned();
            return Err(if log.is_empty() {
                e
            } else {
                e.with_hint(format!("JIT log: {log}"))
            });
        }
        Ok(Self {
            inner: Arc::new(ModuleInner {
                raw,
                ctx: ctx.clone(),
                owned: true,
            }),
        })
    }

    /// Wraps a module loaded elsewhere. graph-rt never unloads it.
    ///
    /// # Safety
    /// `raw` must be a module of `ctx` that stays loaded while the value or any function taken
    /// from it lives.
    pub unsafe fn from_raw(ctx: &Context, raw: CUmodule) -> Self {
        Self {
            inner: Arc::new(ModuleInner {
                raw,
                ctx: ctx.clone(),
                owned: false,
            }),
        }
    }

    /// The raw `CUmodule`. Do not unload it.
    pub fn as_raw(&self) -> CUmodule {
        self.inner.raw
    }

    /// The kernel `name` (`cuModuleGetFunction`); C++ kernels need their mangled name.
    pub fn function(&self, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| {
            let reason = "the name contains a NUL byte";
            Error::misuse("cuModuleGetFunction", Misuse::NulByte, reason)
        })?;
        self.inner.ctx.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer, module and NUL-terminated name.
        unsafe { cu!(cuModuleGetFunction(&mut raw, self.inner.raw, cname.as_ptr())) }
            .map_err(|e| e.with_hint(format!("the module has no kernel named `{name}` (C++ kernels need extern \"C\" or their mangled name)")))?;
        Ok(Function {
            inner: Arc::new(FunctionInner {
                raw,
                name: name.to_owned(),
                _module: self.clone(),
                layout: OnceLock::new(),
            }),
        })
    }
}

impl Function {
    /// Wraps a kernel handle obtained elsewhere (`cuModuleGetFunction` on a module wrapped with
    /// [`Module::from_raw`], a library's kernel), keeping `module` loaded while it lives.
    ///
    /// # Safety
    /// `raw` must be a kernel of `module`.
    pub unsafe fn from_raw(module: &Module, raw: CUfunction, name: impl Into<String>) -> Self {
        Function {
            inner: Arc::new(FunctionInner {
                raw,
                name: name.into(),
                _module: module.clone(),
                layout: OnceLock::new(),
            }),
        }
    }
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if self.owned {
            let inner = &self.ctx.inner;
            let r = inner.bind().and_then(|_| {
                // SAFETY: we loaded the module; no Function of it is alive (they hold this value).
                unsafe { cu!(cuModuleUnload(self.raw)) }
            });
            inner.record(r);
        }
    }
}

/// Where one kernel parameter sits in the kernel's parameter buffer (`cuFuncGetParamInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    /// Byte offset in the parameter buffer.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// A kernel of a loaded module. Cloning is cheap; it keeps its module loaded.
#[derive(Clone)]
pub struct Function {
    inner: Arc<FunctionInner>,
}

struct FunctionInner {
    raw: CUfunction,
    name: String,
    _module: Module,
    layout: OnceLock<Result<Vec<ParamInfo>>>,
}

// SAFETY: function handles may be used from any thread; the layout cache is a OnceLock.
unsafe impl Send for FunctionInner {}
// SAFETY: as above.
unsafe impl Sync for FunctionInner {}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.inner.name)
            .field("raw", &self.inner.raw)
            .finish()
    }
}

/// The name of kernel `raw` (`cuFuncGetName`), or `None` where the driver does not say: for
/// fingerprints of captured work, whose kernels graph-rt may not have loaded itself.
pub(crate) fn kernel_name(raw: CUfunction) -> Option<String> {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `raw` is a kernel of a live module (a captured node's, its graph alive) and the
    // out-pointer is valid; the driver owns the returned string, copied at once.
    unsafe { cu!(cuFuncGetName(&mut name, raw)) }.ok()?;
    if name.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string the driver keeps while the module lives.
    Some(
        unsafe { std::ffi::CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned(),
    )
}

impl Function {
    /// The raw `CUfunction`, valid while this value lives.
    #[inline]
    pub fn as_raw(&self) -> CUfunction {
        self.inner.raw
    }

    /// The kernel's name as it was looked up.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The kernel's parameters, read once with `cuFuncGetParamInfo` (CUDA 12.4) and cached.
    #[inline]
    pub fn param_layout(&self) -> Result<&[ParamInfo]> {
        match self.inner.layout.get_or_init(|| self.read_layout()) {
            Ok(v) => Ok(v),
            Err(e) => Err(e.clone()),
        }
    }

    fn read_layout(&self) -> Result<Vec<ParamInfo>> {
        // SAFETY: our own function handle.
        unsafe { param_layout_of(self.inner.raw) }
    }

    /// Reads an attribute (`cuFuncGetAttribute`).
    pub fn attribute(&self, attribute: FnAttr) -> Result<i32> {
        let mut v = 0;
        // SAFETY: valid out-pointer and function.
        unsafe { cu!(cuFuncGetAttribute(&mut v, attribute, self.inner.raw)) }?;
        Ok(v)
    }

    /// The most threads a block of this kernel can have.
    pub fn max_threads_per_block(&self) -> Result<i32> {
        self.attribute(FnAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    }

    /// Registers per thread.
    pub fn num_registers(&self) -> Result<i32> {
        self.attribute(FnAttr::CU_FUNC_ATTRIBUTE_NUM_REGS)
    }

    /// Static shared memory per block, in bytes.
    pub fn static_shared_bytes(&self) -> Result<i32> {
        self.attribute(FnAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
    }

    /// The most dynamic shared memory a launch may ask for, in bytes.
    pub fn max_dynamic_shared_bytes(&self) -> Result<i32> {
        self.attribute(FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    }

    /// How many blocks of `block_threads` threads, each with `dynamic_shared` bytes of dynamic
    /// shared memory, one multiprocessor holds at once
    /// (`cuOccupancyMaxActiveBlocksPerMultiprocessor`): what a persistent kernel sizes its grid
    /// by. 0 when one such block does not fit (too many threads, registers or shared bytes).
    pub fn max_active_blocks_per_sm(
        &self,
        block_threads: u32,
        dynamic_shared: usize,
    ) -> Result<u32> {
        // More than i32 holds is more than any block has: the driver refuses or fits none.
        let threads = block_threads.min(i32::MAX as u32) as i32;
        let mut n = 0;
        // SAFETY: valid out-pointer and function; the driver validates the sizes.
        unsafe {
            cu!(cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut n,
                self.inner.raw,
                threads,
                dynamic_shared
            ))
        }?;
        Ok(n.max(0) as u32)
    }

    /// Sets one function attribute (`cuFuncSetAttribute`), such as
    /// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`.
    pub fn set_attribute(&self, attribute: FnAttr, value: i32) -> Result<()> {
        // SAFETY: valid function; the driver validates the attribute and value.
        unsafe { cu!(cuFuncSetAttribute(self.inner.raw, attribute, value)) }
    }

    /// Allows launches with up to `bytes` of dynamic shared memory (above 48 KiB needs this).
    pub fn set_max_dynamic_shared_bytes(&self, bytes: i32) -> Result<()> {
        self.set_attribute(
            FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes,
        )
    }
}

/// The parameter layout of any kernel handle (`cuFuncGetParamInfo`), such as one a foreign
/// library launched into a captured graph.
///
/// # Safety
/// `raw` must be a valid `CUfunction` of a loaded module.
pub(crate) unsafe fn param_layout_of(raw: CUfunction) -> Result<Vec<ParamInfo>> {
    let mut out = Vec::new();
    for index in 0.. {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: valid out-pointers; `raw` valid (the caller's promise).
        let r = unsafe { cu_code!(cuFuncGetParamInfo(raw, index, &mut offset, &mut size)) }?;
        match r.code {
            graph_rt_sys::CUresult::CUDA_SUCCESS => out.push(ParamInfo { offset, size }),
            // Past the last parameter.
            graph_rt_sys::CUresult::CUDA_ERROR_INVALID_VALUE => break,
            _ => return Err(r.error()),
        }
    }
    Ok(out)
}
