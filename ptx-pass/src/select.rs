//! Selection: which parameters of which kernels the pass rewrites, by default or on request.

use std::fmt;
use std::str::FromStr;

use crate::error::PtxError;
use crate::module::{Kernel, Module};
use crate::report::SlotKind;
use crate::types::StateSpace;
use crate::uses::{address_only, loads, Load};

/// What [`indirect`](crate::indirect) rewrites.
///
/// The default rewrites, in every kernel, every parameter that holds a global-memory pointer
/// (see [`DefaultChoice`]), without PDL, leaving Triton's scratch pointers alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The kernels to rewrite, by name; `None` for all. Naming a kernel the module lacks is an
    /// error ([`PtxError::UnknownKernel`]).
    pub kernels: Option<Vec<String>>,
    /// The pointer parameters to rewrite. Empty: the default selection. Otherwise exactly these
    /// (8-byte integer or `.ptr` parameters).
    pub params: Vec<ParamRef>,
    /// Scalar parameters to rewrite as well (never chosen by default). Each becomes a `.u64`
    /// holding the address of a slot whose first bytes hold the value.
    pub scalars: Vec<ParamRef>,
    /// Programmatic dependent launch: each rewritten kernel starts with
    /// `griddepcontrol.launch_dependents;`, then the slot loads, then `griddepcontrol.wait;`.
    /// Raises `.target` to `sm_90` and `.version` to 7.8 where they are lower.
    pub pdl: bool,
    /// Leave out of the default selection the two trailing `.u64 .ptr .global` parameters that
    /// Triton 3.3–3.6 appends to every kernel (`global_scratch`, `profile_scratch`), in modules
    /// LLVM generated. They are excluded only by the default selection, never when named.
    pub exclude_triton_scratch: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kernels: None,
            params: Vec::new(),
            scalars: Vec::new(),
            pdl: false,
            exclude_triton_scratch: true,
        }
    }
}

/// A parameter, by name or by kernel and position.
///
/// Parses from `kernel:index` (0-based) or from a parameter's name (`add1_param_0`); a name
/// matches that parameter in every chosen kernel that has it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ParamRef {
    /// Every parameter of this name in the chosen kernels.
    Name(String),
    /// Parameter `index` (0-based) of `kernel`.
    Index {
        /// The kernel's name.
        kernel: String,
        /// 0-based position in its parameter list.
        index: usize,
    },
}

impl FromStr for ParamRef {
    type Err = PtxError;

    fn from_str(s: &str) -> Result<Self, PtxError> {
        let bad = || PtxError::BadParamRef(s.to_string());
        let ident = |t: &str| {
            !t.is_empty()
                && !t.starts_with(|c: char| c.is_ascii_digit())
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%'))
        };
        match s.rsplit_once(':') {
            Some((kernel, index)) => match index.parse() {
                Ok(index) if ident(kernel) => Ok(ParamRef::Index {
                    kernel: kernel.to_string(),
                    index,
                }),
                _ => Err(bad()),
            },
            None if ident(s) => Ok(ParamRef::Name(s.to_string())),
            None => Err(bad()),
        }
    }
}

impl fmt::Display for ParamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamRef::Name(n) => f.write_str(n),
            ParamRef::Index { kernel, index } => write!(f, "{kernel}:{index}"),
        }
    }
}

/// What the default selection does with a parameter, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DefaultChoice {
    /// Selected: declared `.ptr` (Triton) to global or generic memory.
    DeclaredPointer,
    /// Selected: an 8-byte integer (nvcc/NVRTC pointer) whose loaded value is only ever used as
    /// an address.
    UsedAsAddress,
    /// Selected, but the pass would refuse it: used at `line` in a way it does not understand.
    Refused {
        /// The use.
        line: usize,
        /// What it is.
        reason: String,
    },
    /// Not selected: one of Triton's trailing scratch pointers.
    TritonScratch,
    /// Not selected: a scalar; name it in [`Options::scalars`] to rewrite it.
    Scalar,
    /// Not selected: an 8-byte integer whose value is used at `line` other than as an address.
    NotOnlyAddress {
        /// The first such use.
        line: usize,
    },
    /// Not selected: an 8-byte integer never used as an address (unused, or only loaded).
    NoAddressUse,
    /// Not selected: a `.ptr` into `.shared`, `.const` or `.local` memory.
    NotGlobal,
    /// Not selected: a by-value aggregate (`.b8 name[N]`), which the pass cannot rewrite.
    Aggregate,
}

impl DefaultChoice {
    /// Whether the default selection picks the parameter.
    pub fn selected(&self) -> bool {
        matches!(
            self,
            DefaultChoice::DeclaredPointer
                | DefaultChoice::UsedAsAddress
                | DefaultChoice::Refused { .. }
        )
    }
}

