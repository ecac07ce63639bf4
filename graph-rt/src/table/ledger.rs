//! The host's side of a table, with no driver call in it: the bindings as the next launch will
//! see them, which words each mirror lacks, what each slot keeps alive, and when replaced
//! bindings may go. [`ArgTable`](super::ArgTable) adds the device memory, the waits for
//! acknowledgements and the launches; the CPU model test below drives this against a simulated
//! device.
//!
//! Costs follow what changed, not the table's size: a binding marks its word in a bitmap (and
//! the bitmap's word in a list the first time), staging a launch writes into its mirror only the
//! words bound since that mirror was last written (the union of the marks of the launches made
//! since), and releasing the bindings replaced before acknowledged launches is a prefix of a
//! list ordered by launch count.

use super::keep::Keeps;
use super::owners::{Applied, Owners};

/// Which words changed, by block of eight words (one 64-byte line of a mirror): a flag byte per
/// word, a seen byte per block and the list of blocks seen, so that marking is stores with no
/// chain of read-modify-writes between neighbouring words, and walking and clearing cost what
/// was marked. Once every block is marked, `all` says so and unions cost nothing.
#[derive(Default)]
pub(super) struct Marks {
    flags: Vec<u8>,
    seen: Vec<bool>,
    touched: Vec<u32>,
    all: bool,
}

impl Marks {
    /// Room for `words` words (the marks grow with the table).
    fn grow(&mut self, words: usize) {
        let blocks = words.div_ceil(8);
        if self.seen.len() < blocks {
            self.seen.resize(blocks, false);
            self.flags.resize(8 * blocks, 0);
            self.all = false;
        }
    }

    #[inline]
    fn mark(&mut self, i: usize) {
        self.flags[i] = 1;
        let b = i >> 3;
        if !self.seen[b] {
            self.see(b);
        }
    }

    /// Block `b` holds a marked word from now on (it did not).
    #[inline]
    fn see(&mut self, b: usize) {
        self.seen[b] = true;
        // `b` < 2^29: a table holds fewer than 2^32 words.
        self.touched.push(b as u32);
        if self.touched.len() == self.seen.len() {
            self.all = true;
        }
    }

    /// Marks the words of `flags` (a byte a word) in each block `b` of `blocks`.
    fn mark_blocks(&mut self, blocks: &[(u32, u64)]) {
        if self.all {
            return;
        }
        for &(b, flags) in blocks {
            let b = b as usize;
            if !self.seen[b] {
                self.see(b);
            }
            self.or_block(b, flags);
        }
    }

    /// Every word is marked.
    fn mark_all(&mut self) {
        self.all = true;
    }

    /// The flags of block `b`, one byte a word.
    #[inline]
    fn block(&self, b: usize) -> u64 {
        let f = &self.flags[8 * b..8 * b + 8];
        u64::from_ne_bytes([f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]])
    }

    #[inline]
    fn or_block(&mut self, b: usize, flags: u64) {
        let merged = self.block(b) | flags;
        self.flags[8 * b..8 * b + 8].copy_from_slice(&merged.to_ne_bytes());
    }

    /// Adds `other`'s marks to these.
    fn union(&mut self, other: &Marks) {
        if self.all {
            return;
        }
        if other.all {
            self.all = true;
            return;
        }
        for &b in &other.touched {
            let b = b as usize;
            if !self.seen[b] {
                self.see(b);
            }
            self.or_block(b, other.block(b));
        }
    }

    /// Words marked, of `words`.
    fn count(&self, words: usize) -> usize {
        if self.all {
            return words;
        }
        self.touched
            .iter()
            .map(|&b| self.block(b as usize).count_ones() as usize)
            .sum()
    }

    fn clear(&mut self) {
        for &b in &self.touched {
            let b = b as usize;
            self.seen[b] = false;
            self.flags[8 * b..8 * b + 8].fill(0);
        }
        self.touched.clear();
        self.all = false;
    }
}

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
}

