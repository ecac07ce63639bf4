//! Kernel argument lists built at run time: [`KernelArgList`].

use std::ffi::c_void;
use std::mem::{align_of, size_of, MaybeUninit};

use super::{KernelArg, KernelArgs};
use crate::error::{Error, Misuse, Result};
use crate::resource::Resource;

/// 16 bytes of parameter storage, aligned as CUDA's most aligned built-in types (`float4`,
/// `double2`). Any bytes are a valid `Chunk`, initialised or not.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Chunk([MaybeUninit<u8>; 16]);

const UNINIT: Chunk = Chunk([MaybeUninit::uninit(); 16]);

/// Where a list's values, offsets and sizes live once they outgrow the inline arrays: all of
/// them, moved at once.
#[derive(Default)]
struct Spill {
    bytes: Vec<Chunk>,
    offsets: Vec<usize>,
    sizes: Vec<usize>,
}

/// A kernel argument list built at run time, for code that learns a kernel's arguments only
/// when it runs (code generators, custom operators of a framework). It is a [`KernelArgs`], so
/// [`Stream::launch`](crate::Stream::launch), [`CaptureScope::launch`](crate::CaptureScope::launch)
/// and [`GraphExec::set_kernel_args`](crate::GraphExec::set_kernel_args) take it (or a reference
/// to it) as they take a tuple, with the same check against the kernel's parameter layout.
///
/// Each argument's value is copied in when it is pushed, at an offset aligned to its alignment
/// (up to 16 bytes); what it must keep alive ([`KernelArg::retain`]) is held by the list and
/// handed to the graph when the list is captured or rebound. Up to
/// [`INLINE_ARGS`](Self::INLINE_ARGS) arguments, [`INLINE_BYTES`](Self::INLINE_BYTES) bytes of
/// values and `INLINE_ARGS` kept resources live inside the list, uninitialised until used:
/// building and launching such a list allocates nothing. Longer lists move to the heap; values
/// beyond the driver's limit for any kernel, [`MAX_BYTES`](Self::MAX_BYTES), are refused.
///
/// ```no_run
/// # use graph_rt::{Context, DeviceBuffer, KernelArgList, LaunchConfig, Module, Stream};
/// # fn main() -> graph_rt::Result<()> {
/// # let ctx = Context::new(0)?;
/// # let stream = Stream::new(&ctx)?;
/// # let axpy = Module::from_ptx(&ctx, graph_rt_kernels::AXPY.ptx)?.function("axpy_f32")?;
/// let x = DeviceBuffer::from_host(&ctx, &[1.0f32; 1024])?;
/// let mut y = DeviceBuffer::from_host(&ctx, &[2.0f32; 1024])?;
/// let mut args = KernelArgList::new();
/// args.push(3.0f32)?.push(&x)?.push(&mut y)?.push(1024i32)?;
/// // SAFETY: axpy_f32(float a, const float* x, float* y, int n) touches n elements of each.
/// unsafe { stream.launch(&axpy, &LaunchConfig::for_elements(1024, 256), &args)? };
/// assert_eq!(y.read_on(&stream)?[0], 5.0);
/// # Ok(()) }
/// ```
// `repr(C)`, the initialised fields first: the compiler then leaves the arrays uninitialised,
// where it would otherwise clear the array next to them along with them.
#[repr(C)]
pub struct KernelArgList {
    len: usize,
    // End of the last value, and the sum of the values' sizes.
    end: usize,
    total: usize,
    n_kept: usize,
    spill: Option<Box<Spill>>,
    kept_spill: Vec<Resource>,
    // Offsets, sizes and values, while `spill` is `None`: the first `len` offsets and sizes are
    // initialised, and the bytes of each value.
    offsets: [MaybeUninit<usize>; KernelArgList::INLINE_ARGS],
    sizes: [MaybeUninit<usize>; KernelArgList::INLINE_ARGS],
    // The first `n_kept` are initialised; more go to `kept_spill`.
    kept: [MaybeUninit<Resource>; KernelArgList::INLINE_ARGS],
    bytes: [Chunk; KernelArgList::INLINE_BYTES / 16],
}