impl fmt::Display for DefaultChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefaultChoice::DeclaredPointer => f.write_str("selected: declared .ptr"),
            DefaultChoice::UsedAsAddress => f.write_str("selected: used only as an address"),
            DefaultChoice::Refused { line, reason } => {
                write!(f, "selected, but refused: line {line}: {reason}")
            }
            DefaultChoice::TritonScratch => f.write_str("not selected: Triton scratch pointer"),
            DefaultChoice::Scalar => f.write_str("not selected: scalar (name it to rewrite it)"),
            DefaultChoice::NotOnlyAddress { line } => {
                write!(
                    f,
                    "not selected: used other than as an address at line {line}"
                )
            }
            DefaultChoice::NoAddressUse => f.write_str("not selected: never used as an address"),
            DefaultChoice::NotGlobal => f.write_str("not selected: not a global pointer"),
            DefaultChoice::Aggregate => f.write_str("not selected: by-value aggregate"),
        }
    }
}

/// What the default selection does with parameter `pi` of kernel `k`.
pub(crate) fn default_choice(
    m: &Module<'_>,
    k: &Kernel,
    pi: usize,
    exclude_triton_scratch: bool,
) -> DefaultChoice {
    let p = &k.params[pi];
    if p.array.is_some() {
        return DefaultChoice::Aggregate;
    }
    if exclude_triton_scratch && m.llvm && is_triton_scratch(k, pi) {
        return DefaultChoice::TritonScratch;
    }
    match p.ptr {
        Some(space) if !space.is_global() => DefaultChoice::NotGlobal,
        // A `.ptr` of another width cannot hold a 64-bit address: left alone.
        Some(_) if !p.ty.is_int64() => DefaultChoice::Scalar,
        Some(_) => match loads(m, k, p) {
            Ok(_) => DefaultChoice::DeclaredPointer,
            Err((line, reason)) => DefaultChoice::Refused { line, reason },
        },
        None if p.ty.is_int64() => match loads(m, k, p) {
            Err((line, _)) => DefaultChoice::NotOnlyAddress { line },
            Ok(l) => match address_only(&m.src, k, &l) {
                Ok(()) => DefaultChoice::UsedAsAddress,
                Err(Some(line)) => DefaultChoice::NotOnlyAddress { line },
                Err(None) => DefaultChoice::NoAddressUse,
            },
        },
        None => DefaultChoice::Scalar,
    }
}

/// Whether parameter `pi` is one of the two trailing `.u64 .ptr .global` parameters.
fn is_triton_scratch(k: &Kernel, pi: usize) -> bool {
    let n = k.params.len();
    let scratch = |p: &crate::module::Param| {
        p.ptr == Some(StateSpace::Global) && p.ty == crate::types::ScalarType::U64
    };
    n >= 2 && pi >= n - 2 && k.params[n - 2..].iter().all(scratch)
}

/// A parameter the pass rewrites.
pub(crate) struct Choice {
    pub param: usize,
    pub slot: SlotKind,
    pub loads: Vec<Load>,
}

/// The rewrite to do: per kernel (module order), its chosen parameters in parameter order.
pub(crate) struct Plan {
    pub kernels: Vec<Vec<Choice>>,
    pub notes: Vec<String>,
}

