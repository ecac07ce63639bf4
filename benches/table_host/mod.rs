//! The table bench's host-cost part: binding the slots of a chain's table and launching, timed
//! on the host beside the plain and raw graph launches, and the cost of writing into mapped host
//! memory (see `benches/table.rs`).

use std::cell::RefCell;
use std::time::Instant;

use graph_rt::{Context, DeviceBuffer, GraphExec, Stream};

use super::{capture_chain, common, load, static_chain, table_chain, TableChain, ELEMS};

/// A variant of [`host_costs`]: bind every slot of `chain` to the next of the first `count`
/// buffer sets (with `bind_raw` when `raw`), launch; host µs of both, then synchronize.
fn rotating<'a>(
    name: &'static str,
    stream: &'a Stream,
    chain: &'a RefCell<TableChain>,
    sets: &'a [Vec<DeviceBuffer<f32>>],
    count: usize,
    raw: bool,
) -> common::Variant<'a> {
    let mut turn = 0usize;
    (
        name,
        Box::new(move || {
            turn += 1;
            let t = Instant::now();
            {
                let mut c = chain.borrow_mut();
                if raw {
                    c.bind_all_raw(&sets[turn % count]);
                } else {
                    c.bind_all(&sets[turn % count]);
                }
                c.launch(stream);
            }
            let us = t.elapsed().as_secs_f64() * 1e6;
            stream.synchronize().expect("sync");
            us
        }),
    )
}