impl std::fmt::Debug for KernelArgList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelArgList")
            .field("sizes", &self.sizes())
            .field("kept", &(self.n_kept + self.kept_spill.len()))
            .finish()
    }
}

impl Default for KernelArgList {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KernelArgList {
    fn drop(&mut self) {
        for k in &mut self.kept[..self.n_kept] {
            // SAFETY: the first `n_kept` are initialised, and dropped once (the list goes).
            unsafe { k.assume_init_drop() };
        }
    }
}

impl KernelArgList {
    /// Arguments a list holds without allocating.
    pub const INLINE_ARGS: usize = 32;
    /// Bytes of argument values a list holds without allocating: the limit on a kernel's
    /// parameters before CUDA 12.1 (and on GPUs older than Volta), more than most kernels take.
    pub const INLINE_BYTES: usize = 4096;
    /// The most bytes of argument values a list takes: no kernel takes more (CUDA 12.1+ on Volta
    /// and newer; 4096 bytes elsewhere).
    pub const MAX_BYTES: usize = 32764;
    /// The largest alignment a value keeps in the list; more aligned values are stored 16-byte
    /// aligned (the driver copies parameter bytes, so only readers of the list's memory care).
    const MAX_ALIGN: usize = 16;

    /// An empty list.
    #[inline]
    pub fn new() -> Self {
        Self {
            len: 0,
            end: 0,
            total: 0,
            n_kept: 0,
            spill: None,
            kept_spill: Vec::new(),
            offsets: [MaybeUninit::uninit(); Self::INLINE_ARGS],
            sizes: [MaybeUninit::uninit(); Self::INLINE_ARGS],
            kept: [const { MaybeUninit::uninit() }; Self::INLINE_ARGS],
            bytes: [UNINIT; Self::INLINE_BYTES / 16],
        }
    }

    /// Appends `arg`: copies its value in and keeps what it names alive with the list. Refused
    /// (and the list unchanged) when the values would exceed [`MAX_BYTES`](Self::MAX_BYTES).
    #[inline]
    pub fn push<A: KernelArg>(&mut self, arg: A) -> Result<&mut Self> {
        let value = arg.to_param();
        let dst = self.reserve(size_of::<A::Param>(), align_of::<A::Param>())?;
        // SAFETY: `reserve` made room for the value at `dst` (aligned at most 16 bytes, so
        // possibly less than `Param`). NoUninit: every byte written is initialised.
        unsafe { dst.cast::<A::Param>().write_unaligned(value) };
        arg.retain(&mut |r| self.keep(r));
        Ok(self)
    }

    /// Appends a value given as raw bytes, stored at an offset aligned to `align` (a power of
    /// two; at most 16 is kept). Refused (and the list unchanged) for another `align`, or when
    /// the values would exceed [`MAX_BYTES`](Self::MAX_BYTES).
    ///
    /// # Safety
    /// `bytes` must be a valid value of the kernel parameter's type (the launch checks only its
    /// size). Device memory it addresses is not kept alive: hand what keeps it alive to
    /// [`keep_alive`](Self::keep_alive), or keep it valid for every launch and replay yourself.
    pub unsafe fn push_bytes(&mut self, bytes: &[u8], align: usize) -> Result<&mut Self> {
        if !align.is_power_of_two() {
            return Err(Error::misuse(
                "KernelArgList::push_bytes",
                Misuse::NotPowerOfTwo { align },
                format!("the alignment {align} is not a power of two"),
            ));
        }
        let dst = self.reserve(bytes.len(), align)?;
        // SAFETY: `reserve` made room for `bytes` at `dst`; `bytes` is another object.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        Ok(self)
    }

