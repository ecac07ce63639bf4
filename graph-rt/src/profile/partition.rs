//! The cost-benefit partitioner, pure: a step given as segments in order, each measured eagerly
//! and captured alone, is split into contiguous runs, each run captured as one graph or run
//! eagerly, maximizing the time saved over the expected calls minus each graph's one-time cost
//! and λ × (graph memory / free device memory) — exactly, by dynamic programming over the
//! segments (O(k²)).

/// What one segment costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmentCost {
    /// µs a call, run eagerly.
    pub eager_us: f64,
    /// µs a call inside a graph (its share of a replay), or `None` where it cannot be
    /// captured (it synchronizes with the host, say).
    pub captured_us: Option<f64>,
    /// One-time µs of capturing it.
    pub one_time_us: f64,
    /// Device memory its nodes hold in a graph, bytes.
    pub memory_bytes: u64,
}

/// What a graph costs beyond its segments, and how the plan is weighed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionPolicy {
    /// µs a call of launching one graph (the host's launch plus the gap before its first node).
    pub launch_us: f64,
    /// One-time µs of instantiating and uploading one graph.
    pub instantiate_us: f64,
    /// Calls over which one-time costs are amortized.
    pub expected_calls: u64,
    /// λ, µs for a graph that would hold all of the free device memory.
    pub memory_penalty_us: f64,
    /// Free device memory, bytes (0: no memory charge).
    pub free_memory_bytes: u64,
}

impl Default for PartitionPolicy {
    fn default() -> Self {
        Self {
            launch_us: 2.5,
            instantiate_us: 50.0,
            expected_calls: 1000,
            memory_penalty_us: 1e5,
            free_memory_bytes: 0,
        }
    }
}

/// A contiguous run of segments, `start..end`, captured as one graph or run eagerly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The first segment.
    pub start: usize,
    /// One past the last.
    pub end: usize,
    /// Captured as one graph (else run eagerly).
    pub captured: bool,
}

/// The plan: the runs in order, covering every segment once, and the µs it saves over running
/// everything eagerly for the expected calls (one-time costs and memory charged).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The runs.
    pub parts: Vec<Part>,
    /// Net µs saved over the expected calls against all-eager.
    pub saved_us: f64,
}

impl Plan {
    /// Graphs in the plan.
    pub fn graphs(&self) -> usize {
        self.parts.iter().filter(|p| p.captured).count()
    }
}

/// Net µs saved by capturing `segments` as one graph (`None`: one cannot be captured).
fn graph_value(segments: &[SegmentCost], policy: &PartitionPolicy) -> Option<f64> {
    let (mut eager, mut captured, mut one_time, mut memory) = (0.0, policy.launch_us, 0.0, 0u64);
    for s in segments {
        eager += s.eager_us;
        captured += s.captured_us?;
        one_time += s.one_time_us;
        memory = memory.saturating_add(s.memory_bytes);
    }
    let charge = match policy.free_memory_bytes {
        0 => 0.0,
        free => policy.memory_penalty_us * memory as f64 / free as f64,
    };
    Some(
        (eager - captured) * policy.expected_calls as f64
            - one_time
            - policy.instantiate_us
            - charge,
    )
}

