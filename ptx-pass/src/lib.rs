//! A PTX-to-PTX pass: chosen kernel parameters take the address of an argument-table slot.
//!
//! [`indirect`] reads PTX as Triton 3.3–3.6 (LLVM's NVPTX back end) and nvcc/NVRTC write it and
//! rewrites chosen parameters of chosen kernels (`.entry`) so that each takes the *address* of
//! a table slot: an 8-byte word in global memory holding the real value. The kernel loads the
//! value once at entry into a register, and every former `ld.param` of the parameter reads that
//! register instead. A graph captured with such kernels can then be rebound by writing the table,
//! without updating the graph.
//!
//! ```
//! let ptx = "\
//! .version 8.4
//! .target sm_70
//! .address_size 64
//!
//! .visible .entry add1(
//! \t.param .u64 add1_param_0,
//! \t.param .u32 add1_param_1
//! )
//! {
//! \t.reg .b32 \t%r<2>;
//! \t.reg .b64 \t%rd<3>;
//!
//! \tld.param.u64 \t%rd1, [add1_param_0];
//! \tld.param.u32 \t%r1, [add1_param_1];
//! \tcvta.to.global.u64 \t%rd2, %rd1;
//! \tst.global.u32 \t[%rd2], %r1;
//! \tret;
//! }
//! ";
//! // What the default selection would do: the pointer is used only as an address.
//! let info = graph_rt_ptx::inspect(ptx.as_bytes())?;
//! assert!(info.kernels[0].params[0].default.selected());
//! assert!(!info.kernels[0].params[1].default.selected());
//!
//! // Rewrite it, and `n` too, with programmatic dependent launch.
//! let options = graph_rt_ptx::Options {
//!     scalars: vec!["add1:1".parse()?],
//!     pdl: true,
//!     ..Default::default()
//! };
//! let out = graph_rt_ptx::indirect(ptx.as_bytes(), &options)?;
//! assert!(out.ptx.contains(".target sm_90"));
//! assert!(out.ptx.contains("griddepcontrol.wait;"));
//! assert_eq!(
//!     out.kernels[0].describe(),
//!     "add1(0: add1_param_0 -> slot(ptr, align 16), 1: add1_param_1 -> slot(.u32))"
//! );
//! # Ok::<(), graph_rt_ptx::PtxError>(())
//! ```
//!
//! # What changes
//!
//! Everything is preserved byte for byte except:
//! - the declaration of a chosen scalar parameter, whose type becomes `.u64`, and of a chosen
//!   `.ptr` parameter, whose `.align N` becomes `.align 8` (it now points to an 8-byte slot);
//! - each `ld.param.<t> %dst, [P];` of a chosen parameter `P`, which becomes
//!   `mov.b<bits> %dst, <value>;` (a `cvt` when `%dst` is wider than the load, as nvcc's
//!   `ld.param.s32 %rd9, [P];` is);
//! - new lines right after the body's leading `.reg`/`.local`/`.shared` declarations:
//!   registers named with a prefix found nowhere else in the kernel (`%tslot`), then per chosen
//!   parameter `ld.param.u64`, `cvta.to.global.u64` and `ld.global` of its slot, wrapped in
//!   `griddepcontrol.launch_dependents;` / `griddepcontrol.wait;` with [`Options::pdl`];
//! - with [`Options::pdl`], `.version` and `.target` when below 7.8 and `sm_90`, and every
//!   `ld.global.nc` of a rewritten kernel becomes `ld.global` (the kernel may start while the
//!   grid it depends on still writes, so its loads take the coherent path).
//!
//! A chosen parameter whose name appears anywhere but in such a plain, full-size `ld.param`
//! (address taken, offset or vector loads, by-value aggregates, `call` arguments) is refused
//! with [`PtxError::Refused`], naming the kernel, the parameter and the line: the pass never
//! guesses.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod body;
mod error;
mod module;
mod report;
mod rewrite;
mod scan;
mod select;
#[cfg(test)]
mod testutil;
mod types;
mod uses;

pub use error::PtxError;
pub use report::{
    KernelInfo, KernelSignature, ModuleInfo, ParamInfo, ParamSignature, Rewritten, Slot, SlotKind,
};
pub use select::{DefaultChoice, Options, ParamRef};
pub use types::{ScalarType, StateSpace};

/// Lists the module's kernels and parameters, with what the default selection of [`indirect`]
/// would do with each parameter and why.
///
/// # Errors
///
/// [`PtxError::NotUtf8`] and [`PtxError::Parse`] for input that is not PTX this pass reads.
pub fn inspect(ptx: &[u8]) -> Result<ModuleInfo, PtxError> {
    let text = scan::utf8(ptx)?;
    let m = module::parse(text)?;
    Ok(ModuleInfo::new(&m))
}

/// Rewrites the parameters `options` selects so that each takes the address of a table slot
/// holding its value (see the [crate docs](crate)).
///
/// # Errors
///
/// - [`PtxError::NotUtf8`], [`PtxError::Parse`]: the input is not PTX this pass reads;
/// - [`PtxError::UnknownKernel`], [`PtxError::UnknownParam`], [`PtxError::BadSelection`],
///   [`PtxError::NothingToRewrite`]: the options do not fit the module;
/// - [`PtxError::Refused`]: a chosen parameter is used in a way the pass does not understand;
/// - [`PtxError::Pdl`]: `.version`/`.target` cannot be raised for PDL.
pub fn indirect(ptx: &[u8], options: &Options) -> Result<Rewritten, PtxError> {
    let text = scan::utf8(ptx)?;
    let m = module::parse(text)?;
    m.check_64_bit()?;
    let plan = select::plan(&m, options)?;
    let (ptx, kernels, notes) = rewrite::rewrite(&m, &plan, options.pdl)?;
    Ok(Rewritten {
        ptx,
        kernels,
        notes,
    })
}
