//! The files of one kernel in Triton's cache, read as Triton wrote them.

use std::path::Path;

use crate::error::{Error, Misuse, Result};
use crate::files;

/// The files of one kernel in Triton's cache (`<cache>/<hash>/<kernel>.{json,ptx,cubin,ttir}`).
#[derive(Debug, Clone, Default)]
pub struct TritonFiles {
    /// The metadata JSON.
    pub metadata: String,
    /// The PTX (needed for table forms, and where no cubin loads).
    pub ptx: Option<String>,
    /// The cubin Triton built.
    pub cubin: Option<Vec<u8>>,
    /// The TTIR: argument names and the specialization Triton compiled for.
    pub ttir: Option<String>,
}

impl TritonFiles {
    /// Reads `<dir>/<kernel>.json` and whichever of `.ptx`, `.cubin`, `.ttir` exist. `kernel`
    /// must be a plain file name ([`Misuse::BadFileName`] for one that could reach outside
    /// `dir`); each file must be a regular file (a symbolic link is not followed, a FIFO not
    /// waited on: [`Misuse::UntrustedFile`]) of at most 16 MiB (the JSON) or 256 MiB (the
    /// others: [`Misuse::TooLarge`]).
    pub fn read(dir: &Path, kernel: &str) -> Result<Self> {
        const CALL: &str = "TritonFiles::read";
        check_name(CALL, kernel)?;
        let path = |ext: &str| dir.join(format!("{kernel}.{ext}"));
        let read = |ext: &str, cap: u64| -> Result<Option<Vec<u8>>> {
            let p = path(ext);
            match files::read(
                &p,
                files::Rules {
                    cap,
                    private: false,
                },
            ) {
                Ok(b) => Ok(Some(b)),
                Err(files::Refusal::Missing) => Ok(None),
                Err(refusal) => Err(refusal.into_error(CALL, &p)),
            }
        };
        let text = |b: Option<Vec<u8>>, ext: &str| -> Result<Option<String>> {
            b.map(|b| {
                String::from_utf8(b).map_err(|_| {
                    let reason = format!("{kernel}.{ext} is not UTF-8");
                    Error::misuse(CALL, Misuse::Malformed, reason)
                })
            })
            .transpose()
        };
        let json = read("json", files::cap::TRITON_METADATA)?.ok_or_else(|| {
            let reason = files::Refusal::Missing.describe(&path("json"));
            Error::invalid(CALL, reason)
        })?;
        Ok(Self {
            metadata: text(Some(json), "json")?.unwrap_or_default(),
            ptx: text(read("ptx", files::cap::TRITON_CODE)?, "ptx")?,
            cubin: read("cubin", files::cap::TRITON_CODE)?,
            ttir: text(read("ttir", files::cap::TRITON_CODE)?, "ttir")?,
        })
    }
}

/// Refuses a kernel name that, joined to the cache folder, could name a file outside it: empty,
/// `.` or `..`, or holding a path separator or `..` ([`Misuse::BadFileName`]), or a NUL byte
/// ([`Misuse::NulByte`]).
pub(crate) fn check_name(call: &'static str, kernel: &str) -> Result<()> {
    if kernel.contains('\0') {
        let reason = format!("the kernel name {kernel:?} holds a NUL byte");
        return Err(Error::misuse(call, Misuse::NulByte, reason));
    }
    if kernel.is_empty() || kernel == "." || kernel.contains(['/', '\\']) || kernel.contains("..") {
        let reason = format!(
            "the kernel name {kernel:?} is not a plain file name: it could name a file outside \
             the cache folder; give the name Triton's metadata has"
        );
        return Err(Error::misuse(call, Misuse::BadFileName, reason));
    }
    Ok(())
}
