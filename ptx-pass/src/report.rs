//! What the pass reports: a module's kernels and parameters ([`ModuleInfo`]), and the
//! signatures of the kernels it rewrote ([`Rewritten`]).

use std::fmt;

use crate::module::Module;
use crate::select::{default_choice, DefaultChoice};
use crate::types::{ScalarType, StateSpace};

/// A module's kernels and parameters, and what the default pass would do with each parameter:
/// the result of [`inspect`](crate::inspect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// The `.version` operand (`8.4`).
    pub version: Option<String>,
    /// The `.target` operands (`sm_70`, `sm_90a, debug`).
    pub target: Option<String>,
    /// Whether LLVM's NVPTX back end generated the module (Triton's PTX), which is when
    /// [`Options::exclude_triton_scratch`](crate::Options::exclude_triton_scratch) applies.
    pub llvm: bool,
    /// Every kernel (`.entry` with a body), in module order.
    pub kernels: Vec<KernelInfo>,
}

/// One kernel of a [`ModuleInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The kernel's name.
    pub name: String,
    /// Line of its name.
    pub line: usize,
    /// Its parameters in order.
    pub params: Vec<ParamInfo>,
}

/// One parameter of a [`KernelInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// 0-based position.
    pub index: usize,
    /// The declared name.
    pub name: String,
    /// The declared type (the element type of an aggregate).
    pub ty: ScalarType,
    /// Size in bytes (of the whole aggregate for `name[N]`).
    pub size: usize,
    /// `Some` for a `.ptr` parameter, with the state space it points into.
    pub ptr: Option<StateSpace>,
    /// The declared `.align`.
    pub align: Option<usize>,
    /// `Some(N)` for a by-value aggregate `name[N]`.
    pub array: Option<usize>,
    /// What the default selection does with it.
    pub default: DefaultChoice,
}

impl ModuleInfo {
    pub(crate) fn new(m: &Module<'_>) -> Self {
        let kernels = m
            .kernels
            .iter()
            .map(|k| KernelInfo {
                name: k.name.clone(),
                line: k.line,
                params: k
                    .params
                    .iter()
                    .enumerate()
                    .map(|(index, p)| ParamInfo {
                        index,
                        name: p.name.clone(),
                        ty: p.ty,
                        size: p.size(),
                        ptr: p.ptr,
                        align: p.align.map(|(n, _)| n),
                        array: p.array,
                        default: default_choice(m, k, index, true),
                    })
                    .collect(),
            })
            .collect();
        ModuleInfo {
            version: m.version.map(|i| m.src.text_of(i).to_string()),
            target: m.target_text().map(str::to_string),
            llvm: m.llvm,
            kernels,
        }
    }
}

impl fmt::Display for ModuleInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or_none = |s: &Option<String>| s.clone().unwrap_or_else(|| "none".into());
        writeln!(
            f,
            ".version {}, .target {}{}",
            or_none(&self.version),
            or_none(&self.target),
            if self.llvm { " (LLVM NVPTX)" } else { "" }
        )?;
        for k in &self.kernels {
            writeln!(f, "kernel {} (line {})", k.name, k.line)?;
            for p in &k.params {
                let mut decl = String::new();
                if let Some(space) = p.ptr {
                    decl = format!(" {space}");
                }
                if let Some(a) = p.align {
                    decl.push_str(&format!(" .align {a}"));
                }
                let array = p.array.map(|n| format!("[{n}]")).unwrap_or_default();
                writeln!(
                    f,
                    "  {}: {}{decl} {}{array} ({} bytes): {}",
                    p.index, p.ty, p.name, p.size, p.default
                )?;
            }
        }
        Ok(())
    }
}

/// The output of [`indirect`](crate::indirect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewritten {
    /// The rewritten PTX.
    pub ptx: String,
    /// The signature of every kernel of the module, rewritten or not, in module order.
    pub kernels: Vec<KernelSignature>,
    /// What the pass did beyond the rewrite itself: raised `.version`/`.target`, excluded
    /// Triton scratch parameters, rewritten parameters per kernel.
    pub notes: Vec<String>,
}

/// A kernel's parameters as the rewritten PTX declares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    /// The kernel's name.
    pub name: String,
    /// Every parameter, in order.
    pub params: Vec<ParamSignature>,
}

/// One parameter of a [`KernelSignature`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSignature {
    /// 0-based position.
    pub index: usize,
    /// The declared name.
    pub name: String,
    /// Size in bytes as now declared (8 for a slot address).
    pub size: usize,
    /// `Some` when the parameter now takes the address of a table slot.
    pub slot: Option<Slot>,
}

/// What a rewritten parameter's slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// A pointer or a scalar.
    pub kind: SlotKind,
    /// For a pointer: the alignment the original parameter declared for its pointee (`.align`),
    /// 16 when it declared none. For a scalar: the scalar's size.
    pub align: usize,
}

/// The value a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// A device pointer (8 bytes).
    Pointer,
    /// A scalar of this type, in the slot's first bytes (little-endian).
    Scalar(ScalarType),
}

impl KernelSignature {
    /// Whether any parameter takes a slot address.
    pub fn is_rewritten(&self) -> bool {
        self.params.iter().any(|p| p.slot.is_some())
    }

    /// One line: `name(0: x -> slot(ptr, align 16), 1: n [4 bytes])`.
    pub fn describe(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for KernelSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.name)?;
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{p}")?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for ParamSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slot {
            Some(slot) => write!(f, "{}: {} -> {slot}", self.index, self.name),
            None => write!(f, "{}: {} [{} bytes]", self.index, self.name, self.size),
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            SlotKind::Pointer => write!(f, "slot(ptr, align {})", self.align),
            SlotKind::Scalar(t) => write!(f, "slot({t})"),
        }
    }
}
