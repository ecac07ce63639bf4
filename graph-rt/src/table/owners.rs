//! Which slots a prepared [`BindingSet`](super::BindingSet) owns: for every slot, the applied
//! set its word came from (if any), and for every applied set, how many slots it still owns and
//! what it keeps alive. A set is released (after the launches made until then) once no slot owns
//! it any more: every one of its slots was bound again, by another set or one by one.
//!
//! Applying a set over the same slots as the set that owns all of them (two or three sets
//! alternating) hands that ownership over whole: no work per slot.

/// One applied set: its layout's identity, what it keeps alive (and that keep's identity), and
/// how many slots it still owns (0: the entry is free).
struct Held<S> {
    layout: usize,
    keep_id: usize,
    keep: Option<S>,
    live: usize,
}

/// The owners of a table's slots; `S` is what a set keeps alive.
pub(super) struct Owners<S> {
    /// For each slot, 1 + the index in `held` of the set that owns it; 0: none.
    owner: Vec<u32>,
    held: Vec<Held<S>>,
    /// Slots some set owns (the sum of the sets' `live`): while 0, a slot bound one by one
    /// needs no look at `owner` (one cache line fewer a binding, at random slots a miss).
    owned: usize,
}

impl<S> Default for Owners<S> {
    fn default() -> Self {
        Self {
            owner: Vec::new(),
            held: Vec::new(),
            owned: 0,
        }
    }
}

/// What applying a set did: every slot it binds was owned by it already (the same set applied
/// again: the words are unchanged), or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    Unchanged,
    Changed,
}

impl<S> Owners<S> {
    /// Adds a slot, owned by no set.
    pub(super) fn push(&mut self) {
        self.owner.push(0);
    }

    /// Whether a set owns slot `i` (then the slot is bound).
    #[inline]
    pub(super) fn is_owned(&self, i: usize) -> bool {
        self.owned != 0 && self.owner[i] != 0
    }

    /// Slot `i` is bound one by one: the set that owned it (if any) owns one slot fewer, and is
    /// handed to `released` once it owns none.
    #[inline]
    pub(super) fn disown(&mut self, i: usize, released: impl FnOnce(S)) {
        if self.owned == 0 {
            return;
        }
        let o = self.owner[i];
        if o != 0 {
            self.owner[i] = 0;
            self.owned -= 1;
            self.lose_one(o as usize - 1, released);
        }
    }

    fn lose_one(&mut self, h: usize, released: impl FnOnce(S)) {
        let held = &mut self.held[h];
        held.live -= 1;
        if held.live == 0 {
            if let Some(keep) = held.keep.take() {
                released(keep);
            }
        }
    }

    /// Makes the set of layout `layout` over slots `indices` (distinct, in range), keeping
    /// `keep()` (identity `keep_id`) alive, the owner of those slots; `released` is called with
    /// each set that owns no slot any more. Returns what changed and how many of the slots were
    /// never bound before (`bound(i)`: slot `i` was bound one by one).
    pub(super) fn apply(
        &mut self,
        layout: usize,
        indices: &[u32],
        keep_id: usize,
        keep: impl FnOnce() -> S,
        bound: impl Fn(usize) -> bool,
        mut released: impl FnMut(S),
    ) -> (Applied, usize) {
        let n = indices.len();
        // The set of this layout that owns all its slots: handed over whole.
        if let Some(h) = self
            .held
            .iter()
            .position(|h| h.live == n && h.layout == layout && h.keep.is_some())
        {
            let held = &mut self.held[h];
            if held.keep_id == keep_id {
                return (Applied::Unchanged, 0);
            }
            held.keep_id = keep_id;
            if let Some(old) = held.keep.replace(keep()) {
                released(old);
            }
            return (Applied::Changed, 0);
        }
        let h = match self.held.iter().position(|h| h.live == 0) {
            Some(h) => h,
            None => {
                self.held.push(Held {
                    layout: 0,
                    keep_id: 0,
                    keep: None,
                    live: 0,
                });
                self.held.len() - 1
            }
        };
        let mut fresh = 0;
        for &i in indices {
            let i = i as usize;
            let o = self.owner[i];
            if o != 0 {
                self.lose_one(o as usize - 1, &mut released);
            } else {
                self.owned += 1;
                if !bound(i) {
                    fresh += 1;
                }
            }
            // `h` < the slots' count ≤ u32::MAX - 7: a set owns at least one slot.
            self.owner[i] = h as u32 + 1;
        }
        self.held[h] = Held {
            layout,
            keep_id,
            keep: Some(keep()),
            live: n,
        };
        (Applied::Changed, fresh)
    }

    /// Sets that own slots now.
    #[cfg(test)]
    pub(super) fn live_sets(&self) -> usize {
        self.held.iter().filter(|h| h.live > 0).count()
    }

    /// Whether the count of owned slots is what `owner` says.
    #[cfg(test)]
    pub(super) fn count_holds(&self) -> bool {
        let by_slot = self.owner.iter().filter(|&&o| o != 0).count();
        let by_set: usize = self.held.iter().map(|h| h.live).sum();
        self.owned == by_slot && by_slot == by_set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(slots: usize) -> Owners<u32> {
        let mut o = Owners::default();
        for _ in 0..slots {
            o.push();
        }
        o
    }

    #[test]
    fn alternating_sets_of_one_layout_hand_over_whole() {
        let mut o = owners(8);
        let all: Vec<u32> = (0..8).collect();
        let mut released = Vec::new();
        let a = o.apply(1, &all, 10, || 10, |_| false, |s| released.push(s));
        assert_eq!(a, (Applied::Changed, 8));
        let b = o.apply(1, &all, 11, || 11, |_| false, |s| released.push(s));
        assert_eq!((b, released.clone()), ((Applied::Changed, 0), vec![10]));
        let again = o.apply(
            1,
            &all,
            11,
            || panic!("kept"),
            |_| true,
            |s| released.push(s),
        );
        assert_eq!(again, (Applied::Unchanged, 0));
        assert_eq!(o.live_sets(), 1);
        assert!(o.count_holds());
    }

    #[test]
    fn a_set_goes_once_no_slot_owns_it() {
        let mut o = owners(6);
        let mut released = Vec::new();
        o.apply(1, &[0, 1, 2], 10, || 10, |_| false, |s| released.push(s));
        o.apply(2, &[2, 3], 20, || 20, |_| false, |s| released.push(s));
        assert!(released.is_empty());
        o.disown(0, |s| released.push(s));
        assert!(released.is_empty());
        o.disown(1, |s| released.push(s));
        assert_eq!(released, vec![10], "slot 2 went to set 20 earlier");
        assert!(!o.is_owned(0) && o.is_owned(2));
        // Set 10's entry is free again and reused.
        o.apply(1, &[0, 1, 2], 11, || 11, |_| true, |s| released.push(s));
        assert_eq!(o.live_sets(), 2);
        // Slot 2 moved back to 11; set 20 still owns slot 3.
        o.apply(2, &[2, 3], 21, || 21, |_| true, |s| released.push(s));
        assert_eq!(released, vec![10, 20]);
        assert!(o.count_holds());
        for i in 0..6 {
            o.disown(i, |_| {});
            assert!(o.count_holds());
        }
        assert!((0..6).all(|i| !o.is_owned(i)));
    }
}
