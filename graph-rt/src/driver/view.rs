//! Views: elements of a device buffer, usable wherever a buffer is.

use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

use bytemuck::Pod;
use graph_rt_sys::CUdeviceptr;

use super::allocation::Allocation;
use super::memory::{bounds, read_on, same_len, write_on};
use super::Stream;
use crate::error::Result;

/// Elements of a [`DeviceBuffer`](super::DeviceBuffer), made by [`DeviceBuffer::slice`](super::DeviceBuffer::slice) (and [`DeviceView::slice`]):
/// the address of the first, a length, and a share of the allocation, which the view keeps
/// alive. Cloning is cheap.
///
/// A view is a kernel argument as a buffer is (its first element's address), in launches,
/// captures and exec rebinding; graphs keep its allocation alive, so a replay stays right after
/// both the buffer and the view are dropped. A view outlives the buffer it was made from, and
/// several views may cover the same elements: like `&DeviceBuffer`, it does not make the
/// kernels that write through it exclusive.
pub struct DeviceView<T: Pod> {
    ptr: CUdeviceptr,
    len: usize,
    alloc: Arc<Allocation>,
    _t: PhantomData<T>,
}

// SAFETY: as for DeviceBuffer: device memory may be used from any thread, and the view holds a
// share of its allocation.
unsafe impl<T: Pod> Send for DeviceView<T> {}
// SAFETY: shared references only read the pointer and length.
unsafe impl<T: Pod> Sync for DeviceView<T> {}

impl<T: Pod> Clone for DeviceView<T> {
    fn clone(&self) -> Self {
        Self {
            alloc: self.alloc.clone(),
            ..*self
        }
    }
}

impl<T: Pod> std::fmt::Debug for DeviceView<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceView")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl<T: Pod> DeviceView<T> {
    /// The device address of the first element. Valid while `self` lives; do not free it.
    pub fn as_raw(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The allocation, for graphs to keep alive.
    pub(crate) fn allocation(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    /// A view of elements `range` of this view; a range not within it is a
    /// [`Misuse::OutOfRange`](crate::Misuse::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<T>> {
        let range = bounds("DeviceView::slice", range, self.len)?;
        Ok(view(self.ptr, &self.alloc, range))
    }

    /// Copies the view into a new `Vec` in the order of `stream` (see [`DeviceBuffer::read_on`](super::DeviceBuffer::read_on)).
    pub fn read_on(&self, stream: &Stream) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host_on(stream, &mut v)?;
        Ok(v)
    }

    /// Copies the view into `dst` in the order of `stream`; lengths must match.
    pub fn copy_to_host_on(&self, stream: &Stream, dst: &mut [T]) -> Result<()> {
        const CALL: &str = "DeviceView::copy_to_host_on";
        same_len(CALL, self.len, dst.len())?;
        read_on(stream, self.ptr, dst, CALL)
    }

    /// Copies `src` into the view's elements in the order of `stream` (see
    /// [`DeviceBuffer::write_on`](super::DeviceBuffer::write_on)); lengths must match.
    pub fn write_on(&self, stream: &Stream, src: &[T]) -> Result<()> {
        const CALL: &str = "DeviceView::write_on";
        same_len(CALL, self.len, src.len())?;
        write_on(stream, self.ptr, src, CALL)
    }
}

/// The view of elements `start..end` of the allocation whose element 0 is at `ptr`.
pub(super) fn view<T: Pod>(
    ptr: CUdeviceptr,
    alloc: &Arc<Allocation>,
    (start, end): (usize, usize),
) -> DeviceView<T> {
    DeviceView {
        ptr: ptr + (start * std::mem::size_of::<T>()) as CUdeviceptr,
        len: end - start,
        alloc: alloc.clone(),
        _t: PhantomData,
    }
}
