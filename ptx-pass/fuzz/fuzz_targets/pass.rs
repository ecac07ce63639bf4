//! The PTX pass on any bytes: `inspect`, then `indirect` with options drawn from the first byte
//! (PDL, Triton scratch rule, a named scalar and pointer chosen by the next bytes), then the
//! pass again on its own output. Nothing may panic; errors are fine. Seeded with real PTX
//! (kernels/ptx, ptx-pass/fixtures), libFuzzer mutates it.
#![no_main]

use graph_rt_ptx::{indirect, inspect, Options, ParamRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, ptx)) = data.split_first() else {
        return;
    };
    let info = inspect(ptx);
    let mut options = Options {
        pdl: flags & 1 != 0,
        exclude_triton_scratch: flags & 2 == 0,
        ..Options::default()
    };
    if let Ok(info) = &info {
        // Name a scalar and a parameter by index, from the flags' upper bits.
        if let Some(k) = info.kernels.get(usize::from(flags >> 5) % info.kernels.len().max(1)) {
            let index = usize::from(flags >> 2) & 7;
            if flags & 4 != 0 {
                options.scalars.push(ParamRef::Index {
                    kernel: k.name.clone(),
                    index,
                });
            }
            if flags & 8 != 0 {
                options.params.push(ParamRef::Index {
                    kernel: k.name.clone(),
                    index: index / 2,
                });
            }
            if flags & 16 != 0 {
                options.kernels = Some(vec![k.name.clone()]);
            }
        }
    }
    if let Ok(out) = indirect(ptx, &options) {
        let _ = inspect(out.ptx.as_bytes());
        let _ = indirect(out.ptx.as_bytes(), &Options::default());
    }
});
