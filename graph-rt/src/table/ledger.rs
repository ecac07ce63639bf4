//! The host's side of a table, with no driver call in it: the bindings as the next launch will
//! see them, which words each mirror lacks, what each slot keeps alive, and which launches may
//! read the bindings it replaced. [`ArgTable`](super::ArgTable) adds the device memory, the waits for
//! acknowledgements and the launches; the CPU model test below drives this against a simulated
//! device.
//!
//! Costs follow what changed, not the table's size: a binding stamps its word's block (and lists
//! the block the first time in a launch), staging a launch writes into its mirror only the
//! blocks changed since that mirror was last written ([`Changes`]), a prepared set costs a copy
//! of its words, and what a launch replaced is handed on once, as one list, with the launch count
//! below which launches may read it (the table retires it to the context's lifetime tracker).

use super::changes::Changes;
use super::keep::Keeps;
use super::owners::{Applied, Owners};

/// A prepared set of bindings as the ledger applies it (see [`BindingSet`](super::BindingSet)).
pub(super) struct SetView<'a> {
    /// The identity of the set's slots (equal for sets over the same slots of one table).
    pub(super) layout: usize,
    /// The identity of what the set keeps alive.
    pub(super) keep_id: usize,
    /// The slots, distinct, ascending, in range.
    pub(super) indices: &'a [u32],
    /// Where the slots are one run: its first slot.
    pub(super) start: Option<usize>,
    /// Each block of eight words holding a slot of the set, with the flags of those slots (a
    /// byte a word).
    pub(super) blocks: &'a [(u32, u64)],
    /// The slots' words, in the order of `indices`.
    pub(super) words: &'a [u64],
    /// The same words, shared: a set of every slot in order then becomes the table's words
    /// with no copy (staging reads them from there).
    pub(super) source: Option<&'a std::sync::Arc<[u64]>>,
}

/// The host's side of a table of `depth` mirrors; `R` is what a binding keeps alive, `S` what a
/// prepared set does.
///
/// `repr(C)`, the fields in this order: what every launch reads first (see `ArgTable`).
#[repr(C)]
pub(super) struct Ledger<R, S = R> {
    /// Launches staged and made.
    pub(super) next_seq: u64,
    /// The highest acknowledgement seen.
    acked: u64,
    /// Slots never bound.
    pub(super) unbound: usize,
    /// Which blocks of words each mirror lacks.
    pub(super) changes: Changes,
    /// Bindings replaced at launch count `seq` (launches below it may read them), in that
    /// order, not handed on yet.
    pub(super) replaced: Vec<(u64, R)>,
    /// Sets no slot is bound from any more since launch count `seq` (launches below it may read
    /// them), not handed on yet.
    pub(super) replaced_sets: Vec<(u64, S)>,
    /// The bindings, as the next launch will see them (unless `from_set`).
    pub(super) words: Vec<u64>,
    /// The words of a set of every slot applied last, which are the bindings while nothing
    /// was bound since (`words` is stale meanwhile: see [`Ledger::materialize`]).
    from_set: Option<std::sync::Arc<[u64]>>,
    pub(super) keeps: Keeps<R>,
    /// The prepared sets that slots are bound from.
    owners: Owners<S>,
    /// Bindings made.
    pub(super) binds: u64,
}

impl<R, S> Ledger<R, S> {
    pub(super) fn new(depth: usize) -> Self {
        Self {
            words: Vec::new(),
            from_set: None,
            keeps: Keeps::default(),
            owners: Owners::default(),
            replaced_sets: Vec::new(),
            unbound: 0,
            changes: Changes::new(depth),
            replaced: Vec::new(),
            acked: 0,
            next_seq: 0,
            binds: 0,
        }
    }

    /// Mirrors in the ring.
    pub(super) fn depth(&self) -> usize {
        self.changes.depth()
    }

