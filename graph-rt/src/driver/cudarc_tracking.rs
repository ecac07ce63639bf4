//! cudarc's event tracking off while graph-rt captures one of cudarc's streams (feature
//! `cudarc`): see [`TrackingPaused`].

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use crate::resource::Resource;

/// cudarc's event tracking of a context, switched off while graph-rt captures one of its
/// streams, and switched back on when dropped — on every path out of the capture, errors and
/// panics included.
///
/// With tracking on and two or more streams, every cudarc launch on a slice makes its stream
/// wait for the slice's last write and records a read event: inside a capture both cross the
/// capture's boundary and the driver refuses the launch (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`).
/// With tracking off for the capture, cudarc launches and copies are captured like any other.
///
/// What this cannot make safe: the captured nodes record no events on the slices, so cudarc
/// does not order its later work on other streams after the graph's replays, and the graph does
/// not keep the slices alive. Keep every slice a captured graph uses alive, and unwritten by
/// other streams, while the graph may replay — or move the slices into graph-rt
/// (`DeviceBuffer::from_cudarc`), whose graphs keep them. Tracking is per context and for
/// every thread: cudarc work of other threads during the capture is not tracked either (a
/// global-mode capture forbids most of it anyway).
pub(crate) struct TrackingPaused(Option<Arc<CudaContext>>);

impl Drop for TrackingPaused {
    fn drop(&mut self) {
        if let Some(ctx) = self.0.take() {
            // SAFETY: tracking was on before the capture; slices made during it carry no
            // events, as documented above.
            unsafe { ctx.enable_event_tracking() };
        }
    }
}

/// Switches off the event tracking of the cudarc context of `owner` (a wrapped stream's owner)
/// for as long as the returned value lives, if `owner` is a cudarc stream and tracking is on.
pub(crate) fn pause_tracking(owner: &Resource) -> TrackingPaused {
    let Ok(stream) = owner.clone().downcast::<CudaStream>() else {
        return TrackingPaused(None);
    };
    let ctx = stream.context().clone();
    if !ctx.is_event_tracking() {
        return TrackingPaused(None);
    }
    // SAFETY: see `TrackingPaused`: the capture records no events on the slices it uses, and
    // the caller keeps them alive and unwritten elsewhere while the graph may replay.
    unsafe { ctx.disable_event_tracking() };
    TrackingPaused(Some(ctx))
}
