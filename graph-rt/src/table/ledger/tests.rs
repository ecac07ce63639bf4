//! CPU model of the table's mirror and acknowledgement protocol: random bindings, launches and
//! device progress against a reference. The simulated device refreshes in launch order from the
//! mirror a launch's number selects and acknowledges it, as `table_refresh` does; the host side
//! is the real [`Ledger`], driven the way `ArgTable::launch` drives it.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Ledger;
use crate::table::keep::NOTHING;

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
        self.ledger.set(i, value, key, || Some(buffer));
    }

    /// Rebinds slot `i` to the buffer it held before the current one (no new reference).
    fn bind_back(&mut self, i: usize, previous: &Arc<u64>) {
        let key = Arc::as_ptr(previous) as usize;
        self.bound[i] = Some(Arc::downgrade(previous));
        self.ledger
            .set(i, **previous, key, || panic!("kept already"));
    }

    fn bind_raw(&mut self, i: usize, value: u64) {
        self.bound[i] = None;
        self.ledger.set(i, value, NOTHING, || None);
    }

    /// `ArgTable::launch` whose launch fails after staging (`cuGraphLaunch` returned an error):
    /// nothing is queued or counted, and the marks must survive for the next try.
    fn failed_launch(&mut self) {
        let m = self.free_mirror();
        self.ledger.stage(&mut self.mirrors[m]);
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
        self.written += self.ledger.stage(&mut self.mirrors[m]);
        self.queue.push_back(Pending {
            seq: self.ledger.next_seq,
            words: self.ledger.words.clone(),
            alive: self.bound.clone(),
        });
        self.ledger.launched();
        for (seq, released) in self.ledger.take_releasable() {
            assert!(
                self.finished >= seq,
                "a binding replaced before launch {seq} was released when {} launches had finished",
                self.finished
            );
            drop(released);
        }
    }
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
        let steps = rng.random_range(50..400);
        for _ in 0..steps {
            match rng.random_range(0..10) {
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
                4..=6 => m.launch(),
                7 => m.failed_launch(),
                8 => m.device_step(),
                _ => {
                    m.ledger.drop_previous();
                }
            }
            if rng.random_range(0..20) == 0 {
                held.iter_mut().for_each(|h| *h = None);
            }
        }
        m.drain();
        // Everything finished: only current and previous bindings stay, then only current.
        m.ledger.all_finished();
        m.ledger.drop_previous();
        let _ = m.ledger.take_releasable();
        assert!(
            m.ledger.replaced.is_empty(),
            "round {round}: replaced bindings left after every launch finished"
        );
    }
}

/// Staging writes what changed, not the table: a tenth of the slots rebound per launch (the
/// same tenth) costs a tenth of the words once the ring is full; nothing rebound costs nothing.
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
    m.written = 0;
    for step in 0..40u64 {
        for i in (0..slots).step_by(10) {
            m.bind_raw(i, (step + 1) << 20 | i as u64);
        }
        m.launch();
    }
    assert_eq!(m.written, 40 * slots / 10);
    m.written = 0;
    for _ in 0..10 {
        // The same words again: nothing changed.
        for i in 0..slots {
            let w = m.ledger.words[i];
            m.bind_raw(i, w);
        }
        m.launch();
    }
    // The first launches still carry the tenth bound before them into the mirrors behind.
    assert!(m.written <= 3 * slots / 10, "{} words written", m.written);
    m.drain();
}

/// Host cost of the ledger's part of binding (no assertion: a figure for the record), release
/// builds only: `cargo test --release -p graph-rt-core --lib ledger_cost -- --ignored --nocapture`.
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
        let mut ledger: Ledger<Arc<u64>> = Ledger::new(4);
        for _ in 0..slots {
            ledger.push_slot();
        }
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
            ledger.all_finished();
            drop(ledger.take_releasable());
            best = best.min(bound);
        }
        println!(
            "{rotate} sets: {:.2} ns a binding, staging {:.2} µs for {slots} slots",
            best * 1e9 / slots as f64,
            best_stage * 1e6
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
    let mut ledger: Ledger<Arc<u64>> = Ledger::new(4);
    for _ in 0..slots {
        ledger.push_slot();
    }
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
                ledger.current.mark(i);
            }
        }
        ledger.current.clear();
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
        ledger.current.clear();
    });
    println!("ns a slot: words + marks {words:.2}, keeps {keeps:.2}, set {all:.2}");
}
