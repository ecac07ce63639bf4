//! graph-rt-dev: the workspace's examples (`examples/`) and benches (`benches/`), not published.
//! The library users depend on is `graph-rt` (the folder `graph-rt/`); its manual is
//! `graph_rt::manual`.
#![deny(missing_docs)]

/// The commit the examples and benches were built from (`+changes` when tracked files differed
/// from it; `unknown` without git), as the build script found it.
pub const BUILT_FROM: &str = env!("GRAPH_RT_DEV_COMMIT");

pub mod decode;