/// Resolves `o` against `m`.
pub(crate) fn plan(m: &Module<'_>, o: &Options) -> Result<Plan, PtxError> {
    let mut chosen = vec![o.kernels.is_none(); m.kernels.len()];
    for name in o.kernels.iter().flatten() {
        let ki = m
            .kernel(name)
            .ok_or_else(|| PtxError::UnknownKernel(name.clone()))?;
        chosen[ki] = true;
    }
    let mut picks: Vec<Vec<Option<SlotKind>>> = m
        .kernels
        .iter()
        .map(|k| vec![None; k.params.len()])
        .collect();
    let mut notes = Vec::new();
    if o.params.is_empty() {
        for (ki, k) in m.kernels.iter().enumerate().filter(|(ki, _)| chosen[*ki]) {
            let mut scratch = Vec::new();
            for (pi, pick) in picks[ki].iter_mut().enumerate() {
                match default_choice(m, k, pi, o.exclude_triton_scratch) {
                    c if c.selected() => *pick = Some(SlotKind::Pointer),
                    DefaultChoice::TritonScratch => scratch.push(k.params[pi].name.as_str()),
                    _ => {}
                }
            }
            if !scratch.is_empty() {
                notes.push(format!(
                    "kernel `{}`: left Triton's scratch parameters {} as they are",
                    k.name,
                    scratch.join(", ")
                ));
            }
        }
    }
    // Named parameters: pointers first, then scalars (a scalar named after being selected as a
    // pointer is an error).
    let named = (o.params.iter().map(|r| (r, true))).chain(o.scalars.iter().map(|r| (r, false)));
    for (r, pointer) in named {
        for (ki, pi) in resolve(m, &chosen, r)? {
            let (k, p) = (&m.kernels[ki], &m.kernels[ki].params[pi]);
            let bad = |reason: String| PtxError::BadSelection {
                kernel: k.name.clone(),
                param: p.name.clone(),
                reason,
            };
            if p.array.is_some() {
                return Err(aggregate(k, pi));
            }
            picks[ki][pi] = Some(if pointer {
                if p.ptr.is_some_and(|s| !s.is_global()) {
                    return Err(bad(
                        "it points to .shared, .const or .local memory, not to a slot".into(),
                    ));
                }
                if !p.ty.is_int64() {
                    return Err(bad(format!(
                        "a {} cannot hold an address; name it in Options::scalars",
                        p.ty
                    )));
                }
                SlotKind::Pointer
            } else {
                if p.ptr.is_some() {
                    return Err(bad("it is declared .ptr; name it in Options::params".into()));
                }
                if picks[ki][pi] == Some(SlotKind::Pointer) {
                    return Err(bad(
                        "it is selected as a pointer and named as a scalar".into()
                    ));
                }
                SlotKind::Scalar(p.ty)
            });
        }
    }
    let mut kernels = Vec::with_capacity(m.kernels.len());
    for (ki, k) in m.kernels.iter().enumerate() {
        let mut choices = Vec::new();
        for (pi, pick) in picks[ki].iter().enumerate() {
            let Some(slot) = *pick else { continue };
            let p = &k.params[pi];
            if p.array.is_some() {
                return Err(aggregate(k, pi));
            }
            let loads = loads(m, k, p).map_err(|(line, reason)| PtxError::Refused {
                kernel: k.name.clone(),
                param: p.name.clone(),
                line,
                reason,
            })?;
            choices.push(Choice {
                param: pi,
                slot,
                loads,
            });
        }
        if let Some(c) = choices.first() {
            address_not_taken(m, k, &k.params[c.param].name)?;
        }
        kernels.push(choices);
    }
    if kernels.iter().all(Vec::is_empty) {
        return Err(PtxError::NothingToRewrite);
    }
    Ok(Plan { kernels, notes })
}

/// Refuses a kernel whose name appears in the module outside its own header: its address is
/// taken (a device-side launch, a function pointer), and whoever launches it that way would
/// pass raw values where the rewritten kernel expects slot addresses.
fn address_not_taken(m: &Module<'_>, k: &Kernel, param: &str) -> Result<(), PtxError> {
    let src = &m.src;
    let header = k.first..k.open;
    let elsewhere = (0..src.tokens.len())
        .find(|&i| !header.contains(&i) && src.is_word(i) && src.text_of(i) == k.name);
    match elsewhere {
        None => Ok(()),
        Some(i) => Err(PtxError::Refused {
            kernel: k.name.clone(),
            param: param.to_string(),
            line: src.line_of(i),
            reason: "the kernel's name appears elsewhere in the module (its address is taken: a \
                     device-side launch would pass raw values, not slot addresses)"
                .into(),
        }),
    }
}

/// The refusal of a by-value aggregate parameter.
fn aggregate(k: &Kernel, pi: usize) -> PtxError {
    let p = &k.params[pi];
    PtxError::Refused {
        kernel: k.name.clone(),
        param: p.name.clone(),
        line: p.line,
        reason: format!(
            "a by-value aggregate (`{} {}[{}]`) cannot be read through a slot",
            p.ty,
            p.name,
            p.array.unwrap_or(0)
        ),
    }
}

