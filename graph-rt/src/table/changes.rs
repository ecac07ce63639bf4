//! Which words of a table each mirror lacks, by line: a table's words go into its mirrors a
//! 64-byte block (eight words, one cache line) at a time, and a block is written into a mirror
//! only if a word of it changed since that mirror was last written.
//!
//! Each block carries a stamp: 1 + the launch count when a word of it last changed (0: never).
//! Each launch's window (the changes made after the launch before it) lists the blocks first
//! stamped in it. Staging launch `s` into its mirror, last written by launch `s - depth`, writes
//! the blocks stamped after that launch was staged: those listed by the windows since, or,
//! when they list half the table or more, every block whose stamp says so (one pass over the
//! stamps and a copy of each run). Costs follow what changed; a launch that binds every slot
//! costs a copy of the table.

/// The changes of a table of `depth` mirrors. `repr(C)`, what every launch reads first.
#[repr(C)]
pub(super) struct Changes {
    /// How many windows (the current one and the history's) list a change: while none does,
    /// [`Changes::pending`] says a staging has nothing to write (the table then skips it) and a
    /// launch moves no window, touching none of their memory (a launch with nothing rebound).
    nonempty: usize,
    /// For each mirror, the window of the launch that last wrote it.
    history: Vec<Window>,
    /// The blocks first stamped in the current window, and whether every block was.
    current: Window,
    /// Per block: 1 + the launch count when a word of it last changed; 0: never.
    stamp: Vec<u64>,
    /// Every block changed when `all` was set: 1 + that launch count (0: never).
    all: u64,
    /// Per block: the staging that last wrote it (to write a block listed twice once).
    written: Vec<u64>,
    /// Stagings so far (each a new id, failed launches included).
    stagings: u64,
}

#[derive(Default)]
struct Window {
    blocks: Vec<u32>,
    all: bool,
}

impl Window {
    fn is_empty(&self) -> bool {
        self.blocks.is_empty() && !self.all
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.all = false;
    }
}

impl Changes {
    pub(super) fn new(depth: usize) -> Self {
        Self {
            stamp: Vec::new(),
            all: 0,
            current: Window::default(),
            history: (0..depth.max(1)).map(|_| Window::default()).collect(),
            written: Vec::new(),
            stagings: 0,
            nonempty: 0,
        }
    }

    /// Whether staging launch `seq` may write anything: the ring is still filling, or a window
    /// since a mirror was written lists a change.
    #[inline]
    pub(super) fn pending(&self, seq: u64) -> bool {
        seq < self.history.len() as u64 || self.nonempty > 0
    }

    /// Mirrors in the ring.
    pub(super) fn depth(&self) -> usize {
        self.history.len()
    }

    /// Room for `words` words.
    pub(super) fn grow(&mut self, words: usize) {
        let blocks = words.div_ceil(8);
        if self.stamp.len() < blocks {
            self.stamp.resize(blocks, 0);
            self.written.resize(blocks, 0);
        }
    }

    /// Word `i` changed before launch `seq`.
    #[inline]
    pub(super) fn mark(&mut self, i: usize, seq: u64) {
        self.mark_block(i >> 3, seq);
    }

    /// A word of block `b` changed before launch `seq`.
    #[inline]
    pub(super) fn mark_block(&mut self, b: usize, seq: u64) {
        let stamp = seq + 1;
        if self.stamp[b] != stamp {
            self.stamp[b] = stamp;
            if self.current.is_empty() {
                self.nonempty += 1;
            }
            // `b` < 2^29: a table holds fewer than 2^32 words.
            self.current.blocks.push(b as u32);
        }
    }

    /// Every word changed before launch `seq`.
    pub(super) fn mark_all(&mut self, seq: u64) {
        if self.current.is_empty() {
            self.nonempty += 1;
        }
        self.all = seq + 1;
        self.current.all = true;
    }

