//! What graphs and execs keep alive.

use std::any::Any;
use std::sync::Arc;

/// Something a graph keeps alive while any of its nodes may use it (an allocation, a module).
pub type Resource = Arc<dyn Any + Send + Sync>;
