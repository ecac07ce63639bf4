//! Table-form kernels with their table signature: a launch is checked against which parameters
//! take slot addresses, of what kind, before anything is launched.

use graph_rt_ptx::{KernelSignature, SlotKind};

use crate::driver::{Context, Function, Module, Stream};
use crate::error::{Error, Misuse, Result};
use crate::graph::{CaptureScope, CapturedNode};
use crate::launch::{ArgSlot, KernelArgs, LaunchConfig, ScalarKind};

/// What one parameter of a table-form kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableParam {
    /// A plain value of `size` bytes, passed as the plain form takes it.
    Value {
        /// Size in bytes.
        size: usize,
    },
    /// The address of a pointer slot whose bindings the kernel assumes aligned to `align` bytes.
    Pointer {
        /// The alignment the kernel was compiled for (`.align` of the original parameter, 16
        /// when it declared none).
        align: usize,
    },
    /// The address of a scalar slot holding a value of `size` bytes.
    Scalar {
        /// Size in bytes.
        size: usize,
        /// Integer or float, as the kernel declares the parameter; `None` for untyped bits
        /// (`.b32`), which take either.
        kind: Option<ScalarKind>,
    },
}

/// A kernel in table form and its signature: where the plain form takes buffers and values, it
/// takes [`PtrSlot`](crate::table::PtrSlot)s and [`ScalarSlot`](crate::table::ScalarSlot)s. Every launch
/// through it checks, before launching, that the arguments match the signature: a slot where the
/// kernel reads a slot (of the right kind: pointer or scalar of the right size, a pointer slot
/// whose declared alignment is at least the kernel's), a value of the right size elsewhere, and
/// every slot of one table.
#[derive(Debug, Clone)]
pub struct TableKernel {
    function: Function,
    params: Vec<TableParam>,
}

impl TableKernel {
    /// `function` with the signature `params`, checked against its parameter layout
    /// (`cuFuncGetParamInfo`): as many parameters, slots 8 bytes, values of their size.
    pub fn new(function: Function, params: Vec<TableParam>) -> Result<Self> {
        const CALL: &str = "TableKernel::new";
        let layout = function.param_layout()?;
        if layout.len() != params.len() {
            return Err(Error::misuse(
                CALL,
                Misuse::SignatureMismatch,
                format!(
                    "`{}` has {} parameters; the signature gives {}",
                    function.name(),
                    layout.len(),
                    params.len()
                ),
            ));
        }
        for (i, (info, p)) in layout.iter().zip(&params).enumerate() {
            let want = match *p {
                TableParam::Value { size } => size,
                TableParam::Pointer { .. } | TableParam::Scalar { .. } => 8,
            };
            if info.size != want {
                return Err(Error::misuse(
                    CALL,
                    Misuse::SignatureMismatch,
                    format!(
                        "parameter {i} of `{}` has {} bytes; the signature says {want}",
                        function.name(),
                        info.size
                    ),
                ));
            }
        }
        Ok(Self { function, params })
    }

    /// `function` with the signature the PTX pass reported for it
    /// ([`graph_rt_ptx::Rewritten::kernels`]).
    pub fn from_signature(function: Function, signature: &KernelSignature) -> Result<Self> {
        if signature.name != function.name() {
            return Err(Error::misuse(
                "TableKernel::from_signature",
                Misuse::SignatureMismatch,
                format!(
                    "the signature is `{}`'s, the function `{}`",
                    signature.name,
                    function.name()
                ),
            ));
        }
        let params = signature
            .params
            .iter()
            .map(|p| match p.slot {
                None => TableParam::Value { size: p.size },
                Some(s) => match s.kind {
                    SlotKind::Pointer => TableParam::Pointer { align: s.align },
                    SlotKind::Scalar(t) => TableParam::Scalar {
                        size: t.size(),
                        kind: scalar_kind(t),
                    },
                },
            })
            .collect();
        Self::new(function, params)
    }

    /// Rewrites kernel `name` of `ptx` with the PTX pass (`options`), loads the result in `ctx`
    /// and returns the kernel with the signature the pass reported.
    pub fn load(
        ctx: &Context,
        ptx: &str,
        name: &str,
        options: &graph_rt_ptx::Options,
    ) -> Result<Self> {
        let rewritten = graph_rt_ptx::indirect(ptx.as_bytes(), options)
            .map_err(|e| Error::ptx("TableKernel::load", "the PTX pass refused", e))?;
        let signature = rewritten
            .kernels
            .iter()
            .find(|k| k.name == name)
            .ok_or_else(|| {
                Error::misuse(
                    "TableKernel::load",
                    Misuse::NoSuchKernel,
                    format!("no kernel `{name}` in the PTX"),
                )
            })?;
        let function = Module::from_ptx(ctx, &rewritten.ptx)?.function(name)?;
        Self::from_signature(function, signature)
    }

    /// The kernel.
    pub fn function(&self) -> &Function {
        &self.function
    }

    /// The signature.
    pub fn params(&self) -> &[TableParam] {
        &self.params
    }