/// The host's side of a table of `depth` mirrors; `R` is what a binding keeps alive, `S` what a
/// prepared set does.
pub(super) struct Ledger<R, S = R> {
    /// The bindings, as the next launch will see them.
    pub(super) words: Vec<u64>,
    pub(super) keeps: Keeps<R>,
    /// The prepared sets that slots are bound from.
    owners: Owners<S>,
    /// Sets no slot is bound from any more since launch `seq`: released once it has run.
    pub(super) replaced_sets: Vec<(u64, S)>,
    /// Slots never bound.
    pub(super) unbound: usize,
    /// Words changed since the last launch was staged.
    current: Marks,
    /// For each mirror, the words changed just before the launch that last wrote it.
    history: Vec<Marks>,
    /// Scratch: the union of marks a staging writes.
    union: Marks,
    /// Bindings replaced before launch `seq`: released once that launch's refresh has run.
    pub(super) replaced: Vec<(u64, R)>,
    /// Launches below this have finished (known from acknowledgements, or an idle stream).
    pub(super) finished: u64,
    /// The highest acknowledgement seen.
    acked: u64,
    /// Launches staged and made.
    pub(super) next_seq: u64,
    /// Bindings made.
    pub(super) binds: u64,
}

impl<R, S> Ledger<R, S> {
    pub(super) fn new(depth: usize) -> Self {
        Self {
            words: Vec::new(),
            keeps: Keeps::default(),
            owners: Owners::default(),
            replaced_sets: Vec::new(),
            unbound: 0,
            current: Marks::default(),
            history: (0..depth.max(1)).map(|_| Marks::default()).collect(),
            union: Marks::default(),
            replaced: Vec::new(),
            finished: 0,
            acked: 0,
            next_seq: 0,
            binds: 0,
        }
    }

    /// Mirrors in the ring.
    pub(super) fn depth(&self) -> usize {
        self.history.len()
    }

    /// Adds an unbound slot; returns its index.
    pub(super) fn push_slot(&mut self) -> usize {
        let i = self.words.len();
        self.words.push(0);
        self.keeps.push();
        self.owners.push();
        self.unbound += 1;
        let n = self.words.len();
        self.current.grow(n);
        self.union.grow(n);
        for h in &mut self.history {
            h.grow(n);
        }
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
        let old = std::mem::replace(&mut self.words[i], word);
        if old != word {
            self.current.mark(i);
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
            self.current.mark_all();
        } else {
            self.current.mark_blocks(set.blocks);
        }
    }

