//! Kernel arguments: single values ([`KernelArg`]) and whole argument lists ([`KernelArgs`]).

use std::ffi::c_void;
use std::mem::size_of;

use bytemuck::Pod;
use cuda_sys::CUdeviceptr;

use crate::driver::DeviceBuffer;
use crate::resource::Resource;

/// A value that can be passed to a kernel parameter.
///
/// `Param` is the plain value the kernel receives (a number, a device address, a struct passed
/// by value); its size is checked against the kernel's parameter layout at launch. Implement it
/// for your own argument kinds (a foreign buffer, a table slot) to pass them directly.
///
/// Graphs keep alive what arguments name in [`KernelArg::retain`] (a [`DeviceBuffer`]'s
/// allocation). A raw device address passed as a number (`u64`) is not kept alive: the caller of
/// the (unsafe) launch, capture or update promises that the memory stays valid for every replay.
pub trait KernelArg {
    /// The value copied into the kernel's parameter buffer.
    type Param: Copy + 'static;
    /// The value for this launch.
    fn to_param(&self) -> Self::Param;
    /// Adds what must stay alive while a graph node launched with this argument exists (the
    /// allocation behind a device address). Plain values have nothing to keep.
    fn retain(&self, _keep: &mut Vec<Resource>) {}
}

macro_rules! by_value {
    ($($t:ty),*) => {$(
        impl KernelArg for $t {
            type Param = $t;
            #[inline]
            fn to_param(&self) -> $t { *self }
        }
    )*};
}
by_value!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize, f32, f64);

impl<T: Pod> KernelArg for &DeviceBuffer<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        self.as_raw()
    }
    fn retain(&self, keep: &mut Vec<Resource>) {
        keep.push(self.allocation().clone());
    }
}

impl<T: Pod> KernelArg for &mut DeviceBuffer<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        self.as_raw()
    }
    fn retain(&self, keep: &mut Vec<Resource>) {
        keep.push(self.allocation().clone());
    }
}

/// A whole argument list: tuples of up to 16 [`KernelArg`]s (and `()`).
pub trait KernelArgs {
    /// Calls `f` with a pointer to each parameter value and each value's size; the values live
    /// on the stack for the duration of the call.
    fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R) -> R;
    /// Adds what each argument needs kept alive (see [`KernelArg::retain`]).
    fn retain(&self, keep: &mut Vec<Resource>);
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
                $(self.$idx.retain(keep);)*
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