    /// Adds an unbound slot; returns its index.
    pub(super) fn push_slot(&mut self) -> usize {
        self.materialize();
        let i = self.words.len();
        self.words.push(0);
        self.keeps.push();
        self.owners.push();
        self.unbound += 1;
        let n = self.words.len();
        self.changes.grow(n);
        i
    }

    /// Makes `word` slot `i`'s binding for the next launch, keeping `make()` (identity `key`)
    /// alive while a launch may read it (see [`Keeps::hold`]).
    #[inline]
    pub(super) fn set(
        &mut self,
        i: usize,
        word: u64,
        key: usize,
        make: impl FnOnce() -> Option<R>,
    ) {
        let at = self.keeps.position(i, key);
        self.set_at(i, word, key, at, make)
    }

    /// [`Ledger::set`] with `at`, where slot `i` remembers `key` ([`Keeps::position`]).
    #[inline]
    pub(super) fn set_at(
        &mut self,
        i: usize,
        word: u64,
        key: usize,
        at: Option<usize>,
        make: impl FnOnce() -> Option<R>,
    ) {
        if self.from_set.is_some() {
            self.materialize();
        }
        let old = std::mem::replace(&mut self.words[i], word);
        if old != word {
            self.changes.mark(i, self.next_seq);
        }
        let seq = self.next_seq;
        if self.owners.is_owned(i) {
            let sets = &mut self.replaced_sets;
            self.owners.disown(i, |s| sets.push((seq, s)));
        } else if !self.keeps.is_bound(i) {
            self.unbound -= 1;
        }
        if let Some(evicted) = self.keeps.hold_at(i, key, at, make, seq) {
            // Evicted at the launch count now: `replaced` stays in launch-count order.
            self.replaced.push(evicted);
        }
        self.binds += 1;
    }

    /// Binds the slots of a prepared set to its words for the next launch, keeping `keep()`
    /// alive while a launch may read them: costs a copy of the words, and no work per slot when
    /// the set's slots are all bound from one set of the same slots (sets alternating).
    pub(super) fn apply_set(&mut self, set: &SetView<'_>, keep: impl FnOnce() -> S) {
        let seq = self.next_seq;
        let (keeps, sets) = (&self.keeps, &mut self.replaced_sets);
        let (applied, fresh) = self.owners.apply(
            set.layout,
            set.indices,
            set.keep_id,
            keep,
            |i| keeps.is_bound(i),
            |s| sets.push((seq, s)),
        );
        self.unbound -= fresh;
        self.binds += set.indices.len() as u64;
        if applied == Applied::Unchanged {
            // Its slots are bound from it still: their words are its words.
            return;
        }
        if let (Some(source), Some(0)) = (set.source, set.start) {
            if source.len() == self.words.len() {
                self.from_set = Some(source.clone());
                self.changes.mark_all(self.next_seq);
                return;
            }
        }
        self.materialize();
        match set.start {
            Some(start) => {
                self.words[start..start + set.words.len()].copy_from_slice(set.words);
            }
            None => {
                for (&i, &w) in set.indices.iter().zip(set.words) {
                    self.words[i as usize] = w;
                }
            }
        }
        if set.indices.len() == self.words.len() {
            self.changes.mark_all(self.next_seq);
        } else {
            for &(b, _) in set.blocks {
                self.changes.mark_block(b as usize, self.next_seq);
            }
        }
    }

    /// Whether slot `i` was ever bound.
    pub(super) fn is_bound(&self, i: usize) -> bool {
        self.keeps.is_bound(i) || self.owners.is_owned(i)
    }

    /// The first slot never bound.
    pub(super) fn first_unbound(&self) -> Option<usize> {
        (0..self.words.len()).find(|&i| !self.is_bound(i))
    }

    /// The mirror the next launch uses, and the acknowledgement that must be seen before it is
    /// rewritten: the one its previous launch gives once its refresh has read it; `None` while
    /// the mirror was never used, or once an acknowledgement that high has been seen (a later
    /// launch's refresh runs after every earlier launch has finished).
    pub(super) fn next_mirror(&self) -> (usize, Option<u64>) {
        let s = self.next_seq;
        let d = self.depth() as u64;
        let wait = (s >= d).then(|| s - d + 1).filter(|&a| self.acked < a);
        ((s % d) as usize, wait)
    }