    /// Writes into `mirror` (launch `seq`'s, which the device no longer reads; at least as long
    /// as `words`) the blocks of `words` it lacks: all of them while the ring fills, then those
    /// changed since the mirror's previous launch was staged. Returns the words written.
    pub(super) fn stage(&mut self, mirror: &mut [u64], words: &[u64], seq: u64) -> usize {
        let n = words.len();
        let depth = self.history.len() as u64;
        self.stagings += 1;
        if seq < depth {
            mirror[..n].copy_from_slice(words);
            return n;
        }
        // The mirror holds what was staged for launch `seq - depth`: every change stamped up
        // to `seq - depth + 1`.
        let after = seq - depth + 1;
        let m = (seq % depth) as usize;
        let windows = (1..depth as usize)
            .map(|back| &self.history[(m + depth as usize - back) % depth as usize])
            .chain([&self.current]);
        let (mut listed, mut all) = (0usize, false);
        for w in windows.clone() {
            listed += w.blocks.len();
            all |= w.all;
        }
        let blocks = n.div_ceil(8);
        if all {
            mirror[..n].copy_from_slice(words);
            return n;
        }
        let changed = |b: usize| self.stamp[b].max(self.all) > after;
        let mut written = 0;
        if 2 * listed >= blocks {
            // Half the table or more: the runs of changed blocks in the table's order, each one
            // copy (a `memcpy` writes mapped memory faster than a loop of stores).
            let mut b = 0;
            while b < blocks {
                if !changed(b) {
                    b += 1;
                    continue;
                }
                let start = b;
                while b < blocks && changed(b) {
                    b += 1;
                }
                let (lo, hi) = (8 * start, n.min(8 * b));
                mirror[lo..hi].copy_from_slice(&words[lo..hi]);
                written += hi - lo;
            }
        } else {
            let id = self.stagings;
            let wide = wide::writer();
            for w in windows {
                for &b in &w.blocks {
                    let b = b as usize;
                    if self.written[b] != id && changed(b) {
                        self.written[b] = id;
                        written += store_block(wide, mirror, words, b);
                    }
                }
            }
        }
        written
    }

    /// Launch `seq` was made after [`Changes::stage`]: the current window becomes its mirror's
    /// history (a launch that fails after staging leaves it current, staged again next time).
    pub(super) fn launched(&mut self, seq: u64) {
        if self.nonempty == 0 {
            // Every window is empty: moving them changes nothing.
            return;
        }
        let m = (seq % self.history.len() as u64) as usize;
        std::mem::swap(&mut self.history[m], &mut self.current);
        if !self.current.is_empty() {
            // The window of launch `seq - depth` leaves the history.
            self.nonempty -= 1;
        }
        self.current.clear();
        debug_assert_eq!(
            self.nonempty,
            self.history.iter().filter(|w| !w.is_empty()).count(),
            "the count of windows listing a change"
        );
    }
}