/// Host µs of binding slots of an N-node chain's table (K = N + 1 slots) + launching, against
/// the launch alone, for N ∈ {1, 10, 100, 200, 1000} (anchor4's N = 10, 200, 1000 among them).
/// Variants, each on a table of its own: every slot bound alternating two buffer sets, safe and
/// raw; every slot bound rotating three sets (a slot remembers four bindings: no reference
/// counting) and five (every binding new to its slot); a random tenth of the slots bound each
/// launch, and the same tenth (every tenth slot) each launch (two sets). For comparison: a plain
/// graph of the same N nodes launched through graph-rt and through the raw `cuGraphLaunch`
/// (instantiated plainly and with upload), and the stream's capture-status query that every
/// table launch makes.
pub fn host_costs(ctx: &Context, stream: &Stream) -> Vec<(usize, Vec<(&'static str, f64)>)> {
    let table_pdl = load(ctx, graph_rt::kernels::CHAIN_TABLE_PDL.ptx, "add1");
    let pdl = load(ctx, graph_rt::kernels::CHAIN_PDL.ptx, "add1");
    let mut out = Vec::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for n in [1usize, 10, 100, 200, 1000] {
        let k = n + 1;
        let sets: Vec<Vec<DeviceBuffer<f32>>> = (0..5)
            .map(|_| {
                (0..k)
                    .map(|_| DeviceBuffer::zeroed(ctx, ELEMS).expect("alloc"))
                    .collect()
            })
            .collect();
        let chain = |_| {
            let mut c = table_chain(stream, &table_pdl, true, n);
            c.bind_all(&sets[0]);
            RefCell::new(c)
        };
        // Each variant on a table of its own: a launch writes into its mirror what was bound
        // since that mirror's last launch, so a table shared with binding variants would make
        // the launch alone carry their words.
        let (still, two, raw, three, tenth, five, same_tenth) = (
            chain(0),
            chain(1),
            chain(2),
            chain(3),
            chain(4),
            chain(5),
            chain(6),
        );
        let plain = static_chain(stream, &pdl, true, &sets[0]);
        let uploaded = capture_chain(stream, &pdl, true, &sets[0])
            .instantiate_with(&graph_rt::InstantiateOptions {
                upload: Some(stream),
                ..Default::default()
            })
            .expect("instantiate");
        // SAFETY (both raw launches below): live execs of this context and a live stream; the
        // graphs are plain chains over buffers the bench keeps to the end.
        let raw_launch = |e: &GraphExec| unsafe {
            let r = graph_rt::sys::cuGraphLaunch(e.as_raw(), stream.as_raw()).expect("driver");
            assert_eq!(r, graph_rt::sys::CUresult::CUDA_SUCCESS);
        };
        // A random tenth of the slots (at least one) for each round, drawn up front.
        let picks: Vec<Vec<usize>> = (0..64)
            .map(|_| {
                (0..(k / 10).max(1))
                    .map(|_| (next() % k as u64) as usize)
                    .collect()
            })
            .collect();
        let host = |f: &mut dyn FnMut()| {
            let t = Instant::now();
            f();
            let us = t.elapsed().as_secs_f64() * 1e6;
            stream.synchronize().expect("sync");
            us
        };
        let (mut m, mut g) = (0usize, 0usize);
        let variants: Vec<common::Variant> = vec![
            (
                "launch, no bind",
                Box::new(|| host(&mut || still.borrow_mut().launch(stream))),
            ),
            rotating("bind K + launch", stream, &two, &sets, 2, false),
            rotating("bind K raw + launch", stream, &raw, &sets, 2, true),
            rotating("bind K (3 sets) + launch", stream, &three, &sets, 3, false),
            rotating("bind K (5 sets) + launch", stream, &five, &sets, 5, false),
            (
                "bind the same K/10 + launch",
                Box::new(|| {
                    g += 1;
                    let set = &sets[g % 2];
                    host(&mut || {
                        let mut c = same_tenth.borrow_mut();
                        let TableChain { table, slots, .. } = &mut *c;
                        for s in (0..k).step_by(10) {
                            table.bind(&slots[s], &set[s]).expect("bind");
                        }
                        c.launch(stream)
                    })
                }),
            ),
            (
                "bind K/10 + launch",
                Box::new(|| {
                    m += 1;
                    let (set, pick) = (&sets[m % 2], &picks[m % picks.len()]);
                    host(&mut || {
                        let mut c = tenth.borrow_mut();
                        let TableChain { table, slots, .. } = &mut *c;
                        for &s in pick {
                            table.bind(&slots[s], &set[s]).expect("bind");
                        }
                        c.launch(stream)
                    })
                }),
            ),
            (
                "plain graph launch",
                Box::new(|| host(&mut || plain.launch(stream).expect("launch"))),
            ),
            (
                "plain graph, raw cuGraphLaunch",
                Box::new(|| host(&mut || raw_launch(&plain))),
            ),
            (
                "plain graph uploaded, raw cuGraphLaunch",
                Box::new(|| host(&mut || raw_launch(&uploaded))),
            ),
            (
                "capture-status query",
                Box::new(|| {
                    let t = Instant::now();
                    for _ in 0..100 {
                        std::hint::black_box(stream.capture_status().expect("status"));
                    }
                    t.elapsed().as_secs_f64() * 1e6 / 100.0
                }),
            ),
        ];
        out.push((n, common::interleave(300, variants)));
    }
    out
}

/// Host ns of writing 1,024 words (8 KiB) into mapped host memory (what a table's mirror is), by
/// store width, against the same into ordinary memory: how much a mirror write costs where
/// mapped memory is uncached or write-combined.
pub fn mirror_writes(ctx: &Context) -> Vec<(&'static str, f64)> {
    const WORDS: usize = 1024;
    let mapped = graph_rt::MappedHostBuffer::<u64>::zeroed(ctx, WORDS).expect("mapped");
    let mut plain = vec![0u64; WORDS];
    let src: Vec<u64> = (0..WORDS as u64).collect();
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..100 {
            f();
        }
        t.elapsed().as_secs_f64() * 1e9 / 100.0
    };
    let dst = mapped.as_ptr();
    let variants: Vec<common::Variant> = vec![
        (
            "mapped, 8-byte volatile stores",
            Box::new(|| {
                time(&mut || {
                    for (i, &w) in src.iter().enumerate() {
                        // SAFETY: in bounds; nothing else accesses the buffer.
                        unsafe { dst.add(i).write_volatile(w) };
                    }
                }) / 1e3
            }),
        ),
        (
            "mapped, memcpy",
            Box::new(|| {
                // SAFETY: in bounds; nothing else accesses the buffer.
                time(&mut || unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, WORDS) })
                    / 1e3
            }),
        ),
        (
            "mapped, 16-byte stores",
            Box::new(|| {
                time(&mut || {
                    for i in (0..WORDS).step_by(2) {
                        // SAFETY: in bounds; nothing else accesses the buffer; u128 stores of
                        // 8-aligned memory through unaligned writes.
                        unsafe {
                            let v = src.as_ptr().add(i).cast::<u128>().read_unaligned();
                            std::ptr::write_volatile(
                                dst.add(i).cast::<[u64; 2]>(),
                                std::mem::transmute::<u128, [u64; 2]>(v),
                            );
                        }
                    }
                }) / 1e3
            }),
        ),
        (
            "ordinary memory, memcpy",
            Box::new(|| time(&mut || plain.copy_from_slice(&src)) / 1e3),
        ),
    ];
    common::interleave(200, variants)
        .into_iter()
        .map(|(n, us)| (n, us * 1e3))
        .collect()
}
