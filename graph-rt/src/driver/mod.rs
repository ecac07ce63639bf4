//! The driver's objects, each owning its handle: devices, contexts, streams, events, memory and
//! modules.
//!
//! Depends on nothing else of this crate but `error` and `resource`; `launch/` and `graph/` build
//! on it.

mod allocation;
mod call;
mod capture_gate;
mod context;
#[cfg(feature = "cudarc")]
mod cudarc_tracking;
mod device;
mod event;
#[cfg(graph_rt_fault)]
pub(crate) mod fault;
mod image;
mod lifetime;
mod mapped;
mod memory;
mod module;
mod pinned;
mod stream;
pub(crate) mod sync;
mod view;

pub(crate) use allocation::{take_freed_in_capture, Allocation};
pub(crate) use call::{cu, cu_code, injected, Returned};
pub(crate) use capture_gate::{
    enter_capture, patience as gate_patience, whole_context_wait, CaptureEntry,
};
pub(crate) use context::ContextInner;
pub use context::{current_raw, Context, GraphMemory};
pub use device::{driver_version, graph_features, init, Device, Feature};
pub use event::{Event, EventFlags};
pub(crate) use image::check_image;
pub(crate) use lifetime::{capture_lock, is_sticky, point_after, Lane, Parked, Point, Progress};
pub use mapped::MappedHostBuffer;
pub(crate) use memory::is_host_only;
pub use memory::DeviceBuffer;
pub(crate) use module::{kernel_name, param_layout_of};
pub use module::{Function, Module, ParamInfo};
pub use pinned::PinnedHostBuffer;
pub(crate) use stream::StreamInner;
pub use stream::{CaptureMode, CaptureStatus, Stream, StreamFlags};
pub use view::DeviceView;
