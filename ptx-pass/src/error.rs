//! The one error type of the crate.

/// Why [`inspect`](crate::inspect) or [`indirect`](crate::indirect) gave no result.
///
/// Line numbers are 1-based lines of the input PTX.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PtxError {
    /// The input is not UTF-8 (PTX is ASCII text).
    #[error("the PTX is not UTF-8: invalid byte at offset {offset} (line {line})")]
    NotUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
        /// Line of that byte.
        line: usize,
    },
    /// The input is not PTX this pass can read (truncated, garbage, or an unsupported construct).
    #[error("line {line}: cannot parse the PTX: {message}")]
    Parse {
        /// Where the parser stopped.
        line: usize,
        /// What it expected or found.
        message: String,
    },
    /// A chosen parameter is used in a way the pass does not understand, so rewriting it could
    /// change what the kernel does. Leave the parameter out of the selection.
    #[error("kernel `{kernel}`, parameter `{param}`, line {line}: refused: {reason}")]
    Refused {
        /// The kernel.
        kernel: String,
        /// The parameter.
        param: String,
        /// The line of the use (or declaration) the pass does not understand.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// [`Options::kernels`](crate::Options::kernels) or a [`ParamRef::Index`](crate::ParamRef)
    /// names a kernel the module does not define.
    #[error("the PTX defines no kernel (`.entry`) named `{0}`")]
    UnknownKernel(String),
    /// A [`ParamRef`](crate::ParamRef) matches no parameter of the chosen kernels.
    #[error("no chosen kernel has a parameter `{0}`")]
    UnknownParam(String),
    /// A parameter was named in a way that cannot be honoured (a float named as a pointer, a
    /// parameter named both as pointer and scalar, ...).
    #[error("kernel `{kernel}`, parameter `{param}`: {reason}")]
    BadSelection {
        /// The kernel.
        kernel: String,
        /// The parameter.
        param: String,
        /// What is wrong and what to do instead.
        reason: String,
    },
    /// A string given to [`ParamRef::from_str`](crate::ParamRef) is neither `kernel:index` nor
    /// a parameter name.
    #[error(
        "`{0}` is not a parameter reference: write `kernel:index` (0-based) or a parameter name"
    )]
    BadParamRef(String),
    /// [`Options::pdl`](crate::Options::pdl) needs `.target sm_90` or newer and `.version 7.8` or
    /// newer, and the module's `.version`/`.target` lines could not be raised.
    #[error("line {line}: cannot enable PDL: {reason}")]
    Pdl {
        /// The `.version` or `.target` line (1 when the module has none).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The options select no parameter at all, so the pass would change nothing.
    #[error(
        "nothing to rewrite: no parameter of the chosen kernels is selected \
         (name parameters in Options::params or Options::scalars)"
    )]
    NothingToRewrite,
}

impl PtxError {
    pub(crate) fn parse(line: usize, message: impl Into<String>) -> Self {
        PtxError::Parse {
            line,
            message: message.into(),
        }
    }
}
