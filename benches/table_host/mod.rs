//! The table bench's host-cost part: binding the slots of a chain's table and launching, timed
//! on the host beside the plain and raw graph launches, and the cost of writing into mapped host
//! memory (see `benches/table.rs`).

use std::cell::RefCell;
use std::time::Instant;

use graph_rt::table::BindingSet;
use graph_rt::{Context, DeviceBuffer, GraphExec, Stream};

mod replica;

use super::{
    capture_chain, cfg, common, load, static_chain, table_chain, table_chain_ring, TableChain,
    ELEMS,
};

/// How a variant of [`host_costs`] binds every slot before launching.
#[derive(Clone, Copy)]
enum BindAll {
    /// One by one, safely.
    Safe,
    /// One by one, by raw address.
    Raw,
    /// A prepared [`BindingSet`] of every slot.
    Set,
}

/// A variant of [`host_costs`]: bind every slot of `chain` to the next of the first `count`
/// buffer sets (`how`), launch; host µs of both, then synchronize.
fn rotating<'a>(
    name: &'static str,
    stream: &'a Stream,
    chain: &'a RefCell<TableChain>,
    sets: &'a [Vec<DeviceBuffer<f32>>],
    prepared: &'a [BindingSet],
    count: usize,
    how: BindAll,
) -> common::Variant<'a> {
    let mut turn = 0usize;
    (
        name,
        Box::new(move || {
            turn += 1;
            let t = Instant::now();
            {
                let mut c = chain.borrow_mut();
                match how {
                    BindAll::Safe => c.bind_all(&sets[turn % count]),
                    BindAll::Raw => c.bind_all_raw(&sets[turn % count]),
                    BindAll::Set => c.table.bind_set(&prepared[turn % count]).expect("bind set"),
                }
                c.launch(stream);
            }
            let us = t.elapsed().as_secs_f64() * 1e6;
            stream.synchronize().expect("sync");
            us
        }),
    )
}

