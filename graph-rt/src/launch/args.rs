//! Kernel arguments: single values ([`KernelArg`]) and whole argument lists ([`KernelArgs`]):
//! tuples written at compile time (here) and [`KernelArgList`](super::KernelArgList)s built at run time (`arg_list`).

use std::ffi::c_void;
use std::mem::size_of;

use bytemuck::{NoUninit, Pod};
use graph_rt_sys::CUdeviceptr;

use crate::driver::{DeviceBuffer, DeviceView};
use crate::resource::Resource;

/// A value that can be passed to a kernel parameter.
///
/// `Param` is the plain value the kernel receives (a number, a device address, a struct passed
/// by value); its size is checked against the kernel's parameter layout at launch. Implement it
/// for your own argument kinds (a foreign buffer, a table slot) to pass them directly, in tuples
/// and in [`KernelArgList`](super::KernelArgList)s.
///
/// Graphs keep alive what arguments hand to [`KernelArg::retain`] (a [`DeviceBuffer`]'s
/// allocation). A raw device address passed as a number (`u64`) owns nothing and keeps nothing
/// alive: the caller of the (unsafe) launch, capture or update promises that the memory stays
/// valid for every replay.
///
/// `&DeviceBuffer<T>` and `&mut DeviceBuffer<T>` pass the same device address and keep the same
/// allocation alive. The `&mut` form states that the kernel writes the buffer, and in a tuple the
/// borrow checker then refuses the same buffer as a second argument (`(&y, &mut y)`); neither form
/// makes the launch safe, and a [`KernelArgList`](super::KernelArgList) does not borrow what it holds, so it cannot
/// refuse such aliasing.
///
/// A custom argument: a buffer passed by value with its length, as a kernel taking
/// `struct Span { float* ptr; unsigned long long len; }` declares it:
///
/// ```no_run
/// use graph_rt::{DeviceBuffer, KernelArg, Resource};
///
/// #[derive(Clone, Copy, bytemuck::NoUninit)]
/// #[repr(C)]
/// struct SpanParam {
///     ptr: u64,
///     len: u64,
/// }
///
/// struct Span<'a>(&'a DeviceBuffer<f32>);
///
/// // SAFETY: `ptr` is inside the buffer's allocation, which `retain` hands over (as the
/// // buffer's own argument does); `SpanParam` has no padding.
/// unsafe impl KernelArg for Span<'_> {
///     type Param = SpanParam;
///     fn to_param(&self) -> SpanParam {
///         SpanParam { ptr: self.0.as_raw(), len: self.0.len() as u64 }
///     }
///     fn retain(&self, keep: &mut dyn FnMut(Resource)) {
///         KernelArg::retain(&self.0, keep)
///     }
/// }
/// ```
///
/// # Safety
/// [`KernelArg::retain`] must hand over everything that keeps valid the device memory that the
/// values [`KernelArg::to_param`] returns address on this argument's behalf (the allocation
/// behind a buffer or view): [`CaptureScope::launch`](crate::CaptureScope::launch) and exec
/// rebinding rely on it to keep that memory alive for every replay. `Param` has no padding or
/// uninitialised bytes ([`NoUninit`]), since its bytes are copied into the kernel's parameters.
pub unsafe trait KernelArg {
    /// The value copied into the kernel's parameter buffer.
    type Param: NoUninit;
    /// The value for this launch.
    fn to_param(&self) -> Self::Param;
    /// Hands `keep` what must stay alive while a graph node launched with this argument exists
    /// (the allocation behind a device address). Plain values have nothing to keep.
    fn retain(&self, _keep: &mut dyn FnMut(Resource)) {}
    /// What the argument is for a kernel whose parameters come from an argument table: a plain
    /// value, or the address of a table slot (what [`TableKernel`](crate::table::TableKernel) checks
    /// against the kernel's table signature). Arguments that are not slots keep the default.
    fn slot(&self) -> ArgSlot {
        ArgSlot::Value
    }
}

/// What a kernel argument passes, as [`KernelArg::slot`] describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgSlot {
    /// A plain value (a number, a device address, a struct).
    Value,
    /// The address of a pointer slot of table `table`, whose bindings are aligned to `align`
    /// bytes.
    Pointer {
        /// The table's identity.
        table: u64,
        /// The alignment every binding of the slot has.
        align: usize,
    },
    /// The address of a scalar slot of table `table` holding a value of `size` bytes.
    Scalar {
        /// The table's identity.
        table: u64,
        /// The scalar's size in bytes.
        size: usize,
        /// Every value the slot is set to is a multiple of this (a power of two; 1 for any).
        multiple_of: u64,
        /// Whether the slot holds integers or floating-point numbers.
        kind: ScalarKind,
    },
}

