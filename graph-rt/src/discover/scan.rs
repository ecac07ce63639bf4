//! Pointer discovery by comparison (pure, no CUDA): which parameter words of which kernel nodes
//! hold addresses inside the buffers the caller declares dynamic, from two captures of the same
//! work with different allocations of those buffers. A word is accepted only where each capture
//! holds its own allocation's address plus the same interior offset: no false positives by
//! construction.
//!
//! Memory the captured work allocates itself (stream-ordered allocations a capture turns into
//! the graph's allocation nodes) lies at other addresses in each capture, and each graph keeps
//! its own for every replay: a word that is the `k`-th allocation's address plus the same
//! interior offset in both captures is graph-internal, neither patched nor unexplained.

/// One kernel node's parameters, as a capture recorded them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeParams {
    /// The kernel (its raw handle, as an identity).
    pub function: usize,
    /// The parameter buffer's bytes.
    pub bytes: Vec<u8>,
    /// Each parameter's `(offset, size)` in `bytes`.
    pub layout: Vec<(usize, usize)>,
}

/// A buffer declared dynamic, in one capture: its address range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dynamic {
    /// First byte's address.
    pub base: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Dynamic {
    /// Whether the two ranges share a byte.
    pub(crate) fn overlaps(&self, other: &Dynamic) -> bool {
        self.base < other.base.saturating_add(other.len)
            && other.base < self.base.saturating_add(self.len)
    }

    fn interior(&self, addr: u64) -> Option<u64> {
        (addr >= self.base && addr - self.base < self.len).then(|| addr - self.base)
    }
}

/// A parameter word to rewrite on rebinding: node `node` (index in the capture's kernel nodes),
/// byte `offset` of its parameter buffer, holds `buffer`'s address plus `interior`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patch {
    /// Index of the kernel node, in the order both captures list them.
    pub node: usize,
    /// Byte offset of the 8-byte word in the node's parameter buffer.
    pub offset: usize,
    /// Which dynamic buffer.
    pub buffer: usize,
    /// Bytes from the buffer's start.
    pub interior: u64,
}

/// What discovery found that it does not patch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unexplained {
    /// The captures have different numbers of kernel nodes.
    NodeCount {
        /// Kernel nodes in the first capture.
        first: usize,
        /// In the second.
        second: usize,
    },
    /// Node `node` runs different kernels, or a different parameter layout, in the captures.
    NodeDiffers {
        /// The node.
        node: usize,
    },
    /// A parameter word differs between the captures but is not the same dynamic buffer's
    /// address at the same interior offset in both (a size, a seed, a coincidence).
    WordDiffers {
        /// The node.
        node: usize,
        /// Byte offset of the word.
        offset: usize,
        /// Its value in the first capture.
        first: u64,
        /// In the second.
        second: u64,
    },
    /// The captures' allocation nodes differ: allocation `index` (in node order) has another
    /// size in each, or only one capture made it (`None` in the other).
    Allocation {
        /// The allocation's index.
        index: usize,
        /// Its bytes in the first capture.
        first: Option<u64>,
        /// In the second.
        second: Option<u64>,
    },
}

/// The result of [`discover`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// Every word to patch, by node then offset.
    pub patches: Vec<Patch>,
    /// Words that differ between the captures as graph-internal addresses (the same
    /// allocation of each capture at the same interior offset): each graph keeps its own.
    pub internal_words: usize,
    /// What differs and is not patched.
    pub unexplained: Vec<Unexplained>,
    /// Dynamic buffers no node reads (by index).
    pub unseen: Vec<usize>,
}

