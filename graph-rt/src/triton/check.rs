//! Each argument of a Triton launch against its parameter and the specialization Triton
//! compiled for.

use super::arg::{ArgKind, TritonArg};
use super::kernel::TritonParam;
use crate::error::{Error, Misuse, Result};
use crate::launch::{ArgSlot, ScalarKind};

/// Checks each argument against its parameter: kind, size, float or integer, slot or not, and
/// the specialization (a 16-divisible pointer 16-byte aligned, or bound only to such addresses;
/// a 16-divisible integer a multiple of 16, or a slot taking only multiples of 16); every slot
/// of one table.
pub(super) fn check_args(params: &[TritonParam], args: &[TritonArg<'_>]) -> Result<()> {
    const CALL: &str = "TritonKernel::launch";
    if args.len() != params.len() {
        return Err(Error::misuse(
            CALL,
            Misuse::CountMismatch {
                expected: params.len(),
                got: args.len(),
            },
            format!("{} arguments for {} parameters", args.len(), params.len()),
        ));
    }
    let mut table = None;
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        // `misuse` of argument `i`, `why` in words.
        let misuse = |kind: Misuse, why: String| -> Result<()> {
            Err(Error::misuse(
                CALL,
                kind,
                format!("argument {i} (`{}`): {why}", p.name),
            ))
        };
        let fail = |why: String| misuse(Misuse::WrongArgument { index: i }, why);
        let breaks = |why: String| misuse(Misuse::Specialization { index: i }, why);
        match (&a.kind, p.slot) {
            (ArgKind::Slot { slot, .. }, true) => {
                let (t, ok) = match *slot {
                    ArgSlot::Pointer { table, align } if p.pointer => {
                        if p.divisible_16 && align < 16 {
                            return breaks(format!("the kernel was compiled for 16-byte-aligned pointers; the slot declares {align}-byte alignment"));
                        }
                        (table, true)
                    }
                    ArgSlot::Scalar {
                        table,
                        size,
                        multiple_of,
                        kind,
                    } if !p.pointer && size == p.size => {
                        if p.float != (kind == ScalarKind::Float) {
                            return fail(format!(
                                "the kernel reads {} here; the slot holds {kind:?} values",
                                if p.float { "a float" } else { "an integer" }
                            ));
                        }
                        if p.divisible_16 && !p.float && multiple_of < 16 {
                            return breaks("the kernel was compiled for multiples of 16; the slot takes any value (ArgTable::scalar_slot_with(16))".into());
                        }
                        (table, true)
                    }
                    _ => (0, false),
                };
                if !ok {
                    return fail(format!("takes a {} slot, given {a:?}", kind_of(p)));
                }
                if *table.get_or_insert(t) != t {
                    let why = "a slot of another table than the slots before it";
                    return misuse(Misuse::OtherTable, why.into());
                }
            }
            (_, true) => return fail(format!("the table form takes a slot here, given {a:?}")),
            (ArgKind::Slot { .. }, false) => {
                return fail("a slot where the kernel takes the value itself".into())
            }
            (ArgKind::Pointer { addr, .. }, false) if p.pointer => {
                if p.divisible_16 && addr % 16 != 0 {
                    return breaks(format!(
                        "{addr:#x} is not 16-byte aligned, as the kernel was compiled for"
                    ));
                }
            }
            (ArgKind::Value { bits, size, float }, false)
                if !p.pointer && *size == p.size && *float == p.float =>
            {
                if p.divisible_16 && !p.float && bits % 16 != 0 {
                    return breaks(format!(
                        "the kernel was compiled for a multiple of 16; given {}",
                        signed(*bits, *size)
                    ));
                }
            }
            _ => return fail(format!("takes {}, given {a:?}", kind_of(p))),
        }
    }
    Ok(())
}

fn kind_of(p: &TritonParam) -> String {
    if p.pointer {
        "a pointer".into()
    } else {
        let t = if p.float { "float" } else { "integer" };
        format!("a {}-byte {t}", p.size)
    }
}

fn signed(bits: u64, size: usize) -> i64 {
    let shift = 64 - 8 * size as u32;
    ((bits << shift) as i64) >> shift
}
