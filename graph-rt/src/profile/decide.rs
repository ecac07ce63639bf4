//! The decision, pure: given a step's samples in each mode and their one-time costs, keep the
//! graph only where it beats eager by more than the measured noise once its one-time costs
//! (capture, instantiation, the memory it holds) are paid back over the expected calls.

use std::fmt;

/// How a step runs its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The closure run eagerly at every call.
    Eager,
    /// One launch of the captured graph (the step's mix).
    Graph,
}

impl Mode {
    /// The name reports and the decisions file use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Graph => "graph",
        }
    }

    /// The mode of `name` ([`Mode::name`]).
    pub fn from_name(name: &str) -> Option<Mode> {
        [Mode::Eager, Mode::Graph]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The resolution of CUDA event timings, µs (`cuEventElapsedTime`: "around 0.5
/// microseconds"): the least noise a median of event-timed samples is taken to have.
pub const EVENT_RESOLUTION_US: f64 = 0.5;

/// The median and spread of a mode's per-call samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Median µs per call.
    pub median_us: f64,
    /// Half the interquartile range, µs: how far one call strays.
    pub spread_us: f64,
    /// The median absolute deviation from the median, µs: the noise's scale in
    /// [`median_error_us`](Self::median_error_us). Robust to up to half the samples straying,
    /// where two of seven (a host hiccup during a call) throw the interquartile range.
    pub mad_us: f64,
    /// Samples.
    pub samples: usize,
}

impl Stats {
    /// The standard error of the median, µs: 1.2533 σ / √n, σ estimated from the median
    /// absolute deviation (1.4826 MAD, as robust as the median itself) and never below the
    /// events' resolution ([`EVENT_RESOLUTION_US`]: half the samples the same event tick say
    /// nothing of a smaller noise). The spread itself where the sample count is not known (a
    /// median read from the decisions file).
    pub fn median_error_us(&self) -> f64 {
        match self.samples {
            0 => self.spread_us,
            n => 1.2533 * (1.4826 * self.mad_us).max(EVENT_RESOLUTION_US) / (n as f64).sqrt(),
        }
    }

    /// The stats of `samples` (µs per call; non-finite samples left out). `None` without any.
    pub fn of(samples: &[f64]) -> Option<Stats> {
        let v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return None;
        }
        let q = crate::timing::quantiles(v.clone(), &[0.25, 0.5, 0.75]);
        let deviations = v.iter().map(|x| (x - q[1]).abs()).collect();
        Some(Stats {
            median_us: q[1],
            spread_us: (q[2] - q[0]) / 2.0,
            mad_us: crate::timing::median(deviations),
            samples: n,
        })
    }
}

/// What a mode was measured at.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeCost {
    /// The mode.
    pub mode: Mode,
    /// Its per-call stats.
    pub stats: Stats,
    /// One-time µs it cost before its first call (capture + instantiation + upload; 0 eager).
    pub one_time_us: f64,
    /// Device memory it holds, bytes (the change in `cuMemGetInfo` over instantiation and
    /// upload; 0 eager).
    pub memory_bytes: u64,
}

/// How the decision weighs what it measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Calls the step is expected to make from now on, over which one-time costs are
    /// amortized. Default 1000.
    pub expected_calls: u64,
    /// A graph must beat eager by more than this many times the noise of the two medians'
    /// difference (their standard errors added in quadrature, [`Stats::median_error_us`]).
    /// Default 2.
    pub noise_factor: f64,
    /// λ, µs: the cost charged for a graph that would hold all of the free device memory (a
    /// graph holding a tenth of it is charged λ / 10). Default 10⁵ µs (0.1 s).
    pub memory_penalty_us: f64,
    /// Free device memory, bytes, when the graph was made (for the memory charge; 0: none).
    pub free_memory_bytes: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            expected_calls: 1000,
            noise_factor: 2.0,
            memory_penalty_us: 1e5,
            free_memory_bytes: 0,
        }
    }
}

