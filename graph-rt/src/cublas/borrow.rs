//! A cuBLAS handle the caller owns (a framework's: candle's, cudarc's `CudaBlas`, PyTorch's),
//! lent to graph-rt for a while: [`Cublas::borrow_raw`] sets graph-rt's stream and a
//! capture-safe workspace of its own on it, and the drop gives the handle back as it found it.

use std::ffi::c_void;

use graph_rt_sys::{CUdeviceptr, CUstream};

use super::handle::Cublas;
use super::sys::{self, CublasLib, Handle};
use crate::driver::{CaptureStatus, Context, DeviceBuffer, Stream};
use crate::error::{Error, Misuse, Result};

/// What a borrowed handle had before graph-rt set its own stream and workspace, to give back.
pub(super) struct Borrowed {
    /// The stream the handle had (`cublasGetStream_v2`).
    stream: CUstream,
    /// The workspace to set again, if the caller named one; else cuBLAS's own pool, which
    /// `cublasSetStream_v2` puts back.
    workspace: Option<(CUdeviceptr, usize)>,
}

impl Borrowed {
    /// Sets the handle's stream back, then the workspace the caller named.
    pub(super) fn give_back(self, handle: Handle, lib: &CublasLib, ctx: &Context) -> Result<()> {
        ctx.bind()?;
        // SAFETY: the caller's live handle (borrow_raw's contract) and the stream it had.
        sys::check_status("cublasSetStream_v2", unsafe {
            (lib.set_stream)(handle, self.stream)
        })?;
        if let Some((ptr, bytes)) = self.workspace {
            // SAFETY: the workspace the caller said the handle had (borrow_raw's contract).
            sys::check_status("cublasSetWorkspace_v2", unsafe {
                (lib.set_workspace)(handle, ptr as *mut c_void, bytes)
            })?;
        }
        Ok(())
    }
}

impl Cublas {
    /// Lends graph-rt `handle`, a cuBLAS handle the caller owns and keeps (it is never
    /// destroyed here): graph-rt reads the stream the handle has, sets `stream` on it and a
    /// workspace of its own of `workspace_bytes` (so GEMMs can be captured, and replays keep
    /// the workspace alive), and when the value is dropped sets the stream back and then
    /// `restore_workspace` — the caller's workspace (address, bytes), which cuBLAS cannot
    /// report. Without it the handle goes back to cuBLAS's own workspace pool (what
    /// `cublasSetStream_v2` gives every handle). The GEMMs recorded while it was lent keep
    /// using graph-rt's workspace at every replay.
    ///
    /// Loads cuBLAS as [`Cublas::new`] does; it must be the library the handle was made by.
    /// Not while `stream` captures (the workspace is allocated here).
    ///
    /// # Safety
    /// `handle` is a live `cublasHandle_t` of `stream`'s context, made by the cuBLAS graph-rt
    /// loads (see [`Cublas`]); it outlives the returned value, and nothing else uses it, changes
    /// its stream or workspace, or destroys it while the value lives. `restore_workspace`, if
    /// given, is device memory of that context the handle may use again after.
    pub unsafe fn borrow_raw(
        handle: *mut c_void,
        stream: &Stream,
        workspace_bytes: usize,
        restore_workspace: Option<(CUdeviceptr, usize)>,
    ) -> Result<Self> {
        const CALL: &str = "Cublas::borrow_raw";
        if handle.is_null() {
            return Err(Error::misuse(
                CALL,
                Misuse::NullHandle,
                "the cuBLAS handle is null: pass the framework's live handle",
            ));
        }
        let lib = sys::library()?;
        if stream.capture_status()? != CaptureStatus::None {
            return Err(Error::misuse(
                CALL,
                Misuse::Capturing,
                "the stream is capturing: lend the cuBLAS handle (which allocates a workspace) before the capture",
            ));
        }
        let workspace = DeviceBuffer::<u8>::alloc(stream.context(), workspace_bytes)?;
        stream.context().bind()?;
        let mut previous: CUstream = std::ptr::null_mut();
        // SAFETY: the caller's live handle (contract) and a valid out-pointer.
        sys::check_status("cublasGetStream_v2", unsafe {
            (lib.get_stream)(handle, &mut previous)
        })?;
        let borrowed = Borrowed {
            stream: previous,
            workspace: restore_workspace,
        };
        // SAFETY: forwarded to the caller; the value gives the handle back instead of
        // destroying it.
        unsafe { Self::on_handle(handle, lib, stream, workspace, Some(borrowed)) }
    }
}

/// A raw handle as a framework would hold one, for the tests of lending it.
#[cfg(test)]
pub(crate) mod raw {
    use super::*;

    /// A new handle of the current context.
    pub(crate) fn create() -> Handle {
        let lib = sys::library().unwrap();
        let mut h = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        sys::check_status("cublasCreate_v2", unsafe { (lib.create)(&mut h) }).unwrap();
        h
    }

    /// Sets the handle's stream and workspace, as its framework would.
    pub(crate) fn set(h: Handle, stream: CUstream, workspace: (CUdeviceptr, usize)) {
        let lib = sys::library().unwrap();
        // SAFETY: a live handle, a live stream and workspace of its context.
        unsafe {
            sys::check_status("cublasSetStream_v2", (lib.set_stream)(h, stream)).unwrap();
            sys::check_status(
                "cublasSetWorkspace_v2",
                (lib.set_workspace)(h, workspace.0 as *mut c_void, workspace.1),
            )
            .unwrap();
        }
    }

    /// The handle's stream.
    pub(crate) fn stream(h: Handle) -> CUstream {
        let lib = sys::library().unwrap();
        let mut s = std::ptr::null_mut();
        // SAFETY: a live handle and a valid out-pointer.
        sys::check_status("cublasGetStream_v2", unsafe { (lib.get_stream)(h, &mut s) }).unwrap();
        s
    }

    /// Destroys the handle (its work finished).
    pub(crate) fn destroy(h: Handle) {
        let lib = sys::library().unwrap();
        // SAFETY: a live handle nothing uses any more.
        sys::check_status("cublasDestroy_v2", unsafe { (lib.destroy)(h) }).unwrap();
    }
}
