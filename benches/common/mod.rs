//! Measurement shared by the benches: variants run in interleaved rounds (the order rotating each
//! round), so that drift of clocks or driver state over the run falls on every variant alike and
//! cancels out of their ratios. The first tenth of the rounds is warm-up and is dropped.

/// One variant: a name, and a closure that runs it once and returns its time in µs.
pub type Variant<'a> = (&'static str, Box<dyn FnMut() -> f64 + 'a>);

/// Runs `rounds` rounds of every variant; returns each variant's median time in µs.
pub fn interleave(rounds: usize, mut variants: Vec<Variant<'_>>) -> Vec<(&'static str, f64)> {
    let k = variants.len();
    let mut samples = vec![Vec::with_capacity(rounds); k];
    let warm = rounds / 10;
    for round in 0..rounds + warm {
        for i in 0..k {
            let v = (round + i) % k;
            let t = (variants[v].1)();
            if round >= warm {
                samples[v].push(t);
            }
        }
    }
    variants
        .iter()
        .zip(samples)
        .map(|((name, _), s)| (*name, median(s)))
        .collect()
}

/// The median of `v` (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 0 {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}
