//! What each slot of a table keeps alive, so that a buffer bound to a slot outlives every launch
//! that may read it.

use crate::resource::Resource;

/// What one slot keeps alive: its current binding's allocation and the one before it (with the
/// launch count when it stopped being current), so that rebinding a slot back and forth between
/// two buffers (double buffering) costs no reference counting.
#[derive(Default)]
pub(super) struct Keep {
    /// Whether the slot was ever bound.
    pub(super) bound: bool,
    current: Option<Resource>,
    current_key: usize,
    previous: Option<Resource>,
    previous_key: usize,
    previous_until: u64,
}

impl Keep {
    /// Makes the allocation `key` (0: none, for raw addresses and scalars; `make` gives its
    /// reference) the current binding at launch count `seq`; returns the binding evicted, with
    /// the launch count up to which launches may read it.
    #[inline]
    pub(super) fn hold(
        &mut self,
        key: usize,
        make: impl FnOnce() -> Option<Resource>,
        seq: u64,
    ) -> Option<(u64, Resource)> {
        if key == self.current_key {
            return None;
        }
        if key != 0 && key == self.previous_key {
            std::mem::swap(&mut self.current, &mut self.previous);
            std::mem::swap(&mut self.current_key, &mut self.previous_key);
            self.previous_until = seq;
            return None;
        }
        let evicted = self.previous.take().map(|r| (self.previous_until, r));
        self.previous = self.current.take();
        self.previous_key = self.current_key;
        self.previous_until = seq;
        self.current = make();
        self.current_key = key;
        evicted
    }

    /// Whether allocation `key` is the slot's current or previous binding (then it was checked
    /// when first bound).
    #[inline]
    pub(super) fn holds(&self, key: usize) -> bool {
        key != 0 && (key == self.current_key || key == self.previous_key)
    }

    /// Gives up the previous binding (returned with its launch count).
    pub(super) fn drop_previous(&mut self) -> Option<(u64, Resource)> {
        self.previous_key = 0;
        self.previous.take().map(|r| (self.previous_until, r))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn res() -> (usize, Resource) {
        let r: Resource = Arc::new(0u8);
        (Arc::as_ptr(&r) as *const () as usize, r)
    }

    #[test]
    fn ping_pong_rebinding_keeps_both_and_counts_nothing() {
        let (mut k, (a, ra), (b, rb)) = (Keep::default(), res(), res());
        assert!(k.hold(a, || Some(ra.clone()), 0).is_none());
        assert!(k.hold(b, || Some(rb.clone()), 1).is_none());
        // Back and forth: no new reference, nothing evicted.
        for seq in 2..10 {
            let key = if seq % 2 == 0 { a } else { b };
            assert!(k.hold(key, || panic!("no new reference"), seq).is_none());
        }
        assert_eq!((Arc::strong_count(&ra), Arc::strong_count(&rb)), (2, 2));
        assert_eq!((k.current_key, k.previous_key, k.previous_until), (b, a, 9));
    }

    #[test]
    fn a_third_binding_evicts_the_oldest_with_its_last_launch_count() {
        let (mut k, (a, ra), (b, rb), (c, rc)) = (Keep::default(), res(), res(), res());
        k.hold(a, || Some(ra.clone()), 0);
        k.hold(b, || Some(rb.clone()), 3);
        let (until, evicted) = k.hold(c, || Some(rc.clone()), 5).unwrap();
        // `a` stopped being current at launch count 3: launches 0..3 may read it.
        assert_eq!(until, 3);
        assert!(Arc::ptr_eq(&evicted, &ra));
        // A raw address (key 0) makes the current binding the previous one.
        assert!(k.hold(0, || None, 6).unwrap().1.is::<u8>());
        assert_eq!((k.current_key, k.previous_key), (0, c));
        assert_eq!(k.drop_previous().map(|e| e.0), Some(6));
        assert_eq!(k.previous_key, 0);
    }
}
