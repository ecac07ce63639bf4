//! CPU model of the table's mirror and acknowledgement protocol: random bindings, launches and
//! device progress against a reference. The simulated device refreshes in launch order from the
//! mirror a launch's number selects and acknowledges it, as `table_refresh` does; the host side
//! is the real [`Ledger`], driven the way `ArgTable::launch` drives it.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{finished_by, Ledger, SetView};
use crate::table::keep::NOTHING;
use crate::table::set::Layout;

/// A launch the simulated device has not run yet: its number, and the words and buffers the host
/// meant it to see.
struct Pending {
    seq: u64,
    words: Vec<u64>,
    alive: Vec<Option<Weak<u64>>>,
}

struct Model {
    ledger: Ledger<Arc<u64>>,
    mirrors: Vec<Vec<u64>>,
    acks: Vec<u64>,
    queue: VecDeque<Pending>,
    // Launches below this have finished; `running`: the buffers of the one running.
    finished: u64,
    running: Vec<Option<Weak<u64>>>,
    // What each slot is bound to now (for the reference), and whether a buffer kept it.
    bound: Vec<Option<Weak<u64>>>,
    // The words bound, kept apart from the ledger's (the reference).
    expected: Vec<u64>,
    // What launches replaced, retired behind a launch count (the tracker's stand-in).
    retired: Vec<(u64, Vec<Arc<u64>>)>,
    written: usize,
}

impl Model {
    fn new(depth: usize, slots: usize) -> Self {
        let mut ledger = Ledger::new(depth);
        for _ in 0..slots {
            ledger.push_slot();
        }
        Self {
            ledger,
            mirrors: vec![vec![0; slots]; depth],
            acks: vec![0; depth],
            queue: VecDeque::new(),
            finished: 0,
            running: Vec::new(),
            bound: vec![None; slots],
            expected: vec![0; slots],
            retired: Vec::new(),
            written: 0,
        }
    }

    /// The device finishes the launch before the oldest pending one (its buffers were read until
    /// now, so they must be alive) and refreshes the oldest: its refresh copies its mirror, which
    /// must hold exactly what the host bound before it.
    fn device_step(&mut self) {
        let Some(p) = self.queue.pop_front() else {
            return;
        };
        self.check_alive(&self.running, "the launch before");
        self.running = p.alive.clone();
        let depth = self.mirrors.len();
        let m = (p.seq % depth as u64) as usize;
        assert_eq!(
            self.mirrors[m], p.words,
            "launch {} read other words than were bound before it",
            p.seq
        );
        for (i, keep) in p.alive.iter().enumerate() {
            if let Some(w) = keep {
                assert!(
                    w.upgrade().is_some(),
                    "slot {i}'s buffer was released before launch {} read it",
                    p.seq
                );
            }
        }
        self.acks[m] = p.seq + 1;
        self.finished = p.seq;
    }

    fn check_alive(&self, keeps: &[Option<Weak<u64>>], which: &str) {
        for (i, keep) in keeps.iter().enumerate() {
            if let Some(w) = keep {
                assert!(
                    w.upgrade().is_some(),
                    "slot {i}'s buffer was released while {which} ({} finished) could read it",
                    self.finished
                );
            }
        }
    }

    /// Every launch runs to its end (a synchronize).
    fn drain(&mut self) {
        while !self.queue.is_empty() {
            self.device_step();
        }
        self.check_alive(&self.running, "the last launch");
        self.running.clear();
        self.finished = self.ledger.next_seq;
    }

    fn bind_buffer(&mut self, i: usize, value: u64) {
        let buffer = Arc::new(value);
        let key = Arc::as_ptr(&buffer) as usize;
        self.bound[i] = Some(Arc::downgrade(&buffer));
        self.expected[i] = value;
        self.ledger.set(i, value, key, || Some(buffer));
    }

    /// Rebinds slot `i` to the buffer it held before the current one (no new reference).
    fn bind_back(&mut self, i: usize, previous: &Arc<u64>) {
        let key = Arc::as_ptr(previous) as usize;
        self.bound[i] = Some(Arc::downgrade(previous));
        self.expected[i] = **previous;
        self.ledger
            .set(i, **previous, key, || panic!("kept already"));
    }

    fn bind_raw(&mut self, i: usize, value: u64) {
        self.bound[i] = None;
        self.expected[i] = value;
        self.ledger.set(i, value, NOTHING, || None);
    }

    /// `ArgTable::launch` whose launch fails after staging (`cuGraphLaunch` returned an error):
    /// nothing is queued or counted, and the marks must survive for the next try.
    fn failed_launch(&mut self) {
        let m = self.free_mirror();
        self.stage(m);
    }

    /// `ArgTable::stage`'s write of mirror `m`: none when the ledger has nothing pending (the
    /// mirror must then hold every binding already, which the device step checks).
    fn stage(&mut self, m: usize) -> usize {
        if self.ledger.pending() {
            self.ledger.stage(&mut self.mirrors[m])
        } else {
            0
        }
    }

