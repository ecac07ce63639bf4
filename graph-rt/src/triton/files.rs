//! The files of one kernel in Triton's cache, read as Triton wrote them.

use std::path::Path;

use crate::error::{Error, Misuse, Result};

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
    /// Reads `<dir>/<kernel>.json` and whichever of `.ptx`, `.cubin`, `.ttir` exist.
    pub fn read(dir: &Path, kernel: &str) -> Result<Self> {
        const CALL: &str = "TritonFiles::read";
        let path = |ext: &str| dir.join(format!("{kernel}.{ext}"));
        // Not a misuse graph-rt names: the file system's failure, said as std::io says it.
        let io = |p: &Path, e: std::io::Error| {
            Error::invalid(CALL, format!("cannot read {}: {e}", p.display()))
        };
        let optional = |ext: &str| -> Result<Option<Vec<u8>>> {
            let p = path(ext);
            match std::fs::read(&p) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io(&p, e)),
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
        let json = path("json");
        Ok(Self {
            metadata: std::fs::read_to_string(&json).map_err(|e| io(&json, e))?,
            ptx: text(optional("ptx")?, "ptx")?,
            cubin: optional("cubin")?,
            ttir: text(optional("ttir")?, "ttir")?,
        })
    }
}
