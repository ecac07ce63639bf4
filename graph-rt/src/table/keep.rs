//! What each slot of a table keeps alive, so that a buffer bound to a slot outlives every launch
//! that may read it.

/// The identity of "bound to nothing kept alive" (a raw address or a scalar): never an
/// allocation's identity, which is the 8-aligned address of its shared state.
pub(super) const NOTHING: usize = 2;

/// What the slots of a table keep alive (`R`: a reference to an allocation): for each slot, its
/// current binding and the one before it, so that rebinding a slot back and forth between two
/// buffers (double buffering) costs no reference counting.
///
/// What binding reads is 16 bytes a slot: the current and the previous binding's identities
/// (0: none; [`NOTHING`]; else an allocation's 8-aligned address), each with, in bit 0, which of
/// the slot's two places in `held` holds its reference. Only a binding new to its slot touches
/// `held`. A binding evicted is released after the launches made up to its eviction (it may
/// have stopped being current earlier: later, never sooner).
pub(super) struct Keeps<R> {
    keys: Vec<[usize; 2]>,
    held: Vec<[Option<R>; 2]>,
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
        self.keys.push([0; 2]);
        self.held.push([None, None]);
    }

    /// Whether slot `i` was ever bound.
    #[inline]
    pub(super) fn is_bound(&self, i: usize) -> bool {
        self.keys[i][0] != 0
    }

    /// The first slot never bound.
    pub(super) fn first_unbound(&self) -> Option<usize> {
        self.keys.iter().position(|k| k[0] == 0)
    }

    /// Makes `key` (an allocation's identity, or [`NOTHING`]; `make` gives its reference) slot
    /// `i`'s current binding when `seq` launches have been made; returns the binding evicted,
    /// with the launch count up to which launches may read it.
    #[inline]
    pub(super) fn hold(
        &mut self,
        i: usize,
        key: usize,
        make: impl FnOnce() -> Option<R>,
        seq: u64,
    ) -> Option<(u64, R)> {
        debug_assert!(key != 0 && key & 1 == 0);
        let [c, p] = self.keys[i];
        if c & !1 == key {
            return None;
        }
        if p & !1 == key {
            self.keys[i] = [p, c];
            return None;
        }
        // New to the slot: it takes the previous one's place (or the place the current one does
        // not use), and the current one becomes the previous one.
        let place = if p != 0 { p & 1 } else { (c & 1) ^ 1 };
        self.keys[i] = [key | place, c];
        std::mem::replace(&mut self.held[i][place], make()).map(|r| (seq, r))
    }

    /// Whether allocation `key` is slot `i`'s current or previous binding (then it was checked
    /// when first bound).
    #[inline]
    pub(super) fn holds(&self, i: usize, key: usize) -> bool {
        let [c, p] = self.keys[i];
        c & !1 == key || p & !1 == key
    }

    /// Gives up slot `i`'s previous binding when `seq` launches have been made (returned with
    /// the launch count up to which launches may read it).
    pub(super) fn drop_previous(&mut self, i: usize, seq: u64) -> Option<(u64, R)> {
        let p = std::mem::replace(&mut self.keys[i][1], 0);
        if p == 0 {
            return None;
        }
        self.held[i][p & 1].take().map(|r| (seq, r))
    }

    /// Number of slots.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }
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

    fn ids(k: &Keeps<Resource>) -> (usize, usize) {
        (k.keys[0][0] & !1, k.keys[0][1] & !1)
    }

    fn res() -> (usize, Resource) {
        let r: Resource = Arc::new(0u64);
        (Arc::as_ptr(&r) as *const () as usize, r)
    }

    #[test]
    fn ping_pong_rebinding_keeps_both_and_counts_nothing() {
        let (mut k, (a, ra), (b, rb)) = (one(), res(), res());
        assert!(!k.is_bound(0));
        assert!(k.hold(0, a, || Some(ra.clone()), 0).is_none());
        assert!(k.is_bound(0));
        assert!(k.hold(0, b, || Some(rb.clone()), 1).is_none());
        // Back and forth: no new reference, nothing evicted.
        for seq in 2..10 {
            let key = if seq % 2 == 0 { a } else { b };
            assert!(k.hold(0, key, || panic!("no new reference"), seq).is_none());
            assert!(k.holds(0, a) && k.holds(0, b));
        }
        assert_eq!((Arc::strong_count(&ra), Arc::strong_count(&rb)), (2, 2));
        assert_eq!(ids(&k), (b, a));
    }

    #[test]
    fn a_third_binding_evicts_the_oldest_after_the_launches_made_so_far() {
        let (mut k, (a, ra), (b, rb), (c, rc)) = (one(), res(), res(), res());
        k.hold(0, a, || Some(ra.clone()), 0);
        k.hold(0, b, || Some(rb.clone()), 3);
        let (until, evicted) = k.hold(0, c, || Some(rc.clone()), 5).unwrap();
        assert_eq!(until, 5);
        assert!(Arc::ptr_eq(&evicted, &ra));
        assert!(!k.holds(0, a));
        // A raw address makes the current binding the previous one, and evicts the previous.
        assert!(k.hold(0, NOTHING, || None, 6).unwrap().1.is::<u64>());
        assert_eq!(ids(&k), (NOTHING, c));
        assert!(k
            .hold(0, NOTHING, || panic!("nothing to keep"), 7)
            .is_none());
        // The references sit where the identities say.
        let place = k.keys[0][1] & 1;
        assert!(Arc::ptr_eq(k.held[0][place].as_ref().unwrap(), &rc));
        assert_eq!(k.drop_previous(0, 8).map(|e| e.0), Some(8));
        assert_eq!(ids(&k), (NOTHING, 0));
        assert!(k.drop_previous(0, 9).is_none());
        // Bound anew after that: the places stay apart.
        k.hold(0, a, || Some(ra.clone()), 10);
        k.hold(0, b, || Some(rb.clone()), 11);
        let (c0, p0) = (k.keys[0][0] & 1, k.keys[0][1] & 1);
        assert_ne!(c0, p0);
        assert!(Arc::ptr_eq(k.held[0][c0].as_ref().unwrap(), &rb));
        assert!(Arc::ptr_eq(k.held[0][p0].as_ref().unwrap(), &ra));
    }
}
