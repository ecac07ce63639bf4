//! The benches' named variants over graph-rt's one way of measuring ([`graph_rt::timing`], which
//! calibration uses too): interleaved rounds (the order rotating each round), warm-up rounds
//! first and dropped, medians.

use std::convert::Infallible;

/// One variant: a name, and a closure that runs it once and returns its time in µs.
pub type Variant<'a> = (&'static str, Box<dyn FnMut() -> f64 + 'a>);

/// The variants as infallible cases for [`graph_rt::timing`].
fn cases<'v, 'a>(
    variants: &'v mut [Variant<'a>],
) -> Vec<impl FnMut() -> Result<f64, Infallible> + use<'v, 'a>> {
    variants
        .iter_mut()
        .map(|(_, f)| move || Ok::<f64, Infallible>(f()))
        .collect()
}

fn named(
    variants: &[Variant<'_>],
    medians: Result<Vec<f64>, Infallible>,
) -> Vec<(&'static str, f64)> {
    let Ok(medians) = medians;
    variants.iter().map(|(n, _)| *n).zip(medians).collect()
}

/// Runs [`graph_rt::timing::warm_up`] + `rounds` rounds of every variant; returns each
/// variant's median time in µs.
#[allow(dead_code)] // not every bench interleaves once (each bench compiles this module)
pub fn interleave(rounds: usize, variants: Vec<Variant<'_>>) -> Vec<(&'static str, f64)> {
    interleave_repeated(1, rounds, variants)
        .pop()
        .unwrap_or_default()
}

/// [`interleave`] `repeats` times over the same variants (one warm-up): each run's medians, in
/// order. For a ratio of two nearly equal costs, whose median over one run of interleaved
/// rounds still moves by a few percent from run to run: the runs' ratios and their median.
pub fn interleave_repeated(
    repeats: usize,
    rounds: usize,
    mut variants: Vec<Variant<'_>>,
) -> Vec<Vec<(&'static str, f64)>> {
    let warm = graph_rt::timing::warm_up(rounds);
    (0..repeats)
        .map(|r| {
            let warm = if r == 0 { warm } else { 0 };
            let medians = graph_rt::timing::interleave(rounds, warm, &mut cases(&mut variants));
            named(&variants, medians)
        })
        .collect()
}

/// [`graph_rt::timing::interleave_blocks`]: each variant `block` times in a row per round.
#[allow(dead_code)] // used by the table bench only (each bench compiles this module)
pub fn interleave_blocks(
    rounds: usize,
    block: usize,
    mut variants: Vec<Variant<'_>>,
) -> Vec<(&'static str, f64)> {
    let medians = graph_rt::timing::interleave_blocks(rounds, block, &mut cases(&mut variants));
    named(&variants, medians)
}

/// The median of `v` (NaN when empty).
#[allow(dead_code)] // not every bench takes medians itself
pub fn median(v: Vec<f64>) -> f64 {
    graph_rt::timing::median(v)
}

/// Prints which commit the bench was built from (a figure on the GPU machine then names it).
pub fn built_from(bench: &str) {
    println!("{bench}: built from {}", graph_rt_dev::BUILT_FROM);
}

/// The start of a bench: says which commit it was built from, opens device 0's context, and
/// when `pdl`, checks for programmatic dependent launch (compute capability 9.0). `None`, the
/// reason printed, where the bench cannot run.
#[allow(dead_code)] // each bench compiles this module; not all start with it
pub fn start(bench: &str, pdl: bool) -> Option<graph_rt::Context> {
    built_from(bench);
    let ctx = match graph_rt::Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("{bench} bench skipped: {e}");
            return None;
        }
    };
    if pdl
        && ctx
            .device()
            .compute_capability()
            .map_or(true, |cc| cc.0 < 9)
    {
        eprintln!(
            "{bench} bench skipped: programmatic dependent launch needs compute capability 9.0"
        );
        return None;
    }
    Some(ctx)
}