    /// What `ArgTable::stage` does before writing the next mirror: when the ledger asks for an
    /// acknowledgement, the latest launch's (as `ArgTable::latest_ack` reads it first) if high
    /// enough, else wait for the mirror's own. Then the mirror must be free: its previous launch
    /// has refreshed.
    fn free_mirror(&mut self) -> usize {
        let (m, wait) = self.ledger.next_mirror();
        if let Some(at_least) = wait {
            let s = self.ledger.next_seq;
            let latest = self.acks[((s - 1) % self.acks.len() as u64) as usize];
            if latest >= at_least {
                self.ledger.acknowledged(latest);
            } else {
                while self.acks[m] < at_least {
                    self.device_step();
                }
                assert_eq!(self.acks[m], at_least, "the device ran ahead of the host");
                self.ledger.acknowledged(self.acks[m]);
            }
        }
        let (s, d) = (self.ledger.next_seq, self.acks.len() as u64);
        assert!(
            s < d || self.acks[m] > s - d,
            "mirror {m} rewritten for launch {s} before its previous launch refreshed"
        );
        m
    }

    /// `ArgTable::launch`: wait for the mirror's previous launch, stage, launch, release.
    fn launch(&mut self) {
        let m = self.free_mirror();
        self.written += self.stage(m);
        self.queue.push_back(Pending {
            seq: self.ledger.next_seq,
            words: self.expected.clone(),
            alive: self.bound.clone(),
        });
        self.ledger.launched();
        self.retire_replaced();
        assert!(
            self.ledger.owners.count_holds(),
            "the count of owned slots drifted"
        );
    }

    /// What `ArgTable::launched` does with what the launch replaced: retired behind its launch
    /// count, released once the acknowledgements show that count finished (the table's
    /// timeline), which must be when the simulated device has finished those launches.
    fn retire_replaced(&mut self) {
        if let Some(r) = self.ledger.take_replaced() {
            let seqs = r
                .bindings
                .iter()
                .map(|e| e.0)
                .chain(r.sets.iter().map(|e| e.0));
            assert!(seqs.clone().all(|s| s <= r.through), "out of order");
            let items = r.bindings.into_iter().chain(r.sets).map(|e| e.1).collect();
            self.retired.push((r.through, items));
        }
        let ack = self.acks.iter().copied().max().unwrap_or(0);
        let known = finished_by(ack.min(self.ledger.next_seq));
        let passed = self
            .retired
            .partition_point(|(through, _)| *through <= known);
        for (through, released) in self.retired.drain(..passed) {
            assert!(
                self.finished >= through,
                "a binding replaced before launch {through} was released when {} launches had finished",
                self.finished
            );
            drop(released);
        }
    }

    /// `ArgTable::bind_set`: the slots of `layout` take `words`, kept alive by `token` (the
    /// set's allocations).
    fn apply_set(&mut self, layout: &Layout, words: &[u64], token: &Arc<u64>) {
        // Shared words, as a `BindingSet` has: a set of every slot becomes the table's words
        // with no copy.
        let shared: Arc<[u64]> = words.into();
        let view = SetView {
            source: Some(&shared),
            ..layout.view(words, Arc::as_ptr(token) as usize)
        };
        for (&i, &w) in view.indices.iter().zip(words) {
            self.bound[i as usize] = Some(Arc::downgrade(token));
            self.expected[i as usize] = w;
        }
        self.ledger.apply_set(&view, || token.clone());
    }
}

/// A prepared set of the model: its layout, words and the token standing for its buffers.
struct ModelSet {
    layout: usize,
    words: Vec<u64>,
    token: Arc<u64>,
}

