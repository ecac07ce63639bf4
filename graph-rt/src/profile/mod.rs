//! The overhead profiler: keep a graph only where it wins.
//!
//! "Can be captured" is not "should be deployed": a graph loses when its instantiation never
//! pays back, when its kernels are long, or when it beats eager by less than the noise.
//! [`Profiled`] wraps a [`Step`](crate::step::Step): it measures the step eagerly and as a
//! graph (CUDA events around each call, warm-up first, the modes interleaved, medians and
//! spreads), with the graph's one-time cost (captures, discovery, prelude, instantiation,
//! upload) and the device memory it took, and keeps the graph only where it beats eager by more
//! than the noise once those costs are amortized over the expected calls ([`decide()`], pure and
//! tested with injected timings); otherwise the graph is freed and the step runs eagerly. The
//! one-time cost is one host-timed build: where it alone keeps the graph off
//! ([`hinges_on_one_time`]), the step is built twice more and the median taken. A
//! step declared re-runnable is measured at once (extra runs); otherwise its first calls are
//! the samples, the modes taking turns.
//!
//! Decisions persist in a file ([`DecisionStore`]) keyed by step name, key, a fingerprint of the
//! captured work, device, driver and graph-rt build: a second process reads them and profiles
//! nothing. In production one call in [`ProfileOptions::sample_every`] is timed by events read
//! without synchronizing; a kept mode whose samples drift past the profiled median is profiled
//! again, and a step kept eager tries its graph again after
//! [`ProfileOptions::retry_after`] calls. Every decision has a reason code ([`Reason`]), goes to
//! `tracing`, and is in the step's [`ProfileReport`]; [`summary`] sums reports up (a table, and
//! JSON). [`ProfileOptions::strict`] fails instead of running eagerly when a step cannot be
//! captured.
//!
//! [`sweep`] generates the steps the profiler is judged on (seeded; the `profile` bench runs
//! them on the device).
//!
//! [`partition`] splits a step given as segments into graph and eager runs, exactly (dynamic
//! programming), by time saved minus each graph's one-time cost and a memory charge;
//! [`Segmented`] measures a step's segments on the device, plans and runs the plan.
//!
//! Depends on `step`, `driver`, `table`, `timing` and `error`; nothing depends on it.

mod decide;
mod partition;
mod profiled;
mod report;
mod sampler;
mod segments;
mod store;
mod sweep;

pub use decide::{
    decide, hinges_on_one_time, Decision, Mode, ModeCost, Policy, Reason, Stats,
    EVENT_RESOLUTION_US,
};
pub use partition::{partition, Part, PartitionPolicy, Plan, SegmentCost};
pub use profiled::{ProfileOptions, Profiled};
pub use report::{summary, ProfileReport, Summary};
pub use segments::{Segment, SegmentBody, Segmented};
pub use store::{DecisionKey, DecisionStore, StoredDecision};
pub use sweep::{sweep, SweepPoint};
