//! Timings of the ledger's host work (ignored tests: figures for the record, no assertion),
//! release builds only: `cargo test --release -p graph-rt --lib ledger::timings -- --ignored
//! --nocapture`.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Ledger;
use crate::table::keep::NOTHING;
use crate::table::set::Layout;

/// A ledger of `slots` unbound slots and a ring of four mirrors, as the timings measure it.
fn ledger_of(slots: usize) -> Ledger<Arc<u64>> {
    let mut ledger = Ledger::new(4);
    for _ in 0..slots {
        ledger.push_slot();
    }
    ledger
}

/// A prepared set's words and its keep.
type SetWords = (Vec<u64>, Arc<u64>);

/// The layout of every one of `slots` slots in order and `count` prepared sets' words over it.
fn full_sets(slots: usize, count: usize) -> (Layout, Vec<SetWords>) {
    let layout = Layout::new((0..slots as u32).collect());
    let sets = (0..count)
        .map(|s| {
            let words = (0..slots)
                .map(|i| ((s * slots + i) as u64 + 1) * 16)
                .collect();
            (words, Arc::new(s as u64))
        })
        .collect();
    (layout, sets)
}

/// An 8 MiB buffer whose every line [`flush`] writes: more than the caches a core sees.
fn cache_junk() -> Vec<u64> {
    vec![0u64; 8 << 20 >> 3]
}

/// Evicts the ledger's lines from the CPU's caches (as a model's other host work between its
/// steps would), by writing every line of `junk`.
fn flush(junk: &mut [u64]) {
    junk.iter_mut().step_by(8).for_each(|x| *x += 1);
    std::hint::black_box(&junk);
}

/// Host cost of the ledger's part of binding (no assertion: a figure for the record), release
/// builds only: `cargo test --release -p graph-rt --lib ledger_cost -- --ignored --nocapture`.
#[test]
#[ignore = "a timing, not a check"]
fn ledger_cost_per_binding() {
    let slots: usize = 1001;
    let sets: Vec<Vec<Arc<u64>>> = (0..5)
        .map(|s| {
            (0..slots)
                .map(|i| Arc::new((s * slots + i) as u64 * 16))
                .collect()
        })
        .collect();
    let mut mirror = vec![0u64; slots.div_ceil(8) * 8];
    for rotate in [2usize, 3, 5] {
        let mut ledger = ledger_of(slots);
        let mut best = f64::MAX;
        let mut best_stage = f64::MAX;
        for round in 0..2000 {
            let set = &sets[round % rotate];
            let t = std::time::Instant::now();
            for (i, b) in set.iter().enumerate() {
                let key = Arc::as_ptr(b) as usize;
                let at = ledger.keeps.position(i, key);
                ledger.set_at(i, **b, key, at, || Some(b.clone()));
            }
            let bound = t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            ledger.stage(&mut mirror);
            best_stage = best_stage.min(t.elapsed().as_secs_f64());
            ledger.launched();
            drop(ledger.take_replaced());
            best = best.min(bound);
        }
        println!(
            "{rotate} sets: {:.2} ns a binding, staging {:.2} µs for {slots} slots",
            best * 1e9 / slots as f64,
            best_stage * 1e6
        );
    }
}

/// Host cost of applying prepared sets of every slot, two and three alternating, and staging
/// (release builds: `cargo test --release -p graph-rt --lib set_cost -- --ignored --nocapture`).
#[test]
#[ignore = "a timing, not a check"]
fn set_cost_per_application() {
    let slots: usize = 1001;
    let (layout, sets) = full_sets(slots, 3);
    let mut mirror = vec![0u64; slots.div_ceil(8) * 8];
    for rotate in [2usize, 3] {
        let mut ledger = ledger_of(slots);
        let (mut apply, mut stage) = (f64::MAX, f64::MAX);
        for round in 0..4000 {
            let (words, token) = &sets[round % rotate];
            let t = std::time::Instant::now();
            let view = layout.view(words, Arc::as_ptr(token) as usize);
            ledger.apply_set(&view, || token.clone());
            apply = apply.min(t.elapsed().as_secs_f64());
            let t = std::time::Instant::now();
            ledger.stage(&mut mirror);
            stage = stage.min(t.elapsed().as_secs_f64());
            ledger.launched();
            drop(ledger.take_replaced());
        }
        println!(
            "{rotate} sets of {slots} slots: applying {:.3} µs, staging {:.3} µs",
            apply * 1e6,
            stage * 1e6
        );
    }
}