/// The best plan for `segments` (exact). Ties go to fewer graphs.
pub fn partition(segments: &[SegmentCost], policy: &PartitionPolicy) -> Plan {
    let k = segments.len();
    // best[j]: (saved, graphs) of the best plan of the first j segments; from[j]: where the last
    // part starts and whether it is captured.
    let mut best = vec![(0.0f64, 0usize); k + 1];
    let mut from = vec![(0usize, false); k + 1];
    for j in 1..=k {
        // Segment j - 1 eagerly, after the best plan of the rest.
        let mut pick = (best[j - 1].0, best[j - 1].1, j - 1, false);
        for i in (0..j).rev() {
            let Some(v) = graph_value(&segments[i..j], policy) else {
                break; // an uncapturable segment ends every run reaching back past it
            };
            let cand = (best[i].0 + v, best[i].1 + 1);
            let better =
                cand.0 > pick.0 + 1e-9 || ((cand.0 - pick.0).abs() <= 1e-9 && cand.1 < pick.1);
            if better {
                pick = (cand.0, cand.1, i, true);
            }
        }
        best[j] = (pick.0, pick.1);
        from[j] = (pick.2, pick.3);
    }
    let mut parts = Vec::new();
    let mut j = k;
    while j > 0 {
        let (i, captured) = from[j];
        parts.push(Part {
            start: i,
            end: j,
            captured,
        });
        j = i;
    }
    parts.reverse();
    // Neighbouring eager parts are one eager run.
    let mut merged: Vec<Part> = Vec::new();
    for p in parts {
        match merged.last_mut() {
            Some(last) if !last.captured && !p.captured => last.end = p.end,
            _ => merged.push(p),
        }
    }
    Plan {
        parts: merged,
        saved_us: best[k].0,
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn value_of(parts: &[Part], segments: &[SegmentCost], policy: &PartitionPolicy) -> Option<f64> {
        let mut v = 0.0;
        for p in parts.iter().filter(|p| p.captured) {
            v += graph_value(&segments[p.start..p.end], policy)?;
        }
        Some(v)
    }

    /// Every split into runs and every choice of which runs to capture.
    fn brute_force(segments: &[SegmentCost], policy: &PartitionPolicy) -> f64 {
        let k = segments.len();
        let mut best = 0.0f64;
        for cuts in 0u32..(1 << (k - 1)) {
            let mut bounds = vec![0];
            bounds.extend((1..k).filter(|b| cuts & (1 << (b - 1)) != 0));
            bounds.push(k);
            let runs: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
            for pick in 0u32..(1 << runs.len()) {
                let parts: Vec<Part> = runs
                    .iter()
                    .enumerate()
                    .map(|(r, &(start, end))| Part {
                        start,
                        end,
                        captured: pick & (1 << r) != 0,
                    })
                    .collect();
                if let Some(v) = value_of(&parts, segments, policy) {
                    best = best.max(v);
                }
            }
        }
        best
    }

    fn random_segments(rng: &mut StdRng, k: usize) -> Vec<SegmentCost> {
        (0..k)
            .map(|_| {
                let eager = rng.random_range(1.0..60.0);
                SegmentCost {
                    eager_us: eager,
                    captured_us: rng
                        .random_bool(0.8)
                        .then(|| eager * rng.random_range(0.2..1.3)),
                    one_time_us: rng.random_range(5.0..400.0),
                    memory_bytes: rng.random_range(0..64u64 << 20),
                }
            })
            .collect()
    }

    #[test]
    fn the_dynamic_program_finds_what_brute_force_finds() {
        let mut rng = StdRng::seed_from_u64(0x5eed_1234_abcd_0001);
        for case in 0..400 {
            let k = 1 + case % 9;
            let segments = random_segments(&mut rng, k);
            let policy = PartitionPolicy {
                launch_us: rng.random_range(0.5..8.0),
                instantiate_us: rng.random_range(0.0..500.0),
                expected_calls: rng.random_range(1..=2000),
                memory_penalty_us: rng.random_range(0.0..1e6),
                free_memory_bytes: 1 << 30,
            };
            let plan = partition(&segments, &policy);
            let want = brute_force(&segments, &policy);
            assert!(
                (plan.saved_us - want).abs() <= 1e-6 * want.abs().max(1.0),
                "case {case}: dp {} vs brute force {want}: {segments:?}",
                plan.saved_us
            );
            // The plan is what it says it saves, and covers every segment once, in order.
            let v = value_of(&plan.parts, &segments, &policy).expect("captured parts capturable");
            assert!((v - plan.saved_us).abs() <= 1e-6 * v.abs().max(1.0));
            let mut at = 0;
            for p in &plan.parts {
                assert_eq!(p.start, at);
                assert!(p.end > p.start);
                at = p.end;
            }
            assert_eq!(at, k);
        }
    }

    #[test]
    fn k_uncapturable_segments_give_at_most_k_plus_one_graphs_when_capturing_never_loses() {
        let mut rng = StdRng::seed_from_u64(0x00c0_ffee_0000_0042);
        for _ in 0..200 {
            let mut segments = random_segments(&mut rng, 12);
            for s in &mut segments {
                if let Some(c) = &mut s.captured_us {
                    *c = c.min(s.eager_us * 0.9);
                }
            }
            let k = segments.iter().filter(|s| s.captured_us.is_none()).count();
            let plan = partition(&segments, &PartitionPolicy::default());
            assert!(
                plan.graphs() <= k + 1,
                "{} graphs, {k} uncapturable",
                plan.graphs()
            );
        }
    }

    #[test]
    fn runs_of_tiny_kernels_around_a_synchronizing_segment_are_captured_around_it() {
        let tiny = SegmentCost {
            eager_us: 40.0,
            captured_us: Some(12.0),
            one_time_us: 100.0,
            memory_bytes: 1 << 16,
        };
        let sync = SegmentCost {
            eager_us: 30.0,
            captured_us: None,
            one_time_us: 0.0,
            memory_bytes: 0,
        };
        let plan = partition(&[tiny, tiny, sync, tiny, tiny], &PartitionPolicy::default());
        let want = [
            Part {
                start: 0,
                end: 2,
                captured: true,
            },
            Part {
                start: 2,
                end: 3,
                captured: false,
            },
            Part {
                start: 3,
                end: 5,
                captured: true,
            },
        ];
        assert_eq!(plan.parts, want);
        // Called twice only, nothing pays back: all eager, one run.
        let few = PartitionPolicy {
            expected_calls: 2,
            ..PartitionPolicy::default()
        };
        let plan = partition(&[tiny, tiny, sync, tiny, tiny], &few);
        assert_eq!(
            plan.parts,
            [Part {
                start: 0,
                end: 5,
                captured: false
            }]
        );
    }
}
