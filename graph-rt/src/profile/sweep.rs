//! The sweep the profiler is judged on: steps generated over kernel count × kernel length
//! (elements each kernel touches) × expected calls × static-copy size, log-uniformly from a seed
//! so that the points are the generator's, not chosen, and cross break-even from both sides
//! (few long kernels called a few times lose as graphs; many short ones called often win).
//! Pure: the tests take a few points, the `profile` bench many.

/// One generated step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPoint {
    /// Kernels in the step (a chain).
    pub kernels: usize,
    /// Elements (f32) each kernel reads and writes: its length.
    pub elements: usize,
    /// Calls the step is expected to make (the profiler's amortization horizon).
    pub expected_calls: u64,
    /// Bytes of a device-to-device copy at the step's start (0: none): work whose cost a graph
    /// does not remove.
    pub copy_bytes: usize,
}

/// `count` points from `seed`: kernels 1–128, elements 256–8 Mi, expected calls 2–5000, and a
/// copy of 1–64 MiB in a third of them, each log-uniform.
pub fn sweep(seed: u64, count: usize) -> Vec<SweepPoint> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut log_uniform = |lo: f64, hi: f64| {
        let u = (next() % 1_000_000) as f64 / 1_000_000.0;
        (lo.ln() + u * (hi.ln() - lo.ln())).exp()
    };
    (0..count)
        .map(|_| {
            let kernels = log_uniform(1.0, 128.0).round() as usize;
            let elements = (log_uniform(256.0, 8.0 * 1024.0 * 1024.0) as usize).div_ceil(256) * 256;
            let expected_calls = log_uniform(2.0, 5000.0).round() as u64;
            let copy = log_uniform(1.0, 3.0) < 1.44; // a third of the points (ln 1.44 / ln 3)
            let copy_bytes = if copy {
                (log_uniform(1.0, 64.0) * (1 << 20) as f64) as usize / 256 * 256
            } else {
                0
            };
            SweepPoint {
                kernels: kernels.max(1),
                elements,
                expected_calls: expected_calls.max(1),
                copy_bytes,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_is_the_seeds_and_spans_its_ranges() {
        let a = sweep(7, 200);
        assert_eq!(a, sweep(7, 200), "the same seed, the same points");
        assert_ne!(a, sweep(8, 200));
        assert!(a.iter().all(|p| (1..=128).contains(&p.kernels)));
        assert!(a
            .iter()
            .all(|p| (256..=8 << 20).contains(&p.elements) && p.elements % 256 == 0));
        assert!(a.iter().all(|p| (1..=5000).contains(&p.expected_calls)));
        let copies = a.iter().filter(|p| p.copy_bytes > 0).count();
        assert!((40..=100).contains(&copies), "{copies} of 200 with a copy");
        // Both sides of break-even: short chains called a few times, long ones called often.
        assert!(a.iter().any(|p| p.kernels <= 4 && p.expected_calls <= 20));
        assert!(a.iter().any(|p| p.kernels >= 32 && p.expected_calls >= 500));
    }
}