/// Compares two captures' kernel nodes (`first`, `second`, in the same order) whose dynamic
/// buffers were `dyn_first[k]` and `dyn_second[k]`. Every 8-aligned 8-byte word of every
/// parameter of at least 8 bytes is looked at (pointers inside by-value structs too). A word
/// that is the same in both is static; one that is buffer `k`'s address plus `d` in the first
/// and buffer `k`'s plus the same `d` in the second is a [`Patch`]; any other difference is
/// reported, never guessed. Returns `None` if the declarations are unusable: the two lists of
/// different lengths, or a buffer's two allocations overlapping (then equal words could be
/// addresses).
pub fn discover(
    first: &[NodeParams],
    second: &[NodeParams],
    dyn_first: &[Dynamic],
    dyn_second: &[Dynamic],
) -> Option<Discovery> {
    discover_with_internal(first, second, dyn_first, dyn_second, &[], &[])
}

/// [`discover`], where the captures also allocated memory of their own: `internal_first[k]`
/// and `internal_second[k]` are the `k`-th allocation node's memory in each (in node order). A
/// differing word that is allocation `k`'s address plus `d` in the first capture and allocation
/// `k`'s plus the same `d` in the second is graph-internal (counted in
/// [`Discovery::internal_words`]); allocations pair only where both captures made one of the
/// same size, and every other difference in them is an [`Unexplained::Allocation`].
pub fn discover_with_internal(
    first: &[NodeParams],
    second: &[NodeParams],
    dyn_first: &[Dynamic],
    dyn_second: &[Dynamic],
    internal_first: &[Dynamic],
    internal_second: &[Dynamic],
) -> Option<Discovery> {
    if dyn_first.len() != dyn_second.len() {
        return None;
    }
    if dyn_first
        .iter()
        .any(|a| dyn_second.iter().any(|b| a.overlaps(b)))
    {
        return None;
    }
    let mut out = Discovery::default();
    let paired: Vec<(Dynamic, Dynamic)> = internal_first
        .iter()
        .zip(internal_second)
        .filter(|(a, b)| a.len == b.len)
        .map(|(a, b)| (*a, *b))
        .collect();
    let allocations = internal_first.len().max(internal_second.len());
    if let Some(index) = (0..allocations)
        .find(|&k| internal_first.get(k).map(|d| d.len) != internal_second.get(k).map(|d| d.len))
    {
        out.unexplained.push(Unexplained::Allocation {
            index,
            first: internal_first.get(index).map(|d| d.len),
            second: internal_second.get(index).map(|d| d.len),
        });
    }
    if first.len() != second.len() {
        out.unexplained.push(Unexplained::NodeCount {
            first: first.len(),
            second: second.len(),
        });
    }
    for (node, (a, b)) in first.iter().zip(second).enumerate() {
        if a.function != b.function || a.layout != b.layout || a.bytes.len() != b.bytes.len() {
            out.unexplained.push(Unexplained::NodeDiffers { node });
            continue;
        }
        for &(start, size) in &a.layout {
            let end = start.saturating_add(size).min(a.bytes.len());
            let mut offset = start.next_multiple_of(8);
            while offset + 8 <= end {
                let word = |bytes: &[u8]| {
                    u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap_or([0; 8]))
                };
                let (wa, wb) = (word(&a.bytes), word(&b.bytes));
                if wa != wb {
                    let hit =
                        dyn_first
                            .iter()
                            .zip(dyn_second)
                            .enumerate()
                            .find_map(|(k, (da, db))| {
                                let d = da.interior(wa)?;
                                (db.interior(wb) == Some(d)).then_some((k, d))
                            });
                    let internal = || {
                        paired.iter().any(|(ia, ib)| {
                            ia.interior(wa).is_some_and(|d| ib.interior(wb) == Some(d))
                        })
                    };
                    match hit {
                        Some((buffer, interior)) => out.patches.push(Patch {
                            node,
                            offset,
                            buffer,
                            interior,
                        }),
                        None if internal() => out.internal_words += 1,
                        None => out.unexplained.push(Unexplained::WordDiffers {
                            node,
                            offset,
                            first: wa,
                            second: wb,
                        }),
                    }
                }
                offset += 8;
            }
        }
    }
    out.unseen = (0..dyn_first.len())
        .filter(|k| !out.patches.iter().any(|p| p.buffer == *k))
        .collect();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(function: usize, words: &[u64], layout: &[(usize, usize)]) -> NodeParams {
        NodeParams {
            function,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            layout: layout.to_vec(),
        }
    }

    const A0: Dynamic = Dynamic {
        base: 0x7000_0000,
        len: 0x1000,
    };
    const A1: Dynamic = Dynamic {
        base: 0x9000_0000,
        len: 0x1000,
    };
    const B0: Dynamic = Dynamic {
        base: 0x7100_0000,
        len: 0x1000,
    };
    const B1: Dynamic = Dynamic {
        base: 0x9100_0000,
        len: 0x1000,
    };

    #[test]
    fn addresses_of_the_same_buffer_at_the_same_interior_offset_are_patched() {
        // kernel(x, n, struct { y + 0x40, stride }) : x and y dynamic.
        let layout = [(0, 8), (8, 8), (16, 16)];
        let a = node(1, &[A0.base, 4096, A1.base + 0x40, 7], &layout);
        let b = node(1, &[B0.base, 4096, B1.base + 0x40, 7], &layout);
        let d = discover(&[a], &[b], &[A0, A1], &[B0, B1]).unwrap();
        assert_eq!(
            d.patches,
            [
                Patch {
                    node: 0,
                    offset: 0,
                    buffer: 0,
                    interior: 0
                },
                Patch {
                    node: 0,
                    offset: 16,
                    buffer: 1,
                    interior: 0x40
                }
            ]
        );
        assert!(d.unexplained.is_empty() && d.unseen.is_empty());
    }

    #[test]
    fn a_coincidence_is_never_patched() {
        let layout = [(0, 8), (8, 8)];
        // Word 1 equals buffer 1's address in the first capture only (a seed, a size...).
        let a = node(1, &[A0.base, A1.base], &layout);
        let b = node(1, &[B0.base, 0x1234], &layout);
        let d = discover(std::slice::from_ref(&a), &[b], &[A0, A1], &[B0, B1]).unwrap();
        assert_eq!(
            d.patches,
            [Patch {
                node: 0,
                offset: 0,
                buffer: 0,
                interior: 0
            }]
        );
        assert_eq!(
            d.unexplained,
            [Unexplained::WordDiffers {
                node: 0,
                offset: 8,
                first: A1.base,
                second: 0x1234
            }]
        );
        assert_eq!(d.unseen, [1]);
        // Equal in both captures (a static value that happens to lie in a range): static.
        let d = discover(
            std::slice::from_ref(&a),
            &[node(1, &[B0.base, A1.base], &layout)],
            &[A0, A1],
            &[B0, B1],
        )
        .unwrap();
        assert_eq!(d.patches.len(), 1);
        assert!(d.unexplained.is_empty());
        // Another buffer's address, or another interior offset, in the second capture.
        for second in [B0.base + 8, B1.base + 8] {
            let b = node(1, &[B0.base, second], &layout);
            let d = discover(
                &[node(1, &[A0.base, A1.base], &layout)],
                &[b],
                &[A0, A1],
                &[B0, B1],
            )
            .unwrap();
            assert_eq!(d.patches.len(), 1, "{second:#x}");
        }
    }

    #[test]
    fn differing_nodes_and_bad_declarations_are_reported() {
        let layout = [(0, 8)];
        let d = discover(
            &[node(1, &[A0.base], &layout), node(2, &[1], &layout)],
            &[node(1, &[B0.base], &layout), node(3, &[1], &layout)],
            &[A0],
            &[B0],
        )
        .unwrap();
        assert_eq!(d.unexplained, [Unexplained::NodeDiffers { node: 1 }]);
        let d = discover(&[node(1, &[A0.base], &layout)], &[], &[A0], &[B0]).unwrap();
        assert_eq!(
            d.unexplained,
            [Unexplained::NodeCount {
                first: 1,
                second: 0
            }]
        );
        // Overlapping allocations, or different counts of dynamic buffers: unusable.
        assert!(discover(
            &[],
            &[],
            &[A0],
            &[Dynamic {
                base: A0.base + 8,
                len: 8
            }]
        )
        .is_none());
        assert!(discover(&[], &[], &[A0], &[]).is_none());
        // Words of a 4-byte parameter and a misaligned tail are not looked at.
        let short = [(0, 4), (4, 12)];
        let a = NodeParams {
            function: 1,
            bytes: vec![0xaa; 16],
            layout: short.to_vec(),
        };
        let mut b = a.clone();
        b.bytes[0] = 0;
        assert!(discover(&[a], &[b], &[], &[])
            .unwrap()
            .unexplained
            .is_empty());
    }

    #[test]
    fn addresses_of_the_same_allocation_at_the_same_interior_offset_are_internal() {
        // Each capture's own two allocations (what a stream-ordered alloc in a capture makes).
        let g0 = Dynamic {
            base: 0xa000_0000,
            len: 0x2000,
        };
        let g1 = Dynamic {
            base: 0xa000_4000,
            len: 0x100,
        };
        let h0 = Dynamic {
            base: 0xb000_0000,
            len: 0x2000,
        };
        let h1 = Dynamic {
            base: 0xb000_4000,
            len: 0x100,
        };
        // kernel(x, tmp0 + 0x40, tmp1): x declared.
        let layout = [(0, 8), (8, 8), (16, 8)];
        let a = node(1, &[A0.base, g0.base + 0x40, g1.base], &layout);
        let b = node(1, &[B0.base, h0.base + 0x40, h1.base], &layout);
        let d = discover_with_internal(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            &[A0],
            &[B0],
            &[g0, g1],
            &[h0, h1],
        )
        .unwrap();
        assert_eq!(d.patches.len(), 1);
        assert_eq!(d.internal_words, 2);
        assert!(d.unexplained.is_empty(), "{:?}", d.unexplained);
        // Without the allocations declared, the same words are unexplained (the behaviour of
        // `discover`).
        let d = discover(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            &[A0],
            &[B0],
        )
        .unwrap();
        assert_eq!((d.internal_words, d.unexplained.len()), (0, 2));
        // Another allocation, or another interior offset, in the second capture: unexplained.
        for second in [h1.base + 0x40, h0.base + 0x48] {
            let b = node(1, &[B0.base, second, h1.base], &layout);
            let d = discover_with_internal(
                std::slice::from_ref(&a),
                &[b],
                &[A0],
                &[B0],
                &[g0, g1],
                &[h0, h1],
            )
            .unwrap();
            assert_eq!(d.internal_words, 1, "{second:#x}");
            assert!(matches!(
                d.unexplained[..],
                [Unexplained::WordDiffers { offset: 8, .. }]
            ));
        }
    }

    #[test]
    fn allocations_of_other_sizes_or_counts_are_unexplained_and_not_paired() {
        let g0 = Dynamic {
            base: 0xa000_0000,
            len: 0x2000,
        };
        let h0 = Dynamic {
            base: 0xb000_0000,
            len: 0x1000,
        };
        let layout = [(0, 8)];
        let a = node(1, &[g0.base + 8], &layout);
        let b = node(1, &[h0.base + 8], &layout);
        let d = discover_with_internal(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            &[],
            &[],
            &[g0],
            &[h0],
        )
        .unwrap();
        assert_eq!(d.internal_words, 0);
        assert_eq!(
            d.unexplained[0],
            Unexplained::Allocation {
                index: 0,
                first: Some(0x2000),
                second: Some(0x1000)
            }
        );
        assert!(matches!(d.unexplained[1], Unexplained::WordDiffers { .. }));
        let d = discover_with_internal(&[a], &[b], &[], &[], &[g0], &[]).unwrap();
        assert_eq!(
            d.unexplained[0],
            Unexplained::Allocation {
                index: 0,
                first: Some(0x2000),
                second: None
            }
        );
    }
}