    /// The first slot never bound.
    pub(super) fn first_unbound(&self) -> Option<usize> {
        (0..self.words.len()).find(|&i| !self.keeps.is_bound(i) && !self.owners.is_owned(i))
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

    /// Writes into `mirror` (the next launch's, which the device no longer reads: its previous
    /// launch acknowledged it; at least as long as the table, in whole blocks of eight words)
    /// the words it lacks: all of them the first time, then those changed since its previous
    /// launch was staged. Returns how many words changed.
    ///
    /// Writes go a 64-byte block (eight words, one cache line) at a time, each block in as few
    /// stores as the CPU allows (see [`store_block`]): mapped host memory may be uncached or
    /// write-combined, where each store is a trip to memory. (On the H200 host of session 5 it
    /// was cached: an 8 KiB `memcpy` into it took 85 ns, 8-byte stores 465 ns.)
    pub(super) fn stage(&mut self, mirror: &mut [u64]) -> usize {
        let n = self.words.len();
        let depth = self.depth();
        let m = (self.next_seq % depth as u64) as usize;
        if self.next_seq < depth as u64 {
            mirror[..n].copy_from_slice(&self.words);
            return n;
        }
        // The launches since this mirror's last one: their marks, and the current ones.
        self.union.clear();
        for back in 1..depth {
            let h = (m + depth - back) % depth;
            self.union.union(&self.history[h]);
        }
        self.union.union(&self.current);
        let words = &self.words;
        let blocks = n.div_ceil(8);
        if self.union.all {
            mirror[..n].copy_from_slice(words);
        } else if 2 * self.union.touched.len() >= blocks {
            // Half the blocks or more: the runs of marked blocks in the table's order, each one
            // copy (a `memcpy` writes mapped memory faster than any loop of stores).
            let seen = &self.union.seen;
            let mut b = 0;
            while b < blocks {
                if !seen[b] {
                    b += 1;
                    continue;
                }
                let start = b;
                while b < blocks && seen[b] {
                    b += 1;
                }
                let (lo, hi) = (8 * start, n.min(8 * b));
                mirror[lo..hi].copy_from_slice(&words[lo..hi]);
            }
        } else {
            let wide = wide::writer();
            for &b in &self.union.touched {
                let b = b as usize;
                let flags = self.union.block(b);
                // One or two words of the block: those stores alone (in uncached memory each
                // store is a trip to memory, whatever its width); more: the whole block.
                if flags.count_ones() <= 2 {
                    let mut f = flags;
                    while f != 0 {
                        let i = 8 * b + (f.trailing_zeros() / 8) as usize;
                        store_word(mirror, i, words[i]);
                        f &= f - 1;
                    }
                } else {
                    store_block(wide, mirror, words, b);
                }
            }
        }
        // The marks move to the mirror's history only once the launch is made
        // (`Ledger::launched`): a launch that fails after staging is staged again with them.
        self.union.count(n)
    }

    /// The acknowledgement `ack` was seen: launch `ack - 1` has refreshed the table, which it
    /// does once every launch before it has finished.
    pub(super) fn acknowledged(&mut self, ack: u64) {
        self.acked = self.acked.max(ack);
        self.finished = self.finished.max(ack.saturating_sub(1).min(self.next_seq));
    }

    /// Every launch made so far has finished (the stream was seen idle).
    pub(super) fn all_finished(&mut self) {
        self.finished = self.next_seq;
    }

    /// Counts a launch made after [`Ledger::stage`]: the marks staged for it become its
    /// mirror's, and the mirror's older ones are cleared for reuse.
    pub(super) fn launched(&mut self) {
        let m = (self.next_seq % self.depth() as u64) as usize;
        std::mem::swap(&mut self.history[m], &mut self.current);
        self.current.clear();
        self.next_seq += 1;
    }

    /// How many of the replaced bindings (a prefix) no launch may read any more.
    pub(super) fn releasable(&self) -> usize {
        // Replaced at launch count `seq`: read by launches below `seq` only.
        self.replaced
            .partition_point(|(seq, _)| *seq <= self.finished)
    }

    /// Whether replaced bindings or sets are ready to be released.
    #[inline]
    pub(super) fn any_releasable(&self) -> bool {
        let ready = |seq: Option<u64>| seq.is_some_and(|s| s <= self.finished);
        ready(self.replaced.first().map(|r| r.0)) || ready(self.replaced_sets.first().map(|r| r.0))
    }

    /// Takes the sets no slot is bound from and no launch may read any more.
    pub(super) fn take_releasable_sets(&mut self) -> Vec<(u64, S)> {
        let free = self
            .replaced_sets
            .partition_point(|(seq, _)| *seq <= self.finished);
        let rest = self.replaced_sets.split_off(free);
        std::mem::replace(&mut self.replaced_sets, rest)
    }

    /// Takes the replaced bindings no launch may read any more (O(released)).
    pub(super) fn take_releasable(&mut self) -> Vec<(u64, R)> {
        let free = self.releasable();
        if free == 0 {
            Vec::new()
        } else if free == self.replaced.len() {
            let cap = self.replaced.capacity();
            std::mem::replace(&mut self.replaced, Vec::with_capacity(cap))
        } else {
            let rest = self.replaced.split_off(free);
            std::mem::replace(&mut self.replaced, rest)
        }
    }

    /// Gives up every slot's earlier bindings (see [`Keeps::drop_previous`]).
    pub(super) fn drop_previous(&mut self) {
        let replaced = &mut self.replaced;
        for i in 0..self.keeps.len() {
            self.keeps
                .drop_previous(i, self.next_seq, |e| replaced.push(e));
        }
    }
}

/// Writes block `b` of `words` (words `8b..8b + 8`, fewer at the end) into `mirror`: a whole
/// block in two 32-byte stores where the CPU has AVX, else four 16-byte stores; the end of the
/// table word by word.
#[inline]
fn store_block(wide: wide::Writer, mirror: &mut [u64], words: &[u64], b: usize) {
    let start = 8 * b;
    let end = words.len().min(start + 8);
    let (src, dst) = (&words[start..end], &mut mirror[start..end]);
    if end - start == 8 {
        if let (Ok(src), Ok(dst)) = (<&[u64; 8]>::try_from(src), <&mut [u64; 8]>::try_from(dst)) {
            wide(dst, src);
        }
    } else {
        for (d, &w) in dst.iter_mut().zip(src) {
            // SAFETY: a valid, aligned, exclusively borrowed word; volatile keeps it one
            // 8-byte store.
            unsafe { std::ptr::write_volatile(d, w) };
        }
    }
}

/// Writes word `i` into `mirror`: one 8-byte store.
#[inline]
fn store_word(mirror: &mut [u64], i: usize, word: u64) {
    let d: *mut u64 = &mut mirror[i];
    // SAFETY: a valid, aligned, exclusively borrowed word; volatile keeps it one 8-byte store.
    unsafe { std::ptr::write_volatile(d, word) };
}

#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_loadu_si256, _mm256_storeu_si256, _mm_loadu_si128,
        _mm_storeu_si128,
    };

    /// Writes one block of eight words.
    pub(super) type Writer = fn(&mut [u64; 8], &[u64; 8]);

    /// The block writer of the widest stores the CPU has (asked once a staging).
    pub(super) fn writer() -> Writer {
        if std::arch::is_x86_feature_detected!("avx") {
            |dst, src| {
                // SAFETY: the CPU has AVX (checked when this writer was chosen).
                unsafe { store_avx(dst, src) }
            }
        } else {
            store_sse2
        }
    }

    fn store_sse2(dst: &mut [u64; 8], src: &[u64; 8]) {
        let (d, s) = (
            dst.as_mut_ptr().cast::<__m128i>(),
            src.as_ptr().cast::<__m128i>(),
        );
        for k in 0..4 {
            // SAFETY: SSE2 is part of x86-64; both blocks are 64 bytes, so `k < 4` 16-byte parts
            // are in bounds (unaligned access intrinsics).
            unsafe { _mm_storeu_si128(d.add(k), _mm_loadu_si128(s.add(k))) };
        }
    }

    #[target_feature(enable = "avx")]
    unsafe fn store_avx(dst: &mut [u64; 8], src: &[u64; 8]) {
        let (d, s) = (
            dst.as_mut_ptr().cast::<__m256i>(),
            src.as_ptr().cast::<__m256i>(),
        );
        // SAFETY: both blocks are 64 bytes: two 32-byte halves each (unaligned intrinsics); the
        // caller checked AVX.
        unsafe {
            _mm256_storeu_si256(d, _mm256_loadu_si256(s));
            _mm256_storeu_si256(d.add(1), _mm256_loadu_si256(s.add(1)));
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod wide {
    /// Writes one block of eight words.
    pub(super) type Writer = fn(&mut [u64; 8], &[u64; 8]);

    /// One block of eight words, word by word.
    pub(super) fn writer() -> Writer {
        |dst, src| {
            for (d, &w) in dst.iter_mut().zip(src) {
                // SAFETY: a valid, aligned, exclusively borrowed word.
                unsafe { std::ptr::write_volatile(d, w) };
            }
        }
    }
}

#[cfg(test)]
mod tests;
