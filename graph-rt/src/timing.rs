//! How graph-rt measures, in one place for calibration, benches, examples and tests alike:
//! interleaved rounds (every case once per round, the order rotating from round to round, so that
//! drift of clocks, caches or driver state over the run falls on every case alike), warm-up
//! rounds first and dropped ([`warm_up`]: a fifth, at least two), and medians. Pure: the cases
//! are closures that time themselves (host clocks or CUDA events, warm or not, is theirs to say).

/// Rounds at `nodes` kernel nodes when `rounds` are asked for at 200 nodes and more: short
/// chains take proportionally more rounds (up to ten times as many), whose replays cost little
/// and whose medians need them most.
pub fn rounds_at(nodes: usize, rounds: usize) -> usize {
    let scale = (200 / nodes.max(1)).clamp(1, 10);
    rounds.max(1) * scale
}

/// Warm-up rounds run before `rounds` measured ones: a fifth, at least two.
pub fn warm_up(rounds: usize) -> usize {
    (rounds / 5).max(2)
}

/// Runs `warm + rounds` rounds of every case (the case at `(round + i) % k` runs `i`-th in a
/// round) and returns each case's median over the last `rounds`, in the order of `cases`. The
/// first error ends the run.
pub fn interleave<E, F: FnMut() -> Result<f64, E>>(
    rounds: usize,
    warm: usize,
    cases: &mut [F],
) -> Result<Vec<f64>, E> {
    run_rounds(rounds, warm, 1, 0, cases)
}

/// [`interleave`] with each case run `block` times in a row per round, the first quarter of each
/// block (at least one) dropped: each case measured in the steady state of a loop that runs it
/// (a decode loop launching its graph step after step), where a cost depends on what the CPU's
/// caches still hold; the rounds still spread drift over every case alike. [`warm_up`] rounds
/// run first.
pub fn interleave_blocks<E, F: FnMut() -> Result<f64, E>>(
    rounds: usize,
    block: usize,
    cases: &mut [F],
) -> Result<Vec<f64>, E> {
    run_rounds(rounds, warm_up(rounds), block, (block / 4).max(1), cases)
}

/// `warm + rounds` rounds; in each, every case `block` times in a row (the case at
/// `(round + i) % k` the `i`-th), its first `skip` times and the warm-up rounds not kept.
fn run_rounds<E, F: FnMut() -> Result<f64, E>>(
    rounds: usize,
    warm: usize,
    block: usize,
    skip: usize,
    cases: &mut [F],
) -> Result<Vec<f64>, E> {
    let k = cases.len();
    let mut samples = vec![Vec::with_capacity(rounds * block.saturating_sub(skip)); k];
    for round in 0..warm + rounds {
        for i in 0..k {
            let c = (round + i) % k;
            for j in 0..block {
                let t = (cases[c])()?;
                if round >= warm && j >= skip {
                    samples[c].push(t);
                }
            }
        }
    }
    Ok(samples.into_iter().map(median).collect())
}

/// The median of `v` (the mean of the middle two for an even count; NaN when empty).
pub fn median(v: Vec<f64>) -> f64 {
    quantiles(v, &[0.5])[0]
}

/// The quantiles `qs` (each in 0–1) of `v`, interpolated linearly between the sorted samples
/// (the median of an even count is the mean of the middle two); NaN for each when `v` is empty.
/// The profiler's medians and spreads, and every median here, come from it.
pub fn quantiles(mut v: Vec<f64>, qs: &[f64]) -> Vec<f64> {
    if v.is_empty() {
        return vec![f64::NAN; qs.len()];
    }
    v.sort_by(f64::total_cmp);
    qs.iter()
        .map(|&q| {
            let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;

    #[test]
    fn medians_ignore_order_and_outliers() {
        assert!(median(Vec::new()).is_nan());
        assert_eq!(median(vec![3.0]), 3.0);
        assert_eq!(median(vec![9.0, 1.0, 5.0]), 5.0);
        assert_eq!(median(vec![4.0, 1.0, 1e9, 2.0]), 3.0);
    }

    #[test]
    fn rounds_grow_for_short_chains_only() {
        assert_eq!(rounds_at(1000, 15), 15);
        assert_eq!(rounds_at(200, 15), 15);
        assert_eq!(rounds_at(50, 15), 60);
        assert_eq!(rounds_at(10, 15), 150);
        assert_eq!(rounds_at(1, 15), 150);
        assert_eq!(rounds_at(0, 0), 10);
        assert_eq!((warm_up(15), warm_up(1), warm_up(100)), (3, 2, 20));
    }

    #[test]
    fn rounds_rotate_and_warm_up_is_dropped() {
        let order = RefCell::new(Vec::new());
        // Case c returns its own call count times (c + 1): warm-up calls are counts 1 and 2.
        let counts: [Cell<usize>; 3] = Default::default();
        let make = |c: usize| {
            let (order, count) = (&order, &counts[c]);
            move || -> Result<f64, ()> {
                order.borrow_mut().push(c);
                count.set(count.get() + 1);
                Ok((count.get() * (c + 1)) as f64)
            }
        };
        let medians = interleave(3, 2, &mut [make(0), make(1), make(2)]).unwrap();
        // Measured calls are the 3rd to 5th of each case: median is the 4th.
        assert_eq!(medians, vec![4.0, 8.0, 12.0]);
        let order = order.into_inner();
        assert_eq!(order.len(), 15);
        assert_eq!(&order[..9], &[0, 1, 2, 1, 2, 0, 2, 0, 1]);
    }

    #[test]
    fn the_first_error_ends_the_run() {
        let mut calls = 0;
        let ok = || Ok(1.0);
        let fails = || {
            calls += 1;
            if calls == 2 {
                Err("broken")
            } else {
                Ok(2.0)
            }
        };
        let mut cases: [Box<dyn FnMut() -> Result<f64, &'static str>>; 2] =
            [Box::new(ok), Box::new(fails)];
        assert_eq!(interleave(5, 1, &mut cases), Err("broken"));
        drop(cases);
        assert_eq!(calls, 2);
    }
}