#[test]
#[ignore = "a timing, not a check"]
fn ledger_cost_parts() {
    let slots: usize = 1001;
    let sets: Vec<Vec<u64>> = (0..2)
        .map(|s| {
            (0..slots)
                .map(|i| ((s * slots + i) as u64 + 1) * 16)
                .collect()
        })
        .collect();
    let mut ledger = ledger_of(slots);
    let time = |f: &mut dyn FnMut(usize)| {
        let mut best = f64::MAX;
        for round in 0..3000 {
            let t = std::time::Instant::now();
            f(round);
            best = best.min(t.elapsed().as_secs_f64());
        }
        best * 1e9 / slots as f64
    };
    let words = time(&mut |r| {
        for (i, &w) in sets[r % 2].iter().enumerate() {
            let old = std::mem::replace(&mut ledger.words[i], w);
            if old != w {
                ledger.changes.mark(i, 0);
            }
        }
        ledger.changes.launched(0);
    });
    let keeps = time(&mut |r| {
        for (i, &w) in sets[r % 2].iter().enumerate() {
            let at = ledger.keeps.position(i, w as usize);
            ledger.keeps.hold_at(i, w as usize, at, || None, 0);
        }
    });
    let all = time(&mut |r| {
        for (i, &w) in sets[r % 2].iter().enumerate() {
            ledger.set(i, w, w as usize, || None);
        }
        ledger.changes.launched(0);
    });
    println!("ns a slot: words + marks {words:.2}, keeps {keeps:.2}, set {all:.2}");
}

#[test]
#[ignore = "a timing, not a check"]
fn tenth_cost() {
    let slots: usize = 1001;
    let mut ledger = ledger_of(slots);
    let mut mirror = vec![0u64; slots.div_ceil(8) * 8];
    let (mut bind, mut stage) = (f64::MAX, f64::MAX);
    for round in 0..4000u64 {
        let t = std::time::Instant::now();
        for i in (0..slots).step_by(10) {
            ledger.set(i, (round % 2 + 1) * 16 + i as u64 * 64, NOTHING, || None);
        }
        bind = bind.min(t.elapsed().as_secs_f64());
        let t = std::time::Instant::now();
        ledger.stage(&mut mirror);
        stage = stage.min(t.elapsed().as_secs_f64());
        ledger.launched();
    }
    println!(
        "same tenth: binding {:.3} µs, staging {:.3} µs",
        bind * 1e6,
        stage * 1e6
    );
}