    /// Keeps `resource` alive with the list, and with each graph node the list is captured or
    /// rebound into (for memory that raw values address, see [`push_bytes`](Self::push_bytes)).
    pub fn keep_alive(&mut self, resource: Resource) -> &mut Self {
        self.keep(resource);
        self
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list has no arguments.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every argument and kept resource (and frees heap storage).
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// The values' sizes, in order.
    #[inline]
    fn sizes(&self) -> &[usize] {
        match &self.spill {
            // SAFETY: the first `len` sizes are initialised.
            None => unsafe { std::slice::from_raw_parts(self.sizes.as_ptr().cast(), self.len) },
            Some(s) => &s.sizes,
        }
    }

    /// Appends a value of `size` bytes aligned to `align` (a power of two) and returns where its
    /// bytes go: the caller writes all of them.
    #[inline]
    fn reserve(&mut self, size: usize, align: usize) -> Result<*mut u8> {
        let total = self.total + size;
        if total > Self::MAX_BYTES {
            return Err(too_many_bytes(total));
        }
        let mask = align.min(Self::MAX_ALIGN) - 1;
        let offset = (self.end + mask) & !mask;
        let end = offset + size;
        if self.spill.is_none() && (end > Self::INLINE_BYTES || self.len == Self::INLINE_ARGS) {
            self.move_to_heap();
        }
        let base = match &mut self.spill {
            None => self.bytes.as_mut_ptr(),
            Some(s) => {
                let chunks = end.div_ceil(size_of::<Chunk>());
                if s.bytes.len() < chunks {
                    s.bytes.resize(chunks, UNINIT);
                }
                s.bytes.as_mut_ptr()
            }
        };
        match &mut self.spill {
            None => {
                self.offsets[self.len].write(offset);
                self.sizes[self.len].write(size);
            }
            Some(s) => {
                s.offsets.push(offset);
                s.sizes.push(size);
            }
        }
        (self.len, self.end, self.total) = (self.len + 1, end, total);
        // SAFETY: the storage `base` points at holds at least `end` bytes (inline: `end` is at
        // most INLINE_BYTES; spilled: resized above).
        Ok(unsafe { base.cast::<u8>().add(offset) })
    }

    #[cold]
    fn move_to_heap(&mut self) {
        let chunks = self.end.div_ceil(size_of::<Chunk>());
        // SAFETY: while inline, the first `len` offsets and sizes are initialised.
        let init = |a: &[MaybeUninit<usize>]| unsafe {
            std::slice::from_raw_parts(a.as_ptr().cast::<usize>(), self.len).to_vec()
        };
        self.spill = Some(Box::new(Spill {
            bytes: self.bytes[..chunks].to_vec(),
            offsets: init(&self.offsets),
            sizes: init(&self.sizes),
        }));
    }

    #[inline]
    fn keep(&mut self, resource: Resource) {
        if let Some(slot) = self.kept.get_mut(self.n_kept) {
            slot.write(resource);
            self.n_kept += 1;
        } else {
            self.kept_spill.push(resource);
        }
    }
}

#[cold]
fn too_many_bytes(total: usize) -> Error {
    Error::misuse(
        "KernelArgList::push",
        Misuse::ArgumentsTooLarge {
            bytes: total,
            max: KernelArgList::MAX_BYTES,
        },
        format!(
            "{total} bytes of arguments exceed the {} bytes any kernel takes",
            KernelArgList::MAX_BYTES
        ),
    )
}

impl KernelArgs for KernelArgList {
    #[inline]
    fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R) -> R {
        let (base, offsets) = match &self.spill {
            // SAFETY: the first `len` offsets are initialised.
            None => (self.bytes.as_ptr(), unsafe {
                std::slice::from_raw_parts(self.offsets.as_ptr().cast::<usize>(), self.len)
            }),
            Some(s) => (s.bytes.as_ptr(), &s.offsets[..]),
        };
        // The driver only reads through these pointers (`void**` is its calling convention).
        let at = |offset: usize| base.cast::<u8>().wrapping_add(offset) as *mut c_void;
        if offsets.len() <= Self::INLINE_ARGS {
            let mut ptrs = [MaybeUninit::<*mut c_void>::uninit(); Self::INLINE_ARGS];
            for (p, &o) in ptrs.iter_mut().zip(offsets) {
                p.write(at(o));
            }
            // SAFETY: the first `offsets.len()` pointers were written just above.
            let ptrs = unsafe {
                std::slice::from_raw_parts_mut(
                    ptrs.as_mut_ptr().cast::<*mut c_void>(),
                    offsets.len(),
                )
            };
            f(ptrs, self.sizes())
        } else {
            let mut ptrs: Vec<*mut c_void> = offsets.iter().map(|&o| at(o)).collect();
            f(&mut ptrs, self.sizes())
        }
    }