/// Why a step runs as it does.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reason {
    /// The graph beats eager beyond the noise and pays its one-time costs back.
    GraphWins,
    /// The graph is not faster than eager beyond the measured noise.
    WithinNoise,
    /// The graph is faster, but its one-time costs are not paid back over the expected calls.
    NeverPaysBack,
    /// The step could not be captured (its mode says why): it runs eagerly.
    NotCaptured,
    /// The decision was read from the decisions file.
    FromFile,
}

impl Reason {
    /// The reason's code in reports and the decisions file.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::GraphWins => "graph-wins",
            Reason::WithinNoise => "within-noise",
            Reason::NeverPaysBack => "never-pays-back",
            Reason::NotCaptured => "not-captured",
            Reason::FromFile => "from-file",
        }
    }
}

/// What the decision keeps, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The mode kept.
    pub mode: Mode,
    /// Why.
    pub reason: Reason,
    /// µs a call the graph saves over eager (negative: it loses).
    pub saving_us: f64,
    /// Calls after which the graph's one-time costs are paid back (`None`: never, it does not
    /// save).
    pub break_even_calls: Option<u64>,
}

/// Decides between `eager` and `graph` (pure): the graph is kept when its median beats
/// eager's by more than `noise_factor` × the noise of the difference of the two medians, and the time it saves over
/// the expected calls exceeds its one-time cost plus the memory charge.
pub fn decide(eager: &ModeCost, graph: &ModeCost, policy: &Policy) -> Decision {
    let saving = eager.stats.median_us - graph.stats.median_us;
    let (e, g) = (eager.stats.median_error_us(), graph.stats.median_error_us());
    let noise = policy.noise_factor * (e * e + g * g).sqrt();
    let break_even = (saving > 0.0).then(|| (graph.one_time_us / saving).ceil().max(0.0) as u64);
    let net = one_time_budget_us(eager, graph, policy) - graph.one_time_us;
    let (mode, reason) = if saving <= noise {
        (Mode::Eager, Reason::WithinNoise)
    } else if net <= 0.0 {
        (Mode::Eager, Reason::NeverPaysBack)
    } else {
        (Mode::Graph, Reason::GraphWins)
    };
    Decision {
        mode,
        reason,
        saving_us: saving,
        break_even_calls: break_even,
    }
}

/// The most the graph's one-time cost could be for it to pay back: the time it saves over the
/// expected calls less the memory charge (negative where it saves nothing).
fn one_time_budget_us(eager: &ModeCost, graph: &ModeCost, policy: &Policy) -> f64 {
    let saving = eager.stats.median_us - graph.stats.median_us;
    let memory_charge = match policy.free_memory_bytes {
        0 => 0.0,
        free => policy.memory_penalty_us * graph.memory_bytes as f64 / free as f64,
    };
    saving * policy.expected_calls as f64 - memory_charge
}