/// Whether a scalar is an integer or a floating-point number: a scalar slot and the parameter a
/// kernel reads through it must agree (a 4-byte `f32` is not a 4-byte `i32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    /// A signed or unsigned integer.
    Integer,
    /// A floating-point number.
    Float,
}

macro_rules! by_value {
    ($($t:ty),*) => {$(
        // SAFETY: a plain number addresses nothing on its own behalf.
        unsafe impl KernelArg for $t {
            type Param = $t;
            #[inline]
            fn to_param(&self) -> $t { *self }
        }
    )*};
}
by_value!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize, f32, f64);

// SAFETY: forwards both methods to the referenced argument.
unsafe impl<A: KernelArg> KernelArg for &A {
    type Param = A::Param;
    #[inline]
    fn to_param(&self) -> A::Param {
        (**self).to_param()
    }
    fn retain(&self, keep: &mut dyn FnMut(Resource)) {
        (**self).retain(keep)
    }
    fn slot(&self) -> ArgSlot {
        (**self).slot()
    }
}

// SAFETY: the address is inside the buffer's allocation, which `retain` hands over.
unsafe impl<T: Pod> KernelArg for &DeviceBuffer<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        self.as_raw()
    }
    fn retain(&self, keep: &mut dyn FnMut(Resource)) {
        keep(self.allocation().clone());
    }
}

// SAFETY: as for `&DeviceBuffer<T>`.
unsafe impl<T: Pod> KernelArg for &mut DeviceBuffer<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        self.as_raw()
    }
    fn retain(&self, keep: &mut dyn FnMut(Resource)) {
        keep(self.allocation().clone());
    }
}

/// The view's first element's address; `&DeviceView<T>` passes the same.
// SAFETY: the address is inside the view's allocation, which `retain` hands over.
unsafe impl<T: Pod> KernelArg for DeviceView<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        self.as_raw()
    }
    fn retain(&self, keep: &mut dyn FnMut(Resource)) {
        keep(self.allocation().clone());
    }
}

/// A whole argument list: tuples of up to 16 [`KernelArg`]s (and `()`), a [`KernelArgList`](super::KernelArgList), and
/// a reference to any of them.
pub trait KernelArgs {
    /// Calls `f` with a pointer to each parameter value and each value's size; the values live
    /// for the duration of the call (on the stack for tuples), and are only read through the
    /// pointers.
    fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R) -> R;
    /// Adds what each argument needs kept alive (see [`KernelArg::retain`]).
    fn retain(&self, keep: &mut Vec<Resource>);
    /// Calls `each` with every argument's parameter size and [`ArgSlot`], in order, and returns
    /// true; returns false where the list cannot say (then a
    /// [`TableKernel`](crate::table::TableKernel) refuses it). Allocates nothing.
    fn describe(&self, _each: &mut dyn FnMut(usize, ArgSlot)) -> bool {
        false
    }
}

impl<L: KernelArgs> KernelArgs for &L {
    #[inline]
    fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R) -> R {
        (**self).with_params(f)
    }
    fn retain(&self, keep: &mut Vec<Resource>) {
        (**self).retain(keep)
    }
    fn describe(&self, each: &mut dyn FnMut(usize, ArgSlot)) -> bool {
        (**self).describe(each)
    }
}

macro_rules! tuple_args {
    ($($name:ident $idx:tt),*) => {
        impl<$($name: KernelArg),*> KernelArgs for ($($name,)*) {
            #[inline]
            #[allow(unused_mut, unused_variables)]
            fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R) -> R {
                let values = ($(self.$idx.to_param(),)*);
                let mut ptrs = [$(&values.$idx as *const $name::Param as *mut c_void),*];
                f(&mut ptrs, &[$(size_of::<$name::Param>()),*])
            }
            #[allow(unused_variables)]
            fn retain(&self, keep: &mut Vec<Resource>) {
                $(self.$idx.retain(&mut |r| keep.push(r));)*
            }
            #[allow(unused_variables)]
            fn describe(&self, each: &mut dyn FnMut(usize, ArgSlot)) -> bool {
                $(each(size_of::<$name::Param>(), self.$idx.slot());)*
                true
            }
        }
    };
}
tuple_args!();
tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);