    fn retain(&self, keep: &mut Vec<Resource>) {
        // SAFETY: the first `n_kept` are initialised.
        let inline = self.kept[..self.n_kept]
            .iter()
            .map(|k| unsafe { k.assume_init_ref() });
        keep.extend(inline.chain(&self.kept_spill).cloned());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Each parameter's bytes, through the pointers and sizes a launch sees.
    fn params(args: &impl KernelArgs) -> Vec<Vec<u8>> {
        args.with_params(|ptrs, sizes| {
            assert_eq!(ptrs.len(), sizes.len());
            ptrs.iter()
                .zip(sizes)
                // SAFETY: each pointer addresses `size` initialised bytes alive for the call.
                .map(|(p, &s)| unsafe { std::slice::from_raw_parts(*p as *const u8, s) }.to_vec())
                .collect()
        })
    }

    /// An argument that keeps a resource alive, as a buffer does.
    struct Owned(Arc<u32>);
    // SAFETY: the value addresses nothing; the resource is handed over anyway, for the test.
    unsafe impl KernelArg for Owned {
        type Param = u32;
        fn to_param(&self) -> u32 {
            *self.0
        }
        fn retain(&self, keep: &mut dyn FnMut(Resource)) {
            keep(self.0.clone());
        }
    }

    #[test]
    fn tuple_args_expose_values_and_sizes() {
        let n = 7i32;
        let a = 2.5f32;
        (a, n, 3u64).with_params(|ptrs, sizes| {
            assert_eq!(sizes, &[4, 4, 8]);
            // SAFETY: the pointers point at the values just converted.
            unsafe {
                assert_eq!(*(ptrs[0] as *const f32), 2.5);
                assert_eq!(*(ptrs[1] as *const i32), 7);
                assert_eq!(*(ptrs[2] as *const u64), 3);
            }
        });
        ().with_params(|ptrs, sizes| assert!(ptrs.is_empty() && sizes.is_empty()));
        let mut keep = Vec::new();
        (Owned(Arc::new(1)), &Owned(Arc::new(2)), 3u8).retain(&mut keep);
        assert_eq!(keep.len(), 2);
    }

    #[test]
    fn arg_list_holds_the_values_a_tuple_would() {
        let (a, n, p) = (rand_f32(), rand::random::<i32>(), rand::random::<u64>());
        let by_ref: &i32 = &n;
        let mut list = KernelArgList::new();
        list.push(a).unwrap().push(by_ref).unwrap().push(p).unwrap();
        list.push(7u8)
            .unwrap()
            .push(-2i16)
            .unwrap()
            .push(1.5f64)
            .unwrap();
        assert_eq!(list.len(), 6);
        let tuple = (a, n, p, 7u8, -2i16, 1.5f64);
        assert_eq!(params(&list), params(&tuple));
        assert_eq!(params(&&list), params(&tuple));
    }

    #[test]
    fn arg_list_keeps_each_values_alignment() {
        let mut list = KernelArgList::new();
        list.push(1u8)
            .unwrap()
            .push(2u64)
            .unwrap()
            .push(3u16)
            .unwrap();
        // SAFETY: 12 initialised bytes, and alignments up to 16 are kept.
        unsafe { list.push_bytes(&[9; 12], 16).unwrap() };
        list.push(4u32).unwrap();
        list.with_params(|ptrs, sizes| {
            assert_eq!(sizes, &[1, 8, 2, 12, 4]);
            for (p, align) in ptrs.iter().zip([1, 8, 2, 16, 4]) {
                assert_eq!(*p as usize % align, 0, "{sizes:?}");
            }
            // SAFETY: each pointer is aligned for its value's type (asserted above).
            unsafe {
                assert_eq!(*(ptrs[1] as *const u64), 2);
                assert_eq!(*(ptrs[4] as *const u32), 4);
            }
            // Padding is skipped, not counted: the u64 starts 8 bytes after the u8.
            assert_eq!(ptrs[1] as usize - ptrs[0] as usize, 8);
            assert_eq!(ptrs[3] as usize - ptrs[0] as usize, 32);
        });
    }

    #[test]
    fn arg_list_keeps_what_its_arguments_name() {
        let owner = Arc::new(5u32);
        let mut list = KernelArgList::new();
        for _ in 0..KernelArgList::INLINE_ARGS + 3 {
            list.push(Owned(owner.clone())).unwrap();
        }
        list.keep_alive(Arc::new("raw memory's owner"));
        assert_eq!(Arc::strong_count(&owner), KernelArgList::INLINE_ARGS + 4);
        let mut keep = Vec::new();
        list.retain(&mut keep);
        assert_eq!(keep.len(), KernelArgList::INLINE_ARGS + 4);
        drop(keep);
        list.clear();
        assert!(list.is_empty());
        assert_eq!(Arc::strong_count(&owner), 1);
    }

    #[test]
    fn arg_list_moves_to_the_heap_past_its_inline_capacity() {
        let values: Vec<u64> = (0..KernelArgList::INLINE_ARGS as u64 + 9)
            .map(|_| rand::random())
            .collect();
        let mut list = KernelArgList::new();
        for v in &values {
            list.push(v).unwrap();
        }
        let got = params(&list);
        let want: Vec<Vec<u8>> = values.iter().map(|v| v.to_ne_bytes().to_vec()).collect();
        assert_eq!(got, want);
        // Past the inline bytes: values written before and after the move survive it.
        let big: Vec<u8> = (0..KernelArgList::INLINE_BYTES).map(|i| i as u8).collect();
        let mut list = KernelArgList::new();
        list.push(0xABCD_u16).unwrap();
        // SAFETY: plain bytes, addressing nothing.
        unsafe { list.push_bytes(&big, 8).unwrap() };
        list.push(-1i32).unwrap();
        let got = params(&list);
        assert_eq!(got[0], 0xABCD_u16.to_ne_bytes());
        assert_eq!(got[1], big);
        assert_eq!(got[2], (-1i32).to_ne_bytes());
    }

    #[test]
    fn arg_list_refuses_more_than_any_kernel_takes_and_stays_unchanged() {
        let mut list = KernelArgList::new();
        list.push(1u32).unwrap();
        let most = vec![0u8; KernelArgList::MAX_BYTES - 4];
        // SAFETY: plain bytes.
        unsafe { list.push_bytes(&most, 1).unwrap() };
        let e = list.push(2u8).unwrap_err();
        assert_eq!(
            e.misuse_kind(),
            Some(&Misuse::ArgumentsTooLarge {
                bytes: KernelArgList::MAX_BYTES + 1,
                max: KernelArgList::MAX_BYTES
            }),
            "{e}"
        );
        assert_eq!(list.len(), 2);
        // SAFETY: refused before anything is stored.
        let e = unsafe { KernelArgList::new().push_bytes(&[0; 4], 3) }.unwrap_err();
        assert_eq!(
            e.misuse_kind(),
            Some(&Misuse::NotPowerOfTwo { align: 3 }),
            "{e}"
        );
    }

    fn rand_f32() -> f32 {
        rand::random()
    }
}