/// Whether the graph saves beyond the noise and only its one-time cost keeps it off:
/// [`decide`] says [`Reason::NeverPaysBack`] where, with no one-time cost, the graph would pay
/// back (the memory charge alone does not sink it). The one-time cost is a single host-timed
/// build, where the per-call figures are medians of many, and one build can stray far: the
/// first in a process pays the driver's first-use costs (several times a later build's), a host
/// hiccup another. Such a decision is worth building
/// the graph again for: [`Profiled`](super::Profiled) builds it twice more and takes the median.
pub fn hinges_on_one_time(eager: &ModeCost, graph: &ModeCost, policy: &Policy) -> bool {
    decide(eager, graph, policy).reason == Reason::NeverPaysBack
        && one_time_budget_us(eager, graph, policy) > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(mode: Mode, median: f64, spread: f64, one_time: f64) -> ModeCost {
        ModeCost {
            mode,
            stats: Stats {
                median_us: median,
                spread_us: spread,
                mad_us: spread,
                samples: 9,
            },
            one_time_us: one_time,
            memory_bytes: 0,
        }
    }

    /// [`decide`] on measured stats, eager's one-time cost 0, the default policy.
    fn decide_samples(eager: Stats, graph: Stats, one_time_us: f64) -> Decision {
        let at = |mode, stats, one_time_us| ModeCost {
            mode,
            stats,
            one_time_us,
            memory_bytes: 0,
        };
        decide(
            &at(Mode::Eager, eager, 0.0),
            &at(Mode::Graph, graph, one_time_us),
            &Policy::default(),
        )
    }

    #[test]
    fn stats_are_medians_and_half_interquartile_ranges_of_finite_samples() {
        let s = Stats::of(&[5.0, 1.0, 3.0, f64::NAN, 2.0, 4.0]).unwrap();
        assert_eq!(s.median_us, 3.0);
        assert_eq!(s.spread_us, 1.0);
        assert_eq!(s.mad_us, 1.0);
        assert_eq!(s.samples, 5);
        assert_eq!(Stats::of(&[f64::INFINITY]), None);
    }

    #[test]
    fn a_graph_that_saves_beyond_the_noise_and_pays_back_is_kept() {
        let d = decide(
            &cost(Mode::Eager, 100.0, 2.0, 0.0),
            &cost(Mode::Graph, 40.0, 1.0, 3000.0),
            &Policy::default(),
        );
        assert_eq!((d.mode, d.reason.clone()), (Mode::Graph, Reason::GraphWins));
        assert_eq!(d.break_even_calls, Some(50));
        assert_eq!(d.saving_us, 60.0);
    }

    #[test]
    fn a_graph_within_the_noise_is_not_kept() {
        // Medians of 9 samples 5 µs apart, eager's straying ±10 µs: within twice the noise of
        // their difference (2 × 6.3 µs).
        let d = decide(
            &cost(Mode::Eager, 100.0, 10.0, 0.0),
            &cost(Mode::Graph, 95.0, 2.0, 10.0),
            &Policy::default(),
        );
        assert_eq!((d.mode, d.reason), (Mode::Eager, Reason::WithinNoise));
        // Straying ±3 µs, the same 5 µs are beyond it (2 × 2.2 µs).
        let d = decide(
            &cost(Mode::Eager, 100.0, 3.0, 0.0),
            &cost(Mode::Graph, 95.0, 2.0, 10.0),
            &Policy::default(),
        );
        assert_eq!(d.mode, Mode::Graph);
        let slower = decide(
            &cost(Mode::Eager, 10.0, 0.1, 0.0),
            &cost(Mode::Graph, 27.0, 0.1, 10.0),
            &Policy::default(),
        );
        assert_eq!(slower.mode, Mode::Eager);
        assert_eq!(slower.break_even_calls, None);
    }

    #[test]
    fn two_straying_calls_of_seven_do_not_make_a_graph_four_times_faster_noise() {
        // Eager's seven calls, two of them held up on the host; the graph's steady. The
        // interquartile range takes half a straying call in (±252 µs: a noise of 2 × 177 µs,
        // more than the 298 µs saved); the median absolute deviation does not.
        let eager = Stats::of(&[400.0, 405.0, 398.0, 410.0, 402.0, 1400.0, 1500.0]).unwrap();
        let graph = Stats::of(&[107.0, 106.5, 107.2, 106.8, 107.1, 107.0, 106.9]).unwrap();
        assert!(eager.spread_us > 250.0, "{eager:?}");
        assert!(eager.mad_us < 10.0, "{eager:?}");
        let d = decide_samples(eager, graph, 1500.0);
        assert_eq!((d.mode, d.reason), (Mode::Graph, Reason::GraphWins));
    }

    #[test]
    fn samples_on_one_event_tick_still_carry_the_events_resolution_as_noise() {
        // Five of seven samples on the same tick: no spread, yet 0.3 µs apart is not a saving.
        let eager = Stats::of(&[10.3, 10.3, 10.3, 10.3, 10.3, 10.8, 9.8]).unwrap();
        let graph = Stats::of(&[10.0, 10.0, 10.0, 10.0, 10.0, 10.5, 9.5]).unwrap();
        assert_eq!((eager.mad_us, graph.mad_us), (0.0, 0.0));
        let d = decide_samples(eager, graph, 10.0);
        assert_eq!(d.reason, Reason::WithinNoise);
    }

    #[test]
    fn a_graph_that_never_pays_back_over_the_expected_calls_is_not_kept() {
        let policy = Policy {
            expected_calls: 10,
            ..Policy::default()
        };
        let d = decide(
            &cost(Mode::Eager, 100.0, 1.0, 0.0),
            &cost(Mode::Graph, 90.0, 1.0, 500.0),
            &policy,
        );
        assert_eq!((d.mode, d.reason), (Mode::Eager, Reason::NeverPaysBack));
        assert_eq!(d.break_even_calls, Some(50));
        // The same graph over more calls pays back.
        let d = decide(
            &cost(Mode::Eager, 100.0, 1.0, 0.0),
            &cost(Mode::Graph, 90.0, 1.0, 500.0),
            &Policy::default(),
        );
        assert_eq!(d.mode, Mode::Graph);
    }

    #[test]
    fn a_graph_kept_off_by_its_one_time_cost_alone_is_built_again() {
        let policy = Policy {
            expected_calls: 22,
            ..Policy::default()
        };
        let eager = cost(Mode::Eager, 110.0, 5.0, 0.0);
        // Saves 65 µs × 22 calls = 1430 µs: a build measured at 2000 µs keeps it off, and
        // decides it alone.
        let spiked = cost(Mode::Graph, 45.0, 0.5, 2000.0);
        assert_eq!(
            decide(&eager, &spiked, &policy).reason,
            Reason::NeverPaysBack
        );
        assert!(hinges_on_one_time(&eager, &spiked, &policy));
        // Kept (it pays back), or kept off by the noise: nothing to measure again.
        let cheap = cost(Mode::Graph, 45.0, 0.5, 500.0);
        assert_eq!(decide(&eager, &cheap, &policy).mode, Mode::Graph);
        assert!(!hinges_on_one_time(&eager, &cheap, &policy));
        let close = cost(Mode::Graph, 109.0, 5.0, 2000.0);
        assert_eq!(decide(&eager, &close, &policy).reason, Reason::WithinNoise);
        assert!(!hinges_on_one_time(&eager, &close, &policy));
        // A graph that holds all the free memory is charged λ whatever its build costs.
        let mut heavy = cost(Mode::Graph, 45.0, 0.5, 100.0);
        heavy.memory_bytes = 1 << 30;
        let charged = Policy {
            free_memory_bytes: 1 << 30,
            ..policy
        };
        assert_eq!(
            decide(&eager, &heavy, &charged).reason,
            Reason::NeverPaysBack
        );
        assert!(!hinges_on_one_time(&eager, &heavy, &charged));
    }

    #[test]
    fn memory_a_graph_holds_is_charged_against_what_it_saves() {
        let mut graph = cost(Mode::Graph, 90.0, 1.0, 0.0);
        graph.memory_bytes = 1 << 30;
        let policy = Policy {
            free_memory_bytes: 1 << 30,
            memory_penalty_us: 1e5,
            expected_calls: 1000,
            ..Policy::default()
        };
        // Saves 10 µs × 1000 calls = 10⁴ µs < λ = 10⁵ µs for all of the free memory.
        let d = decide(&cost(Mode::Eager, 100.0, 1.0, 0.0), &graph, &policy);
        assert_eq!(d.reason, Reason::NeverPaysBack);
        graph.memory_bytes = 1 << 20;
        let d = decide(&cost(Mode::Eager, 100.0, 1.0, 0.0), &graph, &policy);
        assert_eq!(d.reason, Reason::GraphWins);
    }

    #[test]
    fn modes_round_trip_through_their_names() {
        for m in [Mode::Eager, Mode::Graph] {
            assert_eq!(Mode::from_name(m.name()), Some(m));
        }
        assert_eq!(Mode::from_name("nope"), None);
    }
}
