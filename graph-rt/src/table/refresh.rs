//! The parameters of the table's refresh, as `kernels/cuda/refresh.cuh` lists them: the contract
//! between the table and the two kernels that refresh it (`table_refresh`, and the prelude's
//! `prelude_refresh_patch`, which takes the same six first), in one type instead of a bare tuple.

/// What a refresh kernel reads and writes of one table, in the order and layout of its first six
/// parameters (`#[repr(C)]`: the offsets of the fields are the offsets of the kernel's
/// parameters, which a test checks against the shipped PTX).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct RefreshArgs {
    /// The ring of `depth` host mirrors (mapped memory, device address), `words` words each.
    pub(crate) mirrors: u64,
    /// The device table.
    pub(crate) table: u64,
    /// The words a mirror holds and a refresh copies (whole 64-byte blocks).
    pub(crate) words: u32,
    /// Mirrors in the ring.
    pub(crate) depth: u32,
    /// The refresh count and the count of blocks done (two device words).
    pub(crate) seq: u64,
    /// The acknowledgement of each mirror (mapped memory, device address).
    pub(crate) acks: u64,
}

impl RefreshArgs {
    /// `table_refresh`'s parameters.
    pub(crate) fn params(self) -> (u64, u64, u32, u32, u64, u64) {
        (
            self.mirrors,
            self.table,
            self.words,
            self.depth,
            self.seq,
            self.acks,
        )
    }

    /// `prelude_refresh_patch`'s parameters: these, then `count` patches at `patches`.
    pub(crate) fn with_patches(
        self,
        patches: u64,
        count: u32,
    ) -> (u64, u64, u32, u32, u64, u64, u64, u32) {
        let (m, t, w, d, s, a) = self.params();
        (m, t, w, d, s, a, patches, count)
    }
}

#[cfg(test)]
mod tests {
    use super::RefreshArgs;

    /// The shipped `table_refresh` declares six parameters whose sizes and natural offsets are
    /// the fields of [`RefreshArgs`].
    #[test]
    fn refresh_args_match_the_kernels_parameters() {
        let info = graph_rt_ptx::inspect(graph_rt_kernels::TABLE.ptx.as_bytes()).unwrap();
        let k = info
            .kernels
            .iter()
            .find(|k| k.name == "table_refresh")
            .expect("table_refresh");
        let mut offset = 0usize;
        let declared: Vec<(usize, usize)> = k
            .params
            .iter()
            .map(|p| {
                let align = p.align.unwrap_or(p.size);
                offset = offset.div_ceil(align) * align;
                let at = offset;
                offset += p.size;
                (at, p.size)
            })
            .collect();
        let fields = vec![
            (std::mem::offset_of!(RefreshArgs, mirrors), 8),
            (std::mem::offset_of!(RefreshArgs, table), 8),
            (std::mem::offset_of!(RefreshArgs, words), 4),
            (std::mem::offset_of!(RefreshArgs, depth), 4),
            (std::mem::offset_of!(RefreshArgs, seq), 8),
            (std::mem::offset_of!(RefreshArgs, acks), 8),
        ];
        assert_eq!(declared, fields);
        assert_eq!(std::mem::size_of::<RefreshArgs>(), offset);
    }
}