    /// Whether staging the next launch may write anything into its mirror (else its mirror
    /// holds every binding already, and staging can be skipped).
    #[inline]
    pub(super) fn pending(&self) -> bool {
        self.changes.pending(self.next_seq)
    }

    /// Writes into `mirror` (the next launch's, which the device no longer reads: its previous
    /// launch acknowledged it; at least as long as the table, in whole blocks of eight words)
    /// the blocks of words it lacks: all of them the first time, then those changed since its
    /// previous launch was staged (see [`Changes`]). Returns how many words it wrote.
    pub(super) fn stage(&mut self, mirror: &mut [u64]) -> usize {
        let words = self.from_set.as_deref().unwrap_or(&self.words);
        self.changes.stage(mirror, words, self.next_seq)
    }

    /// Slot `i`'s word for the next launch.
    #[inline]
    pub(super) fn word(&self, i: usize) -> Option<u64> {
        match &self.from_set {
            Some(words) => words.get(i).copied(),
            None => self.words.get(i).copied(),
        }
    }

    /// Makes `words` the bindings again after a set of every slot was applied with no copy:
    /// the copy, now that a binding is made one by one.
    #[cold]
    pub(super) fn materialize(&mut self) {
        if let Some(words) = self.from_set.take() {
            self.words.copy_from_slice(&words);
        }
    }

    /// The acknowledgement `ack` was seen: launch `ack - 1` has refreshed the table, which it
    /// does once every launch before it has finished (see [`finished_by`]).
    pub(super) fn acknowledged(&mut self, ack: u64) {
        self.acked = self.acked.max(ack);
    }

    /// Counts a launch made after [`Ledger::stage`]: the marks staged for it become its
    /// mirror's, and the mirror's older ones are cleared for reuse.
    pub(super) fn launched(&mut self) {
        self.changes.launched(self.next_seq);
        self.next_seq += 1;
    }

    /// Takes what was replaced since the last take: the bindings and the sets, each list in
    /// launch-count order, and the launch count below which launches may read any of it
    /// (`None` when nothing was replaced).
    pub(super) fn take_replaced(&mut self) -> Option<Replaced<R, S>> {
        let bindings = self.replaced.last().map(|e| e.0);
        let through = bindings.max(self.replaced_sets.last().map(|e| e.0))?;
        Some(Replaced {
            through,
            bindings: std::mem::take(&mut self.replaced),
            // Drained, not taken: the list keeps its room, and one set (sets alternating) is
            // handed on inline, with no allocation on the launch path.
            sets: self.replaced_sets.drain(..).collect(),
        })
    }

    /// Gives up every slot's earlier bindings (see [`Keeps::drop_previous`]); a slot a binding
    /// set owns gives up all it remembers (its current binding is the set's).
    pub(super) fn drop_previous(&mut self) {
        let replaced = &mut self.replaced;
        for i in 0..self.keeps.len() {
            if self.owners.is_owned(i) {
                self.keeps.drop_all(i, self.next_seq, |e| replaced.push(e));
            } else {
                self.keeps
                    .drop_previous(i, self.next_seq, |e| replaced.push(e));
            }
        }
    }
}

/// What launches replaced, handed on as one: launches below `through` may read it.
pub(super) struct Replaced<R, S> {
    pub(super) through: u64,
    pub(super) bindings: Vec<(u64, R)>,
    pub(super) sets: smallvec::SmallVec<[(u64, S); 1]>,
}

/// How many launches are known finished once acknowledgement `ack` was seen: launch `ack - 1`
/// has refreshed, which it does only after every launch before it has finished.
#[inline]
pub(super) fn finished_by(ack: u64) -> u64 {
    ack.saturating_sub(1)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod timings;