/// The (kernel, parameter) pairs `r` names among the chosen kernels.
fn resolve(m: &Module<'_>, chosen: &[bool], r: &ParamRef) -> Result<Vec<(usize, usize)>, PtxError> {
    match r {
        ParamRef::Name(name) => {
            let hits: Vec<(usize, usize)> = m
                .kernels
                .iter()
                .enumerate()
                .filter(|(ki, _)| chosen[*ki])
                .flat_map(|(ki, k)| {
                    k.params
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| &p.name == name)
                        .map(move |(pi, _)| (ki, pi))
                })
                .collect();
            if hits.is_empty() {
                return Err(PtxError::UnknownParam(name.clone()));
            }
            Ok(hits)
        }
        ParamRef::Index { kernel, index } => {
            let ki = m
                .kernel(kernel)
                .ok_or_else(|| PtxError::UnknownKernel(kernel.clone()))?;
            if !chosen[ki] {
                return Err(PtxError::BadSelection {
                    kernel: kernel.clone(),
                    param: format!("#{index}"),
                    reason: "the kernel is not among Options::kernels".into(),
                });
            }
            if *index >= m.kernels[ki].params.len() {
                return Err(PtxError::UnknownParam(r.to_string()));
            }
            Ok(vec![(ki, *index)])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::parse;
    use crate::testutil::kernel;

    fn defaults(params: &[&str], body: &[&str]) -> Vec<DefaultChoice> {
        let text = kernel(params, body);
        let m = parse(&text).unwrap();
        let k = &m.kernels[0];
        (0..k.params.len())
            .map(|i| default_choice(&m, k, i, true))
            .collect()
    }

    #[test]
    fn default_choices_and_why() {
        use DefaultChoice::*;
        assert_eq!(
            defaults(
                &[
                    ".u64 .ptr .global .align 4 k_param_0",
                    ".u64 .ptr .align 4 k_param_1",
                    ".u64 .ptr .shared .align 4 k_param_2",
                    ".u64 k_param_3",
                    ".u64 k_param_4",
                    ".s64 k_param_5",
                    ".f64 k_param_6",
                    ".align 8 .b8 k_param_7[16]",
                    ".u64 .ptr .global .align 1 k_param_8",
                ],
                &[
                    "ld.param.u64 %rd1, [k_param_3];",
                    "cvta.to.global.u64 %rd2, %rd1;",
                    "ld.param.u64 %rd3, [k_param_4];",
                    "ld.param.u64 %rd4, [k_param_5];",
                    "add.s64 %rd5, %rd4, 1;",
                    "mov.b64 %rd6, k_param_8;",
                ]
            ),
            [
                DeclaredPointer,
                DeclaredPointer,
                NotGlobal,
                UsedAsAddress,
                NoAddressUse,
                NotOnlyAddress { line: 27 },
                Scalar,
                Aggregate,
                Refused {
                    line: 28,
                    reason: "its address is taken (`mov.b64`)".into()
                },
            ]
        );
    }

    #[test]
    fn triton_scratch_is_the_last_two_global_pointers_of_llvm_modules() {
        let params = [
            ".u64 .ptr .global .align 1 k_param_0",
            ".u64 .ptr .global .align 1 k_param_1",
            ".u64 .ptr .global .align 1 k_param_2",
        ];
        let llvm = format!(
            "// Generated by LLVM NVPTX Back-End\n{}",
            kernel(&params, &[])
        );
        let m = parse(&llvm).unwrap();
        let k = &m.kernels[0];
        let choices: Vec<DefaultChoice> = (0..3).map(|i| default_choice(&m, k, i, true)).collect();
        use DefaultChoice::*;
        assert_eq!(choices, [DeclaredPointer, TritonScratch, TritonScratch]);
        assert_eq!(default_choice(&m, k, 2, false), DeclaredPointer);
        // Not LLVM's: no scratch.
        assert_eq!(defaults(&params, &[])[2], DeclaredPointer);
        // The last two must both be global pointers.
        let mixed = format!(
            "// Generated by LLVM NVPTX Back-End\n{}",
            kernel(&[params[0], ".u32 k_param_1", params[2]], &[])
        );
        let m = parse(&mixed).unwrap();
        assert_eq!(default_choice(&m, &m.kernels[0], 2, true), DeclaredPointer);
    }

    #[test]
    fn names_match_in_every_chosen_kernel() {
        let text = format!(
            "{}\n.visible .entry k2(.param .u64 p)\n{{\n\tret;\n}}\n.visible .entry k3(.param .u64 p)\n{{\n\tret;\n}}\n",
            kernel(&[".u64 p"], &[])
        );
        let m = parse(&text).unwrap();
        let o = Options {
            kernels: Some(vec!["k".into(), "k3".into()]),
            params: vec![ParamRef::Name("p".into())],
            ..Options::default()
        };
        let plan = plan(&m, &o).unwrap();
        let counts: Vec<usize> = plan.kernels.iter().map(Vec::len).collect();
        assert_eq!(counts, [1, 0, 1]);
    }

    #[test]
    fn a_param_is_a_pointer_or_a_scalar_not_both() {
        let text = kernel(&[".u64 k_param_0"], &[]);
        let m = parse(&text).unwrap();
        let o = Options {
            params: vec!["k:0".parse().unwrap()],
            scalars: vec!["k_param_0".parse().unwrap()],
            ..Options::default()
        };
        assert!(matches!(plan(&m, &o), Err(PtxError::BadSelection { .. })));
    }

    #[test]
    fn param_refs_parse_and_print() {
        for s in ["k:0", "_Z3fooPfi:12", "k_param_3", "%p"] {
            assert_eq!(s.parse::<ParamRef>().unwrap().to_string(), s);
        }
        for s in ["", "k:", ":0", "k:x", "k:-1", "3x", "a b", "k:0:1x"] {
            assert_eq!(
                s.parse::<ParamRef>(),
                Err(PtxError::BadParamRef(s.into())),
                "{s}"
            );
        }
    }
}
