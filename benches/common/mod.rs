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

/// Runs `rounds` rounds in which each variant runs `block` times in a row, the first quarter of
/// each block (at least one) dropped as warm-up; returns each variant's median time in µs. For
/// costs that depend on what the CPU's caches hold: a variant repeated is measured in the steady
/// state of a loop that runs it (a decode loop launching its graph step after step), while the
/// rounds still spread drift over every variant alike.
#[allow(dead_code)] // used by the table bench only (each bench compiles this module)
pub fn interleave_blocks(
    rounds: usize,
    block: usize,
    mut variants: Vec<Variant<'_>>,
) -> Vec<(&'static str, f64)> {
    let k = variants.len();
    let skip = (block / 4).max(1);
    let mut samples = vec![Vec::with_capacity(rounds * block); k];
    for round in 0..rounds {
        for i in 0..k {
            let v = (round + i) % k;
            for j in 0..block {
                let t = (variants[v].1)();
                if j >= skip {
                    samples[v].push(t);
                }
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
