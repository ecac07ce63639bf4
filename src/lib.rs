//! graph-rt-dev: the workspace's examples (`examples/`) and benches (`benches/`), not published.
//! The library users depend on is `graph-rt` (the folder `graph-rt/`); its manual is
//! `graph_rt::manual`.
#![deny(missing_docs)]
