//! Launching kernels: configurations, arguments, and the launch itself.
//!
//! Depends on `driver/`; `graph/` builds on it.

mod arg_list;
mod args;
mod config;
mod launcher;

pub use arg_list::KernelArgList;
pub use args::{ArgSlot, KernelArg, KernelArgs, ScalarKind};
pub use config::{Dim3, LaunchConfig};
pub(crate) use launcher::check_layout;
pub use launcher::Launcher;