/// Binding a random tenth of 1001 slots against binding all of them, with the ledger's memory
/// in cache and with the caches flushed between rounds (as other work between a model's steps
/// would): a random binding touches about six cache lines (the slot, the buffer, its word,
/// its block's stamp, its owner, its keys) that no prefetcher foresees, so with cold caches a
/// tenth costs far more than a tenth of all (release builds:
/// `cargo test --release -p graph-rt --lib tenth_random -- --ignored --nocapture`).
#[test]
#[ignore = "a timing, not a check"]
fn tenth_random_against_all_warm_and_cold() {
    let k = 1001;
    let sets: Vec<Vec<Arc<u64>>> = (0..2)
        .map(|s| {
            (0..k)
                .map(|i| Arc::new(((s * k + i) as u64 + 1) * 16))
                .collect()
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(1);
    let picks: Vec<Vec<usize>> = (0..64)
        .map(|_| (0..k / 10).map(|_| rng.random_range(0..k)).collect())
        .collect();
    let mut junk = cache_junk();
    for cold in [false, true] {
        let mut medians = Vec::new();
        for random in [false, true] {
            let mut ledger = ledger_of(k);
            let mut mirrors = vec![vec![0u64; k.div_ceil(8) * 8]; 4];
            let mut times = Vec::new();
            for round in 0..3000usize {
                if cold {
                    flush(&mut junk);
                }
                let set = &sets[round % 2];
                let t = std::time::Instant::now();
                let mut bind = |i: usize| {
                    let b = &set[i];
                    let key = Arc::as_ptr(b) as usize;
                    ledger.set(i, key as u64, key, || Some(b.clone()));
                };
                if random {
                    picks[round % picks.len()].iter().for_each(|&i| bind(i));
                } else {
                    (0..k).for_each(bind);
                }
                let (m, _) = ledger.next_mirror();
                ledger.stage(&mut mirrors[m]);
                ledger.launched();
                ledger.acknowledged(ledger.next_seq);
                drop(ledger.take_replaced());
                if round >= 1000 {
                    times.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            medians.push(crate::timing::median(times));
        }
        println!(
            "{}: all {:.2} µs, a random tenth {:.2} µs ({:.3} of all)",
            if cold {
                "caches flushed"
            } else {
                "caches warm"
            },
            medians[0],
            medians[1],
            medians[1] / medians[0]
        );
    }
}

#[test]
#[ignore = "a timing, not a check"]
fn stage_and_count_with_nothing_bound() {
    for slots in [11usize, 201, 1001] {
        let mut ledger = ledger_of(slots);
        for i in 0..slots {
            ledger.set(i, (i as u64 + 1) * 16, i, || None);
        }
        let mut mirrors = vec![vec![0u64; slots.div_ceil(8) * 8]; 4];
        for _ in 0..8 {
            let (m, _) = ledger.next_mirror();
            ledger.stage(&mut mirrors[m]);
            ledger.launched();
        }
        // As `ArgTable::stage` drives it: a staging (and its fence) only when something is
        // pending. Samples of 100 launches, so that the clock's own cost stays out.
        let mut samples = Vec::new();
        for _ in 0..2000 {
            let t = std::time::Instant::now();
            for _ in 0..100 {
                let (m, wait) = ledger.next_mirror();
                if let Some(a) = wait {
                    ledger.acknowledged(a);
                }
                if ledger.pending() {
                    ledger.stage(&mut mirrors[m]);
                    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                }
                ledger.launched();
            }
            samples.push(t.elapsed().as_secs_f64() * 1e9 / 100.0);
        }
        samples.sort_by(f64::total_cmp);
        println!(
            "{slots} slots, nothing bound: stage + count median {:.1} ns a launch (p90 {:.1})",
            samples[samples.len() / 2],
            samples[samples.len() * 9 / 10]
        );
    }
}

/// Staging every word of a 1001-slot table (a set of every slot applied each launch) into a
/// ring of four mirrors, with the caches flushed between launches (as a model's other host work
/// between its steps would): what writing a mirror whose lines are no longer in the CPU's caches
/// costs (release builds: `cargo test --release -p graph-rt --lib stage_cold -- --ignored
/// --nocapture`). Non-temporal (streaming) stores, which skip the read for ownership, cost
/// more than plain stores both warm and flushed, so the mirror is written with plain stores.
#[test]
#[ignore = "a timing, not a check"]
fn stage_cold_mirror_of_every_word() {
    let slots = 1001usize;
    let (layout, sets) = full_sets(slots, 2);
    let mut junk = cache_junk();
    for cold in [false, true] {
        let mut ledger = ledger_of(slots);
        let mut mirrors = vec![vec![0u64; slots.div_ceil(8) * 8]; 4];
        let mut times = Vec::new();
        for round in 0..3000usize {
            let (words, token) = &sets[round % 2];
            let view = layout.view(words, Arc::as_ptr(token) as usize);
            ledger.apply_set(&view, || token.clone());
            if cold {
                flush(&mut junk);
            }
            let (m, _) = ledger.next_mirror();
            let t = std::time::Instant::now();
            ledger.stage(&mut mirrors[m]);
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if round >= 1000 {
                times.push(t.elapsed().as_secs_f64() * 1e6);
            }
            ledger.launched();
            ledger.acknowledged(ledger.next_seq);
            drop(ledger.take_replaced());
        }
        println!(
            "{}: staging {slots} words {:.3} µs (median)",
            if cold {
                "caches flushed"
            } else {
                "caches warm"
            },
            crate::timing::median(times)
        );
    }
}