/// Writes block `b` of `words` (words `8b..8b + 8`, fewer at the end) into `mirror`: a whole
/// block in two 32-byte stores where the CPU has AVX, else four 16-byte stores; the end of the
/// table word by word. Returns the words written.
#[inline]
fn store_block(wide: wide::Writer, mirror: &mut [u64], words: &[u64], b: usize) -> usize {
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
    end - start
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
mod tests {
    use super::Changes;

    /// Stages launch `seq` into a fresh copy of `mirror`, returning the words that differ from
    /// `words` afterwards (0: the mirror holds every word).
    fn stale_after(c: &mut Changes, mirror: &mut [u64], words: &[u64], seq: u64) -> usize {
        c.stage(mirror, words, seq);
        mirror.iter().zip(words).filter(|(m, w)| m != w).count()
    }

    #[test]
    fn a_ring_of_one_mirror_gets_each_change_once() {
        let (n, mut c) = (64usize, Changes::new(1));
        c.grow(n);
        let mut words: Vec<u64> = (0..n as u64).collect();
        let mut mirror = vec![0u64; n];
        assert_eq!(
            c.stage(&mut mirror, &words, 0),
            n,
            "the first staging writes all"
        );
        c.launched(0);
        words[9] = 1000;
        c.mark(9, 1);
        assert_eq!(c.stage(&mut mirror, &words, 1), 8, "one block");
        assert_eq!(mirror, words);
        c.launched(1);
        assert_eq!(c.stage(&mut mirror, &words, 2), 0, "nothing changed since");
    }

    /// A change is pending until every mirror has had it (`depth` launches) and its window has
    /// left the history (one launch more); then staging has nothing to write, which `pending`
    /// says without looking at a window.
    #[test]
    fn a_change_is_pending_until_every_mirror_has_it() {
        let (n, depth, mut c) = (64usize, 3u64, Changes::new(3));
        c.grow(n);
        let mut words = vec![5u64; n];
        let mut mirrors: Vec<Vec<u64>> = (0..depth).map(|_| vec![0u64; n]).collect();
        let mut seq = 0u64;
        let mut launch = |c: &mut Changes, words: &[u64], seq: &mut u64| {
            let written = c.stage(&mut mirrors[(*seq % depth) as usize], words, *seq);
            c.launched(*seq);
            *seq += 1;
            (written, mirrors.iter().all(|m| m == words))
        };
        for _ in 0..depth {
            assert!(c.pending(seq), "the ring is filling");
            assert_eq!(launch(&mut c, &words, &mut seq).0, n);
        }
        assert!(!c.pending(seq), "every mirror holds every word");
        assert_eq!(launch(&mut c, &words, &mut seq), (0, true));
        words[17] = 9;
        c.mark(17, seq);
        for k in 0..depth {
            assert!(c.pending(seq), "mirror {} lacks the change", seq % depth);
            assert_eq!(
                launch(&mut c, &words, &mut seq).0,
                8,
                "launch {k} after the change"
            );
        }
        // The change's window leaves the history at the next launch (which writes nothing:
        // its mirror had the change first); after that nothing is pending.
        assert_eq!(launch(&mut c, &words, &mut seq), (0, true));
        assert!(!c.pending(seq));
        assert_eq!(launch(&mut c, &words, &mut seq), (0, true));
        // A whole-table change is pending the same way.
        c.mark_all(seq);
        for _ in 0..depth {
            assert!(c.pending(seq));
            assert_eq!(launch(&mut c, &words, &mut seq).0, n);
        }
        assert_eq!(launch(&mut c, &words, &mut seq), (0, true));
        assert!(!c.pending(seq));
    }

    #[test]
    fn a_failed_launch_keeps_its_changes_for_the_next_staging() {
        let (n, mut c) = (256usize, Changes::new(2));
        c.grow(n);
        let mut words = vec![7u64; n];
        let mut mirrors = [vec![0u64; n], vec![0u64; n]];
        for seq in 0..2 {
            c.stage(&mut mirrors[seq as usize], &words, seq);
            c.launched(seq);
        }
        // Launch 2 (mirror 0) is staged, fails, more is bound, and it is staged again.
        words[3] = 1;
        c.mark(3, 2);
        c.stage(&mut mirrors[0], &words, 2);
        words[200] = 2;
        c.mark(200, 2);
        assert_eq!(stale_after(&mut c, &mut mirrors[0], &words, 2), 0);
        c.launched(2);
        // Launch 3 (mirror 1) lacks both changes of launch 2's window.
        assert_eq!(stale_after(&mut c, &mut mirrors[1], &words, 3), 0);
    }

    #[test]
    fn every_word_marked_is_one_copy() {
        let (n, mut c) = (1001usize, Changes::new(4));
        c.grow(n);
        let mut words = vec![1u64; n];
        let mut mirrors: Vec<Vec<u64>> = (0..4).map(|_| vec![0u64; n.div_ceil(8) * 8]).collect();
        for seq in 0..4 {
            c.stage(&mut mirrors[seq as usize], &words, seq);
            c.launched(seq);
        }
        words.iter_mut().for_each(|w| *w = 2);
        c.mark_all(4);
        assert_eq!(c.stage(&mut mirrors[0], &words, 4), n);
        assert_eq!(&mirrors[0][..n], &words[..]);
    }

    #[test]
    fn half_the_blocks_changed_is_one_pass_over_the_stamps() {
        let (n, mut c) = (1001usize, Changes::new(2));
        c.grow(n);
        let mut words = vec![1u64; n];
        let mut mirrors: Vec<Vec<u64>> = (0..2).map(|_| vec![0u64; n.div_ceil(8) * 8]).collect();
        for seq in 0..2 {
            c.stage(&mut mirrors[seq as usize], &words, seq);
            c.launched(seq);
        }
        // Every other block (63 of 126) changes before launch 2: listed blocks ≥ half the table.
        let changed: Vec<usize> = (0..n.div_ceil(8)).step_by(2).collect();
        for &b in &changed {
            words[8 * b] = 3;
            c.mark(8 * b, 2);
        }
        let written = c.stage(&mut mirrors[0], &words, 2);
        assert_eq!(&mirrors[0][..n], &words[..]);
        // Whole blocks: 0, 2, …, 124 (the short last block, 125, did not change).
        assert_eq!(written, 8 * changed.len());
    }
}