/// Random orders of binding (new buffers, back to the previous one, raw words, the same word
/// again), launching and device progress, for several depths and sizes.
#[test]
fn random_bind_launch_ack_orders_match_the_reference() {
    let mut rng = StdRng::seed_from_u64(0x7ab1e);
    for round in 0..300 {
        let depth = rng.random_range(1..=5);
        let slots = rng.random_range(1..=300);
        let mut m = Model::new(depth, slots);
        // Keep a reference to some buffers so that rebinding back to them is possible.
        let mut held: Vec<Option<Arc<u64>>> = vec![None; slots];
        let mut value = 16u64;
        for i in 0..slots {
            value += 16;
            m.bind_buffer(i, value);
        }
        // Layouts of prepared sets: every slot, a run, a sparse subset.
        let run = rng.random_range(0..slots);
        let run = run..rng.random_range(run..slots) + 1;
        let layouts: Vec<Layout> = [
            (0..slots as u32).collect::<Vec<_>>(),
            (run.start as u32..run.end as u32).collect(),
            (0..slots as u32)
                .filter(|_| rng.random_range(0..4) == 0)
                .chain([0])
                .collect(),
        ]
        .into_iter()
        .map(|mut v| {
            v.sort_unstable();
            v.dedup();
            Layout::new(v.into_boxed_slice())
        })
        .collect();
        let mut kept: Vec<ModelSet> = Vec::new();
        let steps = rng.random_range(50..400);
        for _ in 0..steps {
            match rng.random_range(0..12) {
                10 | 11 => {
                    // A prepared set: a new one of a random layout, or one kept before again.
                    if !kept.is_empty() && rng.random_range(0..2) == 0 {
                        let s = &kept[rng.random_range(0..kept.len())];
                        let (l, w, t) = (s.layout, s.words.clone(), s.token.clone());
                        m.apply_set(&layouts[l], &w, &t);
                    } else {
                        let l = rng.random_range(0..layouts.len());
                        let words: Vec<u64> = (0..layouts[l].view(&[], 0).indices.len())
                            .map(|_| {
                                value += 16;
                                value
                            })
                            .collect();
                        let token = Arc::new(value);
                        m.apply_set(&layouts[l], &words, &token);
                        if rng.random_range(0..2) == 0 {
                            kept.push(ModelSet {
                                layout: l,
                                words,
                                token,
                            });
                        }
                    }
                    if rng.random_range(0..8) == 0 {
                        kept.clear();
                    }
                }
                0..=3 => {
                    // Bind a random subset: new buffers, raw words, or the same word again.
                    let count = match rng.random_range(0..3) {
                        0 => 1,
                        1 => (slots / 10).max(1),
                        _ => slots,
                    };
                    for _ in 0..count {
                        let i = rng.random_range(0..slots);
                        value += 16;
                        match rng.random_range(0..6) {
                            0 => m.bind_raw(i, value),
                            1 => {
                                let w = m.ledger.words[i];
                                m.bind_raw(i, w)
                            }
                            2 => {
                                if let Some(b) = held[i].clone() {
                                    if m.ledger.keeps.holds(i, Arc::as_ptr(&b) as usize) {
                                        m.bind_back(i, &b);
                                        continue;
                                    }
                                }
                                m.bind_buffer(i, value);
                            }
                            _ => {
                                m.bind_buffer(i, value);
                                held[i] = m.bound[i].as_ref().and_then(Weak::upgrade);
                            }
                        }
                    }
                }
                4..=5 => m.launch(),
                // A run of launches with nothing bound between them: past the ring's depth,
                // staging has nothing pending and skips the mirror (which must hold every
                // binding already: the device step checks what each launch read).
                6 => {
                    for _ in 0..=m.mirrors.len() + 1 {
                        m.launch();
                    }
                    assert!(
                        !m.ledger.pending(),
                        "nothing bound since the ring went round"
                    );
                }
                7 => m.failed_launch(),
                8 => m.device_step(),
                // `ArgTable::trim`.
                _ => {
                    m.ledger.drop_previous();
                    m.retire_replaced();
                }
            }
            if rng.random_range(0..20) == 0 {
                held.iter_mut().for_each(|h| *h = None);
            }
        }
        m.drain();
        // Everything finished: only current and previous bindings stay, then only current.
        m.ledger.drop_previous();
        let r = m.ledger.take_replaced();
        assert!(
            r.is_none_or(|r| r.through == m.ledger.next_seq),
            "round {round}: what trimming gave up is read by launches made before it"
        );
        assert!(
            m.ledger.replaced.is_empty() && m.ledger.replaced_sets.is_empty(),
            "round {round}: replaced bindings left after they were taken"
        );
    }
}

/// Staging writes what changed, not the table, a 64-byte block (eight words) at a time: a
/// tenth of the slots rebound per launch (the same tenth, slots 0..100: 13 blocks) costs those
/// blocks once the ring is full, every tenth slot (100 of 125 blocks) the blocks it touches,
/// nothing rebound costs nothing.
#[test]
fn staging_writes_only_the_words_bound_since_the_mirror_was_written() {
    let slots = 1000;
    let mut m = Model::new(4, slots);
    for i in 0..slots {
        m.bind_raw(i, 16 * i as u64 + 16);
    }
    for _ in 0..4 {
        m.launch();
    }
    assert_eq!(
        m.written,
        4 * slots,
        "the first use of each mirror writes it whole"
    );
    let rebind = |m: &mut Model, which: &dyn Fn(usize) -> bool, launches: u64| {
        m.written = 0;
        for step in 0..launches {
            for i in (0..slots).filter(|&i| which(i)) {
                m.bind_raw(i, (step + 1) << 20 | i as u64);
            }
            m.launch();
        }
        m.written
    };
    // The first launch of each run still carries the run before into the mirrors behind.
    let run = rebind(&mut m, &|i| i < slots / 10, 40);
    assert!(run <= 40 * 104 + 3 * slots, "{run} words written");
    let run = rebind(&mut m, &|i| i < slots / 10, 40);
    assert_eq!(run, 40 * 104, "13 blocks a launch");
    let every_tenth = rebind(&mut m, &|i| i % 10 == 0, 40);
    assert!(
        every_tenth <= 40 * 100 * 8 + 3 * 104,
        "{every_tenth} words written"
    );
    m.written = 0;
    for _ in 0..10 {
        // The same words again: nothing changed.
        for i in 0..slots {
            let w = m.ledger.words[i];
            m.bind_raw(i, w);
        }
        m.launch();
    }
    assert!(m.written <= 3 * 100 * 8, "{} words written", m.written);
    m.drain();
}