/// One group of [`host_costs`]: its variants' medians, interleaved among themselves.
pub type Group = Vec<(&'static str, f64)>;

/// Host µs of binding slots of an N-node chain's table (K = N + 1 slots) + launching, against
/// the launch alone, for N ∈ {1, 10, 100, 200, 1000} (anchor4's N = 10, 200, 1000 among them).
/// Variants, each on a table of its own: every slot bound alternating two buffer sets (one by
/// one, safely and by raw address, and as a prepared [`BindingSet`]), three sets rotating (one
/// by one: a slot remembers four bindings, no reference counting; and as prepared sets), five
/// (every binding new to its slot); a random tenth of the slots bound each launch, and the same
/// tenth (every tenth slot) each launch (two sets). For comparison: a plain graph of the same N
/// nodes launched through graph-rt and through the raw `cuGraphLaunch` (instantiated plainly and
/// with upload), and the stream's capture-status query that every table launch makes.
///
/// The variants run in groups of four to six, each with the launch alone as its baseline, the
/// first two beside anchor4's two paths rebuilt in this process ([`replica`]); within a group,
/// rounds in which each variant runs eight times in a row (the first two dropped). The host
/// cost of binding a thousand slots and launching a graph of a thousand nodes depends on how
/// much of the table's and the driver's state for it is still in the CPU's caches: a variant
/// repeated is measured as a loop that launches its graph step after step runs it, not as the
/// cold first touch after a dozen other tables and graphs.
pub fn host_costs(ctx: &Context, stream: &Stream) -> Vec<(usize, Vec<Group>)> {
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
        let (still, two, raw, three, tenth, five, same_tenth, set2, set3, set_tenth) = (
            chain(0),
            chain(9),
            chain(1),
            chain(2),
            chain(3),
            chain(4),
            chain(5),
            chain(6),
            chain(7),
            chain(8),
        );
        // Prepared sets of every `step`-th slot over the first three buffer sets.
        let prepare = |c: &RefCell<TableChain>, step: usize| -> Vec<BindingSet> {
            let mut c = c.borrow_mut();
            let TableChain { table, slots, .. } = &mut *c;
            sets[..3]
                .iter()
                .map(|bufs| {
                    let mut b = table.binding_set();
                    for (slot, buf) in slots.iter().zip(bufs).step_by(step) {
                        b.bind(slot, buf).expect("bind");
                    }
                    b.build().expect("set")
                })
                .collect()
        };
        let (prepared2, prepared3) = (prepare(&set2, 1), prepare(&set3, 1));
        let prepared_tenth = prepare(&set_tenth, 10);
        let host = |f: &mut dyn FnMut()| {
            let t = Instant::now();
            f();
            let us = t.elapsed().as_secs_f64() * 1e6;
            stream.synchronize().expect("sync");
            us
        };
        let replica = replica::Replica::new(ctx, stream, &table_pdl, &sets[0]);
        let words: Vec<Vec<u64>> = sets[..3]
            .iter()
            .map(|s| s.iter().map(|b| b.as_raw()).collect())
            .collect();
        let replica_write = |count: usize| -> common::Variant {
            let mut turn = 0usize;
            let (replica, words) = (&replica, &words);
            (
                if count == 2 {
                    "anchor4 replica: write K + launch"
                } else {
                    "anchor4 replica: write K (3 sets) + launch"
                },
                Box::new(move || {
                    turn += 1;
                    let t = Instant::now();
                    replica.write_and_launch(&words[turn % count], stream);
                    let us = t.elapsed().as_secs_f64() * 1e6;
                    stream.synchronize().expect("sync");
                    us
                }),
            )
        };
        let replica_alone = || -> common::Variant {
            let replica = &replica;
            (
                "anchor4 replica: no rebinding",
                Box::new(move || host(&mut || replica.launch_chain(stream))),
            )
        };
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
        // A table's exec launched by the raw cuGraphLaunch, after four launches through the table
        // filled its ring of mirrors: the same graph as the launch alone's, without graph-rt's
        // host side (the table's count is left behind: only raw launches follow).
        let unstaged = chain(10);
        for _ in 0..4 {
            unstaged.borrow_mut().launch(stream);
        }
        stream.synchronize().expect("sync");
        // The launch alone on a ring of 64 mirrors: an acknowledgement read (mapped host memory
        // the device wrote) once every 64 launches instead of every 4 — how much of the launch's
        // cost over the raw cuGraphLaunch that read is.
        let ring64 = {
            let mut c = table_chain_ring(stream, &table_pdl, true, n, 64);
            c.bind_all(&sets[0]);
            RefCell::new(c)
        };
        let alone = || -> common::Variant {
            (
                "launch, no bind",
                Box::new(|| host(&mut || still.borrow_mut().launch(stream))),
            )
        };
        let (mut m, mut g) = (0usize, 0usize);
        let (none, safe, raw_b, set) = (&[][..], BindAll::Safe, BindAll::Raw, BindAll::Set);
        let groups: Vec<Vec<common::Variant>> = vec![
            // As anchor4 (whose paths are rebuilt here beside graph-rt's): the launch alone,
            // every slot written + launch.
            vec![
                alone(),
                rotating("bind K + launch", stream, &two, &sets, none, 2, safe),
                rotating(
                    "bind set of K + launch",
                    stream,
                    &set2,
                    &sets,
                    &prepared2,
                    2,
                    set,
                ),
                replica_alone(),
                replica_write(2),
                (
                    "anchor4 replica: pull graph, nothing written",
                    Box::new(|| host(&mut || replica.launch_pull(stream))),
                ),
                (
                    "the same table exec, raw cuGraphLaunch",
                    Box::new(|| host(&mut || raw_launch(&unstaged.borrow().exec))),
                ),
            ],
            vec![
                alone(),
                replica_write(3),
                rotating(
                    "bind K (3 sets) + launch",
                    stream,
                    &three,
                    &sets,
                    none,
                    3,
                    safe,
                ),
                rotating(
                    "bind set of K (3 sets) + launch",
                    stream,
                    &set3,
                    &sets,
                    &prepared3,
                    3,
                    set,
                ),
                rotating("bind K raw + launch", stream, &raw, &sets, none, 2, raw_b),
            ],
            vec![
                alone(),
                rotating("bind K + launch", stream, &two, &sets, none, 2, safe),
                rotating(
                    "bind set of K + launch",
                    stream,
                    &set2,
                    &sets,
                    &prepared2,
                    2,
                    set,
                ),
                rotating(
                    "bind set of the same K/10 + launch",
                    stream,
                    &set_tenth,
                    &sets,
                    &prepared_tenth,
                    2,
                    set,
                ),
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
            ],
            vec![
                alone(),
                rotating(
                    "bind K (5 sets) + launch",
                    stream,
                    &five,
                    &sets,
                    none,
                    5,
                    safe,
                ),
                (
                    "launch, no bind, a ring of 64 mirrors",
                    Box::new(|| host(&mut || ring64.borrow_mut().launch(stream))),
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
            ],
        ];
        let results = groups
            .into_iter()
            .map(|v| common::interleave_blocks(50, 8, v))
            .collect();
        out.push((n, results));
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

/// Prints [`host_costs`]'s groups, each with its variants above the launch alone and the ratios
/// to anchor4's replica.
pub fn print(host: &[(usize, Vec<Group>)]) {
    println!("\ntable: host µs of binding slots of an N-node chain's table (K = N + 1 slots) + launch (no sync in the timed part), median of interleaved rounds; each line a group of variants interleaved among themselves, the launch alone in each");
    for (n, groups) in host {
        for (gi, v) in groups.iter().enumerate() {
            let get = |name: &str| v.iter().find(|(x, _)| *x == name).map(|x| x.1);
            let cells: Vec<String> = v.iter().map(|(name, t)| format!("{name} {t:.2}")).collect();
            println!("table: N={n:<5} group {} · {}", gi + 1, cells.join(" · "));
            let Some(base) = get("launch, no bind") else {
                continue;
            };
            let above: Vec<String> = v
                .iter()
                .filter(|(name, _)| {
                    name.starts_with("bind") || name.starts_with("anchor4 replica: write")
                })
                .map(|(name, t)| {
                    format!("{} {:+.2} µs", name.trim_end_matches(" + launch"), t - base)
                })
                .collect();
            let mut line = above.join(", ");
            if let (Some(all), Some(tenth), Some(same)) = (
                get("bind K + launch"),
                get("bind K/10 + launch"),
                get("bind the same K/10 + launch"),
            ) {
                line += &format!(
                    " · ÷ bind K: a random K/10 {:.3}, the same K/10 {:.3}",
                    (tenth - base) / (all - base),
                    (same - base) / (all - base)
                );
            }
            if let (Some(all), Some(same)) = (
                get("bind set of K + launch"),
                get("bind set of the same K/10 + launch"),
            ) {
                line += &format!(
                    " · prepared sets, the same K/10 ÷ K {:.3}",
                    (same - base) / (all - base)
                );
            }
            let ratio = |ours: &str, theirs: &str| -> Option<String> {
                let (a, b) = (get(ours)?, get(theirs)?);
                Some(format!(
                    "{} ÷ {theirs} {:.3}",
                    ours.trim_end_matches(" + launch"),
                    a / b
                ))
            };
            let vs_anchor: Vec<String> = [
                ("launch, no bind", "anchor4 replica: no rebinding"),
                (
                    "launch, no bind",
                    "anchor4 replica: pull graph, nothing written",
                ),
                (
                    "bind set of K + launch",
                    "anchor4 replica: write K + launch",
                ),
                ("bind K + launch", "anchor4 replica: write K + launch"),
                (
                    "bind set of K (3 sets) + launch",
                    "anchor4 replica: write K (3 sets) + launch",
                ),
                (
                    "bind K (3 sets) + launch",
                    "anchor4 replica: write K (3 sets) + launch",
                ),
            ]
            .iter()
            .filter_map(|(a, b)| ratio(a, b))
            .collect();
            if !vs_anchor.is_empty() {
                line += &format!(" · {}", vs_anchor.join(", "));
            }
            if let Some(plain) = get("plain graph launch") {
                line += &format!(" · launch alone ÷ plain graph launch {:.3}", base / plain);
            }
            if let Some(ring) = get("launch, no bind, a ring of 64 mirrors") {
                line += &format!(" · launch alone on 64 mirrors ÷ on 4 {:.3}", ring / base);
            }
            println!(
                "table: N={n:<5} group {} above launch alone: {line}",
                gi + 1
            );
        }
    }
}
