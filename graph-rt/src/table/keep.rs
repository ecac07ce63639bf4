//! What each slot of a table keeps alive, so that a buffer bound to a slot outlives every launch
//! that may read it.

/// The identity of "bound to nothing kept alive" (a raw address or a scalar): never an
/// allocation's identity, which is the 8-aligned address of its shared state, and with the two
/// low bits clear like one.
pub(super) const NOTHING: usize = 4;

/// Bindings a slot remembers: its current one and the three before it.
const PLACES: usize = 4;

/// The two low bits of a remembered identity: which place of the slot's `held` holds its
/// reference.
const PLACE: usize = PLACES - 1;

/// What the slots of a table keep alive (`R`: a reference to an allocation): for each slot, its
/// current binding and the three before it, most recent first, so that rebinding a slot among
/// up to four buffers (double or triple buffering) costs no reference counting.
///
/// What binding reads is 32 bytes a slot: the remembered identities (0: none; [`NOTHING`]; else
/// an allocation's 8-aligned address), each with, in its two low bits, which of the slot's four
/// places in `held` holds its reference. Only a binding new to its slot touches `held`: it takes
/// the place of the least recent one, which is evicted and released after the launches made up
/// to its eviction (it may have stopped being current earlier: later, never sooner).
pub(super) struct Keeps<R> {
    keys: Vec<[usize; PLACES]>,
    held: Vec<[Option<R>; PLACES]>,
}

impl<R> Default for Keeps<R> {
    fn default() -> Self {
        Self {
            keys: Vec::new(),
            held: Vec::new(),
        }
    }
}

impl<R> Keeps<R> {
    /// Adds a slot, unbound.
    pub(super) fn push(&mut self) {
        self.keys.push([0; PLACES]);
        self.held.push([None, None, None, None]);
    }

    /// What slot `i`'s current binding keeps alive, if it keeps anything (not a raw address, a
    /// scalar, or a binding set's slot).
    pub(super) fn current(&self, i: usize) -> Option<&R> {
        let k = *self.keys.get(i)?.first()?;
        if k == 0 || k & !PLACE == NOTHING {
            return None;
        }
        self.held[i][k & PLACE].as_ref()
    }

    /// Whether slot `i` was ever bound.
    #[inline]
    pub(super) fn is_bound(&self, i: usize) -> bool {
        self.keys[i][0] != 0
    }

    /// Makes `key` (an allocation's identity, or [`NOTHING`]; `make` gives its reference) slot
    /// `i`'s current binding when `seq` launches have been made; returns the binding evicted,
    /// with the launch count up to which launches may read it.
    #[cfg(test)]
    pub(super) fn hold(
        &mut self,
        i: usize,
        key: usize,
        make: impl FnOnce() -> Option<R>,
        seq: u64,
    ) -> Option<(u64, R)> {
        let at = self.position(i, key);
        self.hold_at(i, key, at, make, seq)
    }

    /// Where slot `i` remembers `key` (0: current), if it does.
    #[inline]
    pub(super) fn position(&self, i: usize, key: usize) -> Option<usize> {
        self.keys[i]
            .iter()
            .position(|&r| r != 0 && r & !PLACE == key)
    }

    /// [`Keeps::hold`] with `at`, what [`Keeps::position`] gave for `key` and slot `i`.
    #[inline]
    pub(super) fn hold_at(
        &mut self,
        i: usize,
        key: usize,
        at: Option<usize>,
        make: impl FnOnce() -> Option<R>,
        seq: u64,
    ) -> Option<(u64, R)> {
        debug_assert!(key != 0 && key & PLACE == 0);
        debug_assert_eq!(at, self.position(i, key));
        let k = &mut self.keys[i];
        // Remembered: it moves to the front, the ones before it move back.
        if let Some(j) = at {
            front(k, j);
            return None;
        }
        // New to the slot: it takes the least recent one's place, or a free one.
        let last = k[PLACES - 1];
        let place = if last != 0 {
            last & PLACE
        } else {
            let mut used = [false; PLACES];
            for &r in k.iter().filter(|&&r| r != 0) {
                used[r & PLACE] = true;
            }
            used.iter().position(|u| !u).unwrap_or(0)
        };
        front(k, PLACES - 1);
        k[0] = key | place;
        std::mem::replace(&mut self.held[i][place], make()).map(|r| (seq, r))
    }

    /// Whether allocation `key` is one slot `i` remembers (then it was checked when first
    /// bound).
    #[cfg(test)]
    pub(super) fn holds(&self, i: usize, key: usize) -> bool {
        self.position(i, key).is_some()
    }

    /// Gives up slot `i`'s earlier bindings when `seq` launches have been made, handing each to
    /// `evicted` with the launch count up to which launches may read it.
    pub(super) fn drop_previous(&mut self, i: usize, seq: u64, evicted: impl FnMut((u64, R))) {
        self.drop_from(i, 1, seq, evicted)
    }

    /// Gives up every binding slot `i` remembers, its current one included (a binding set owns
    /// the slot now), handing each to `evicted` as [`Keeps::drop_previous`] does. The slot stays
    /// bound: the ledger counts a slot a set owns as bound.
    pub(super) fn drop_all(&mut self, i: usize, seq: u64, evicted: impl FnMut((u64, R))) {
        self.drop_from(i, 0, seq, evicted)
    }

