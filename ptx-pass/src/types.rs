//! PTX scalar types and pointer state spaces, as parameters and loads declare them.

use std::fmt;

/// A PTX scalar type a kernel parameter or `ld.param` can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `.u8`
    U8,
    /// `.s8`
    S8,
    /// `.b8`
    B8,
    /// `.u16`
    U16,
    /// `.s16`
    S16,
    /// `.b16`
    B16,
    /// `.u32`
    U32,
    /// `.s32`
    S32,
    /// `.b32`
    B32,
    /// `.f32`
    F32,
    /// `.u64`
    U64,
    /// `.s64`
    S64,
    /// `.b64`
    B64,
    /// `.f64`
    F64,
}

impl ScalarType {
    /// Parses a type without its dot: `u32`, `f64`, ...
    pub fn from_name(name: &str) -> Option<Self> {
        use ScalarType::*;
        Some(match name {
            "u8" => U8,
            "s8" => S8,
            "b8" => B8,
            "u16" => U16,
            "s16" => S16,
            "b16" => B16,
            "u32" => U32,
            "s32" => S32,
            "b32" => B32,
            "f32" => F32,
            "u64" => U64,
            "s64" => S64,
            "b64" => B64,
            "f64" => F64,
            _ => return None,
        })
    }

    /// The type's name without its dot: `u32`.
    pub fn name(self) -> &'static str {
        use ScalarType::*;
        match self {
            U8 => "u8",
            S8 => "s8",
            B8 => "b8",
            U16 => "u16",
            S16 => "s16",
            B16 => "b16",
            U32 => "u32",
            S32 => "s32",
            B32 => "b32",
            F32 => "f32",
            U64 => "u64",
            S64 => "s64",
            B64 => "b64",
            F64 => "f64",
        }
    }

    /// Size in bytes.
    pub fn size(self) -> usize {
        use ScalarType::*;
        match self {
            U8 | S8 | B8 => 1,
            U16 | S16 | B16 => 2,
            U32 | S32 | B32 | F32 => 4,
            U64 | S64 | B64 | F64 => 8,
        }
    }

    /// Whether the type is signed integer (`.s8` ... `.s64`).
    pub fn is_signed(self) -> bool {
        use ScalarType::*;
        matches!(self, S8 | S16 | S32 | S64)
    }

    /// Whether the type is a float (`.f32`, `.f64`).
    pub fn is_float(self) -> bool {
        matches!(self, ScalarType::F32 | ScalarType::F64)
    }

    /// Whether a value of this type can hold a 64-bit address (`.u64`, `.s64`, `.b64`).
    pub(crate) fn is_int64(self) -> bool {
        use ScalarType::*;
        matches!(self, U64 | S64 | B64)
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ".{}", self.name())
    }
}

/// The state space a `.ptr` parameter declares it points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateSpace {
    /// `.ptr` with no state space: a generic address.
    Generic,
    /// `.ptr .global` (what Triton declares).
    Global,
    /// `.ptr .const`
    Const,
    /// `.ptr .shared`
    Shared,
    /// `.ptr .local`
    Local,
}

impl StateSpace {
    pub(crate) fn from_directive(d: &str) -> Option<Self> {
        Some(match d {
            ".global" => StateSpace::Global,
            ".const" => StateSpace::Const,
            ".shared" => StateSpace::Shared,
            ".local" => StateSpace::Local,
            _ => return None,
        })
    }

    /// Whether a table slot can stand for such a pointer: slots live in global memory, which a
    /// generic or `.global` pointer may address.
    pub(crate) fn is_global(self) -> bool {
        matches!(self, StateSpace::Generic | StateSpace::Global)
    }
}

impl fmt::Display for StateSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StateSpace::Generic => ".ptr",
            StateSpace::Global => ".ptr .global",
            StateSpace::Const => ".ptr .const",
            StateSpace::Shared => ".ptr .shared",
            StateSpace::Local => ".ptr .local",
        })
    }
}

/// Width in bits of a register declared with `.reg .<ty>`, for the types that matter here.
pub(crate) fn reg_bits(ty: &str) -> Option<u32> {
    Some(match ty {
        ".pred" => 1,
        ".b8" | ".u8" | ".s8" => 8,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 16,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" => 32,
        ".b64" | ".u64" | ".s64" | ".f64" => 64,
        ".b128" => 128,
        _ => return None,
    })
}