    /// Checks `args` against the signature (see the type's docs).
    pub fn check(&self, args: &impl KernelArgs) -> Result<()> {
        const CALL: &str = "TableKernel::launch";
        // The first mismatch (argument index, size, slot), the count, and the table seen: no
        // allocation on the launch path.
        let mut count = 0usize;
        let mut bad = None;
        let mut table = None;
        let mut other_table = None;
        let described = args.describe(&mut |size, arg| {
            let i = count;
            count += 1;
            let Some(&param) = self.params.get(i) else {
                return;
            };
            if bad.is_none() && !fits(param, size, arg) {
                bad = Some((i, param, size, arg));
            }
            if let ArgSlot::Pointer { table: t, .. } | ArgSlot::Scalar { table: t, .. } = arg {
                if *table.get_or_insert(t) != t && other_table.is_none() {
                    other_table = Some(i);
                }
            }
        });
        let name = self.function.name();
        if !described {
            return Err(Error::misuse(
                CALL,
                Misuse::UndescribedArguments,
                "pass a tuple of arguments: this argument list cannot say which are slots",
            ));
        }
        if count != self.params.len() {
            return Err(Error::misuse(
                CALL,
                Misuse::CountMismatch {
                    expected: self.params.len(),
                    got: count,
                },
                format!(
                    "`{name}` takes {} arguments; {count} given",
                    self.params.len(),
                ),
            ));
        }
        if let Some((i, param, size, arg)) = bad {
            return Err(Error::misuse(
                CALL,
                Misuse::WrongArgument { index: i },
                format!("argument {i} of `{name}`: the kernel takes {param:?}, given {arg:?} ({size} bytes)"),
            ));
        }
        if let Some(i) = other_table {
            return Err(Error::misuse(
                CALL,
                Misuse::OtherTable,
                format!("argument {i} of `{name}` is a slot of another table than the arguments before it"),
            ));
        }
        Ok(())
    }

    /// Launches the kernel on `stream` after [`TableKernel::check`].
    ///
    /// # Safety
    /// As [`Stream::launch`]: the launch configuration and what the slots are bound to when the
    /// table is refreshed must be what the kernel expects (lengths, aliasing). An eager launch
    /// reads the table as the last [`ArgTable::refresh`](crate::ArgTable::refresh) left it: launch
    /// on the table's stream, after that refresh (the first kernel after it not programmatic);
    /// the buffers bound then are kept alive only for launches the table's stream orders.
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        config: &LaunchConfig,
        args: impl KernelArgs,
    ) -> Result<()> {
        self.check(&args)?;
        // SAFETY: forwarded to the caller.
        unsafe { stream.launch(&self.function, config, args) }
    }

    /// Records the kernel as the next node of a capture after [`TableKernel::check`].
    ///
    /// # Safety
    /// As [`TableKernel::launch`], for every replay.
    pub unsafe fn record(
        &self,
        scope: &CaptureScope<'_>,
        config: &LaunchConfig,
        args: impl KernelArgs,
    ) -> Result<CapturedNode> {
        self.check(&args)?;
        // SAFETY: forwarded to the caller.
        unsafe { scope.launch(&self.function, config, args) }
    }
}

/// Whether an argument of `size` bytes passing `arg` fits parameter `param`.
fn fits(param: TableParam, size: usize, arg: ArgSlot) -> bool {
    match (param, arg) {
        (TableParam::Value { size: want }, ArgSlot::Value) => size == want,
        (TableParam::Pointer { align }, ArgSlot::Pointer { align: has, .. }) => has >= align,
        (
            TableParam::Scalar { size: want, kind },
            ArgSlot::Scalar {
                size: has, kind: k, ..
            },
        ) => has == want && kind.is_none_or(|want| want == k),
        _ => false,
    }
}

/// The kind of a PTX parameter type: untyped bits (`.bN`) take either.
fn scalar_kind(t: graph_rt_ptx::ScalarType) -> Option<ScalarKind> {
    use graph_rt_ptx::ScalarType::*;
    match t {
        F32 | F64 => Some(ScalarKind::Float),
        B8 | B16 | B32 | B64 => None,
        _ => Some(ScalarKind::Integer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_match_by_size_and_kind_untyped_bits_take_either() {
        let slot = |size, kind| ArgSlot::Scalar {
            table: 1,
            size,
            multiple_of: 1,
            kind,
        };
        let (int, float) = (ScalarKind::Integer, ScalarKind::Float);
        let param = |kind| TableParam::Scalar { size: 4, kind };
        assert!(fits(param(Some(float)), 8, slot(4, float)));
        assert!(!fits(param(Some(float)), 8, slot(4, int)));
        assert!(!fits(param(Some(int)), 8, slot(4, float)));
        assert!(fits(param(None), 8, slot(4, float)) && fits(param(None), 8, slot(4, int)));
        assert!(!fits(param(Some(int)), 8, slot(8, int)));
        assert_eq!(scalar_kind(graph_rt_ptx::ScalarType::F32), Some(float));
        assert_eq!(scalar_kind(graph_rt_ptx::ScalarType::S32), Some(int));
        assert_eq!(scalar_kind(graph_rt_ptx::ScalarType::B32), None);
    }
}
