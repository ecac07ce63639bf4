//! Production sampling of a kept mode: one call in `every` timed between two events, read at
//! the next sampled call if they have completed (never waited for), the last eight kept; a
//! median above the profiled one by more than `drift` asks for profiling again.

use std::collections::VecDeque;

use crate::driver::{Event, EventFlags, Stream};
use crate::error::Result;
use crate::timing::median;

/// Samples kept for the drift check.
const WINDOW: usize = 8;

pub(super) struct Sampler {
    every: u64,
    drift: f64,
    // Calls left before the next sampled one (a countdown: no division on the call path).
    until: u64,
    // The pair of the last sampled call, while it may not have completed.
    pending: Option<(Event, Event)>,
    // A pair ready for the next sample.
    spare: Option<(Event, Event)>,
    // Recording a sample now (between `begin` and `end`).
    open: Option<(Event, Event)>,
    window: VecDeque<f64>,
    baseline: Option<f64>,
    // `over(window, baseline, drift)`, updated where either changes: the call path reads a bool
    // (a median there allocated and sorted on every call once the window was full).
    drifted: bool,
}

impl Sampler {
    pub(super) fn new(every: u64, drift: f64) -> Self {
        Self {
            every,
            drift,
            until: every,
            pending: None,
            spare: None,
            open: None,
            window: VecDeque::new(),
            baseline: None,
            drifted: false,
        }
    }

    /// A new decision: samples are compared with `baseline` (µs a call) from now on.
    pub(super) fn reset(&mut self, baseline: Option<f64>) {
        self.baseline = baseline;
        self.window.clear();
        self.drifted = false;
        self.until = self.every;
        // A sample in flight is of the old decision's mode: its events are reused, unread.
        if let Some(pair) = self.pending.take().or_else(|| self.open.take()) {
            self.spare = Some(pair);
        }
    }

    /// Before a call: whether this call is sampled (its start event recorded). Reads the last
    /// sample first if its events have completed; skips this one if they have not.
    pub(super) fn begin(&mut self, stream: &Stream) -> Result<bool> {
        if self.every == 0 {
            return Ok(false);
        }
        self.until -= 1;
        if self.until > 0 {
            return Ok(false);
        }
        self.until = self.every;
        if let Some((start, end)) = self.pending.take() {
            if !end.is_complete()? {
                self.pending = Some((start, end));
                return Ok(false);
            }
            let us = Event::elapsed_ms(&start, &end)? as f64 * 1e3;
            if us.is_finite() {
                if self.window.len() == WINDOW {
                    self.window.pop_front();
                }
                self.window.push_back(us);
                self.drifted = over(&self.window, self.baseline, self.drift);
            }
            self.spare = Some((start, end));
        }
        let pair = match self.spare.take() {
            Some(p) => p,
            None => {
                let ctx = stream.context();
                (
                    Event::new(ctx, EventFlags::Timing)?,
                    Event::new(ctx, EventFlags::Timing)?,
                )
            }
        };
        pair.0.record(stream)?;
        self.open = Some(pair);
        Ok(true)
    }

    /// After a sampled call: its end event recorded.
    pub(super) fn end(&mut self, stream: &Stream) -> Result<()> {
        if let Some(pair) = self.open.take() {
            pair.1.record(stream)?;
            self.pending = Some(pair);
        }
        Ok(())
    }

    /// Whether the last samples' median rose above the baseline by more than the drift. Only
    /// upward: a call queued behind earlier work hides its launch cost, so a pipelined loop's
    /// samples run below a profile measured from an idle stream; a kept-eager step that got
    /// faster is looked at again after `retry_after` calls, and a graph that got faster still
    /// wins.
    #[inline]
    pub(super) fn drifted(&self) -> bool {
        self.drifted
    }
}

/// Whether a full window's median is above `baseline` by more than `drift` (see
/// [`Sampler::drifted`]).
fn over(window: &VecDeque<f64>, baseline: Option<f64>, drift: f64) -> bool {
    match baseline {
        Some(b) if window.len() == WINDOW && b > 0.0 => {
            median(window.iter().copied().collect()) > b * (1.0 + drift)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{over, WINDOW};
    use std::collections::VecDeque;

    #[test]
    fn drift_needs_a_full_window_whose_median_rose_beyond_the_margin() {
        let w = |v: &[f64]| v.iter().copied().collect::<VecDeque<f64>>();
        let full_high = w(&[12.0; WINDOW]);
        assert!(over(&full_high, Some(10.0), 0.15));
        assert!(!over(&full_high, Some(10.0), 0.25), "within the margin");
        assert!(
            !over(&w(&[12.0; WINDOW - 1]), Some(10.0), 0.15),
            "not full yet"
        );
        assert!(
            !over(&w(&[8.0; WINDOW]), Some(10.0), 0.15),
            "faster is not drift"
        );
        assert!(!over(&full_high, None, 0.15) && !over(&full_high, Some(0.0), 0.15));
        let mut mixed = w(&[10.0; WINDOW]);
        mixed[0] = 100.0;
        assert!(
            !over(&mixed, Some(10.0), 0.15),
            "one slow sample moves no median"
        );
    }
}