    /// Gives up the bindings slot `i` remembers from place `first` on (0: current).
    fn drop_from(&mut self, i: usize, first: usize, seq: u64, mut evicted: impl FnMut((u64, R))) {
        for j in first..PLACES {
            let r = std::mem::replace(&mut self.keys[i][j], 0);
            if r != 0 {
                if let Some(held) = self.held[i][r & PLACE].take() {
                    evicted((seq, held));
                }
            }
        }
    }

    /// Number of slots.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }
}

/// Moves `k[j]` to the front, shifting `k[..j]` back by one (a slice rotation is a call into a
/// general algorithm; this is a few moves).
#[inline(always)]
fn front(k: &mut [usize; PLACES], j: usize) {
    let v = k[j];
    let mut t = j;
    while t > 0 {
        k[t] = k[t - 1];
        t -= 1;
    }
    k[0] = v;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::resource::Resource;

    fn one() -> Keeps<Resource> {
        let mut k = Keeps::default();
        k.push();
        k
    }

    fn ids(k: &Keeps<Resource>) -> Vec<usize> {
        k.keys[0].iter().map(|r| r & !PLACE).collect()
    }

    fn res() -> (usize, Resource) {
        let r: Resource = Arc::new(0u64);
        (Arc::as_ptr(&r) as *const () as usize, r)
    }

    /// The places of the remembered identities are distinct and hold their references.
    fn consistent(k: &Keeps<Resource>, refs: &[(usize, &Resource)]) {
        let live: Vec<usize> = k.keys[0].iter().copied().filter(|&r| r != 0).collect();
        let mut places: Vec<usize> = live.iter().map(|r| r & PLACE).collect();
        places.sort();
        places.dedup();
        assert_eq!(places.len(), live.len(), "two identities share a place");
        for &r in &live {
            if let Some((_, want)) = refs.iter().find(|(id, _)| *id == r & !PLACE) {
                let held = k.held[0][r & PLACE].as_ref().expect("held");
                assert!(Arc::ptr_eq(held, want));
            }
        }
    }

    #[test]
    fn rotating_up_to_four_buffers_counts_nothing() {
        let mut k = one();
        let rs: Vec<(usize, Resource)> = (0..4).map(|_| res()).collect();
        assert!(!k.is_bound(0));
        for (seq, (id, r)) in rs.iter().enumerate() {
            assert!(k.hold(0, *id, || Some(r.clone()), seq as u64).is_none());
        }
        assert!(k.is_bound(0));
        // Two, three and four sets rotating: no new reference, nothing evicted.
        for sets in 2..=4 {
            for seq in 0..20 {
                let (id, _) = rs[seq % sets];
                assert!(k
                    .hold(0, id, || panic!("no new reference"), seq as u64)
                    .is_none());
            }
        }
        for (_, r) in &rs {
            assert_eq!(Arc::strong_count(r), 2);
        }
        let refs: Vec<(usize, &Resource)> = rs.iter().map(|(id, r)| (*id, r)).collect();
        consistent(&k, &refs);
    }

    #[test]
    fn a_fifth_binding_evicts_the_least_recent_after_the_launches_made_so_far() {
        let mut k = one();
        let rs: Vec<(usize, Resource)> = (0..6).map(|_| res()).collect();
        for (seq, (id, r)) in rs[..4].iter().enumerate() {
            k.hold(0, *id, || Some(r.clone()), seq as u64);
        }
        // Most recent first: 3, 2, 1, 0. Binding 1 again moves it to the front.
        k.hold(0, rs[1].0, || panic!("remembered"), 4);
        assert_eq!(ids(&k), vec![rs[1].0, rs[3].0, rs[2].0, rs[0].0]);
        let (until, evicted) = k.hold(0, rs[4].0, || Some(rs[4].1.clone()), 5).unwrap();
        assert_eq!(until, 5);
        assert!(Arc::ptr_eq(&evicted, &rs[0].1));
        assert!(!k.holds(0, rs[0].0) && k.holds(0, rs[4].0));
        // A raw address evicts the least recent one too.
        assert!(k.hold(0, NOTHING, || None, 6).is_some());
        assert_eq!(ids(&k)[0], NOTHING);
        assert!(k
            .hold(0, NOTHING, || panic!("nothing to keep"), 7)
            .is_none());
        let refs: Vec<(usize, &Resource)> = rs.iter().map(|(id, r)| (*id, r)).collect();
        consistent(&k, &refs);
        let mut dropped = Vec::new();
        k.drop_previous(0, 8, |e| dropped.push(e.0));
        assert_eq!(dropped, vec![8; 3]);
        assert_eq!(ids(&k), vec![NOTHING, 0, 0, 0]);
        // Bound anew after that: the places stay apart.
        for (seq, (id, r)) in rs.iter().enumerate() {
            k.hold(0, *id, || Some(r.clone()), 10 + seq as u64);
            consistent(&k, &refs);
        }
    }
}
