//! Prepared binding sets on the device: sets alternating, built fresh every replay, mixed with
//! slots bound one by one, with no synchronization between replays; and their typed errors.

use rand::{Rng, SeedableRng};

use super::{capturing_ctx, sized};
use crate::table::BindingSet;
use crate::{ArgTable, DeviceBuffer, Error, Misuse, Stream, TableOptions};

/// A table of `2 × nodes` slots read by `nodes` independent `add1` kernels (slot 2k the input of
/// node k, slot 2k + 1 its output). Before each of the replays, with no synchronization: one of
/// three prepared input sets (each over fresh buffers the test lets go of once the set is
/// built), a set of fresh output views built for this replay, sometimes a few slots bound one by
/// one (which breaks a set's hold of all its slots), sometimes an output set that binds those
/// again too. Every output
/// view is written by one replay only, so the arena checked at the end shows what each replay
/// read.
#[test]
#[ignore = "needs a CUDA GPU"]
fn binding_sets_alternating_fresh_and_mixed_with_single_binds_stay_right() {
    const ELEMS: usize = 256;
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let (nodes, replays) = sized((400, 200), (400, 8), (60, 6));
    let (mut table, slots, exec) = super::table::independent_add1s(&stream, nodes, ELEMS);
    let value = |set: usize, k: usize| (set * 1000 + k % 100) as f32;
    // Three input sets; their buffers live on in the sets alone.
    let input_sets: Vec<BindingSet> = (0..3)
        .map(|j| {
            let bufs: Vec<DeviceBuffer<f32>> = (0..nodes)
                .map(|k| DeviceBuffer::from_host(&ctx, &vec![value(j, k); ELEMS]).unwrap())
                .collect();
            let mut b = table.binding_set();
            for (k, buf) in bufs.iter().enumerate() {
                b.bind(&slots[2 * k], buf).unwrap();
            }
            b.build().unwrap()
        })
        .collect();
    let singles: Vec<DeviceBuffer<f32>> = (0..4)
        .map(|j| DeviceBuffer::from_host(&ctx, &vec![-(j as f32) - 1.0; ELEMS]).unwrap())
        .collect();
    // Output views: one per node per replay, written once each.
    let views = nodes * replays;
    let arena = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; views * ELEMS]).unwrap();
    let view = |v: usize| arena.slice(v * ELEMS..(v + 1) * ELEMS).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    // What node k reads now: an input set's buffer or a single one.
    let mut reads = vec![f32::NAN; nodes];
    let mut want = vec![f32::NAN; views];
    for r in 0..replays {
        let j = rng.random_range(0..3);
        table.bind_set(&input_sets[j]).unwrap();
        (0..nodes).for_each(|k| reads[k] = value(j, k));
        if rng.random_range(0..3) == 0 {
            for _ in 0..rng.random_range(1..=8) {
                let (k, s) = (rng.random_range(0..nodes), rng.random_range(0..4));
                table.bind(&slots[2 * k], &singles[s]).unwrap();
                reads[k] = -(s as f32) - 1.0;
            }
        }
        // This replay's outputs: a set over the output slots, or now and then one that also
        // binds again the inputs bound one by one (a layout of its own); dropped once applied:
        // the table keeps it.
        let every = rng.random_range(0..5) == 0;
        let mut b = table.binding_set();
        for k in 0..nodes {
            b.bind_view(&slots[2 * k + 1], &view(r * nodes + k))
                .unwrap();
        }
        let outputs = if every {
            // The inputs bound one by one above, again, by raw address (`singles` outlives every
            // launch).
            let words: Vec<u64> = (0..nodes)
                .map(|k| {
                    if reads[k] < 0.0 {
                        singles[(-reads[k] - 1.0) as usize].as_raw()
                    } else {
                        0
                    }
                })
                .collect();
            for (k, &w) in words.iter().enumerate() {
                if w != 0 {
                    // SAFETY: `singles` outlives every launch.
                    unsafe { b.bind_raw(&slots[2 * k], w).unwrap() };
                }
            }
            b.build().unwrap()
        } else {
            b.build().unwrap()
        };
        table.bind_set(&outputs).unwrap();
        drop(outputs);
        if rng.random_range(0..4) == 0 {
            // One output bound one by one to its own view again (a single bind over a set).
            let k = rng.random_range(0..nodes);
            table
                .bind_view(&slots[2 * k + 1], &view(r * nodes + k))
                .unwrap();
        }
        table.launch(&exec, &stream).unwrap();
        for k in 0..nodes {
            want[r * nodes + k] = reads[k] + 1.0;
        }
    }
    drop(input_sets);
    stream.synchronize().unwrap();
    let got = arena.to_vec().unwrap();
    for (v, w) in want.iter().enumerate() {
        let got = &got[v * ELEMS..(v + 1) * ELEMS];
        assert!(
            got.iter().all(|g| g == w),
            "replay {} node {}: want {w}, got {:?}",
            v / nodes,
            v % nodes,
            &got[..4]
        );
    }
    assert_eq!(table.stats().launches, replays as u64);
    table.trim();
}

/// A set of another table, an empty set, and a bad binding inside a set are typed errors that
/// change nothing.
#[test]
#[ignore = "needs a CUDA GPU"]
fn binding_set_misuse_is_a_typed_error() {
    let ctx = capturing_ctx();
    let mut a = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let mut b = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let (sa, sb) = (a.ptr_slot::<f32>().unwrap(), b.ptr_slot::<f32>().unwrap());
    let buf = DeviceBuffer::<f32>::zeroed(&ctx, 64).unwrap();
    let misuse = |e: Error, call: &str, want: Misuse| {
        assert!(
            matches!(&e, Error::Misuse { call: c, misuse, .. } if *c == call && *misuse == want),
            "{e}"
        )
    };
    let empty = a.binding_set().build().unwrap_err();
    misuse(empty, "BindingSetBuilder::build", Misuse::EmptySet);
    let mut builder = a.binding_set();
    let other = builder.bind(&sb, &buf).unwrap_err();
    misuse(other, "BindingSetBuilder::bind", Misuse::OtherTable);
    builder.bind(&sa, &buf).unwrap();
    let set = builder.build().unwrap();
    assert_eq!(set.len(), 1);
    misuse(
        b.bind_set(&set).unwrap_err(),
        "ArgTable::bind_set",
        Misuse::OtherTable,
    );
    let misaligned = buf.slice(1..64).unwrap();
    let addr = misaligned.as_raw();
    misuse(
        a.binding_set().bind_view(&sa, &misaligned).unwrap_err(),
        "BindingSetBuilder::bind_view",
        Misuse::Misaligned { addr, align: 16 },
    );
    a.bind_set(&set).unwrap();
    assert_eq!(a.stats().binds, 1);
}
