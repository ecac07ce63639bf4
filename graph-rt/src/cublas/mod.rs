//! A small safe cuBLAS: a handle bound to one stream ([`Cublas`]) and its GEMMs (f32, strided
//! batched f32, bf16 and f16 with f32 accumulation), column-major as in cuBLAS, each checked
//! against its buffers' lengths before it is queued.
//!
//! cuBLAS is loaded at run time (`dlopen`), once per process, on the first [`Cublas::new`]:
//! nothing of cuBLAS or of the CUDA toolkit is needed to build. The candidates, in order: the
//! file named by the environment variable `GRAPH_RT_CUBLAS` (an absolute path to a regular file,
//! e.g. PyTorch's `site-packages/nvidia/cu13/lib/libcublas.so.13`; a relative one is refused
//! before it is opened), then `libcublas.so.13` and `libcublas.so.12` from the dynamic loader's
//! path. The library loaded is logged (`tracing`, info). When none loads, the error lists what
//! was tried and why each failed.
//!
//! Each handle owns a device workspace (32 MiB by default) set with `cublasSetWorkspace_v2`, so
//! cuBLAS uses it instead of allocating: GEMMs queued while the stream captures are recorded into
//! the graph, and the capture never allocates. A graph keeps nothing of them alive by itself (see
//! [`Cublas`]).
//!
//! Buffers allocated in stream order on another stream than the handle's are ordered for the
//! GEMMs by graph-rt (`order`). Dropping a handle never waits and is allowed inside a capture:
//! it is destroyed later, on the context's release thread.
//!
//! A handle a framework owns is lent with [`Cublas::borrow_raw`]: graph-rt's stream and workspace
//! for the while, the framework's stream (and the workspace it names) given back on drop.
//!
//! `sys` holds the hand-written bindings and the loader, `handle` the safe type, `borrow` a
//! lent handle's give-back, `destroy` what its drop parks, `order` the ordering against other streams; the pure size checks are here,
//! with their tests. Depends on
//! `driver`, `graph` (a capture's event-wait node for buffers of another stream), `error` and
//! `resource` only.

mod borrow;
mod destroy;
mod gemm_ex;
mod handle;
mod order;
mod sys;

#[cfg(test)]
pub(crate) use borrow::raw as raw_handle;
#[cfg(test)]
pub(crate) use destroy::DESTROYED;
pub use handle::{Cublas, Op};

use std::ffi::c_int;

use crate::error::{Error, Misuse, Result};

/// A GEMM's shape as cuBLAS takes it: `C (m×n) = op(A) (m×k) · op(B) (k×n)`, column-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmShape {
    pub(crate) transa: Op,
    pub(crate) transb: Op,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) lda: usize,
    pub(crate) ldb: usize,
    pub(crate) ldc: usize,
}

impl GemmShape {
    pub(crate) fn new(
        (transa, transb): (Op, Op),
        (m, n, k): (usize, usize, usize),
        (lda, ldb, ldc): (usize, usize, usize),
    ) -> Self {
        Self {
            transa,
            transb,
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
        }
    }
}

/// The batch of a strided batched GEMM: matrix `i` of each operand starts `i × stride` elements
/// after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) stride_a: i64,
    pub(crate) stride_b: i64,
    pub(crate) stride_c: i64,
    pub(crate) count: i32,
}

/// A checked shape in cuBLAS's ints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dims {
    pub(crate) m: c_int,
    pub(crate) n: c_int,
    pub(crate) k: c_int,
    pub(crate) lda: c_int,
    pub(crate) ldb: c_int,
    pub(crate) ldc: c_int,
}

/// The number of elements a column-major operand reads or writes when `op` of it is
/// `rows × cols` with leading dimension `ld`: the stored matrix is `rows × cols` (N) or
/// `cols × rows` (T), so it spans `ld × (stored cols − 1) + stored rows` elements. `None` when
/// `rows` or `cols` is 0, or on overflow.
pub(crate) fn required_len(op: Op, rows: usize, cols: usize, ld: usize) -> Option<usize> {
    let (stored_rows, stored_cols) = match op {
        Op::N => (rows, cols),
        Op::T => (cols, rows),
    };
    if stored_rows == 0 {
        return None;
    }
    ld.checked_mul(stored_cols.checked_sub(1)?)?
        .checked_add(stored_rows)
}

/// Checks a GEMM before it reaches cuBLAS: every dimension and leading dimension is > 0 and fits
/// an `int`, each leading dimension covers its operand's stored rows, and each buffer (lengths
/// `lens` of A, B, C, in elements) holds what the GEMM touches, up to the last matrix of `batch`.
pub(crate) fn check_gemm_dims(
    call: &'static str,
    shape: &GemmShape,
    lens: [usize; 3],
    batch: Option<&Batch>,
) -> Result<Dims> {
    let int = |name: &'static str, v: usize| -> Result<c_int> {
        if v == 0 {
            return Err(Error::misuse(
                call,
                Misuse::Zero { what: name },
                format!("{name} is 0: every dimension and leading dimension must be at least 1"),
            ));
        }
        c_int::try_from(v).map_err(|_| {
            Error::misuse(
                call,
                Misuse::TooLarge { what: name },
                format!(
                    "{name} = {v} does not fit cuBLAS's 32-bit int (at most {})",
                    c_int::MAX
                ),
            )
        })
    };
    let dims = Dims {
        m: int("m", shape.m)?,
        n: int("n", shape.n)?,
        k: int("k", shape.k)?,
        lda: int("lda", shape.lda)?,
        ldb: int("ldb", shape.ldb)?,
        ldc: int("ldc", shape.ldc)?,
    };
    // Matrices before the last one of the batch: their count, and each operand's stride.
    let (before_last, strides) = match batch {
        None => (0, [0; 3]),
        Some(b) => {
            if b.count < 1 {
                return Err(Error::misuse(
                    call,
                    Misuse::Zero { what: "batch" },
                    format!("batch is {}: it must be at least 1", b.count),
                ));
            }
            if b.stride_c == 0 && b.count > 1 {
                return Err(Error::misuse(
                    call,
                    Misuse::BadStride { name: "stride_c" },
                    "stride_c is 0 with a batch above 1: every matrix of the batch would write the same C",
                ));
            }
            let mut strides = [0usize; 3];
            for (s, (name, v)) in strides.iter_mut().zip([
                ("stride_a", b.stride_a),
                ("stride_b", b.stride_b),
                ("stride_c", b.stride_c),
            ]) {
                *s = usize::try_from(v).map_err(|_| {
                    let reason = format!("{name} = {v} is negative");
                    Error::misuse(call, Misuse::BadStride { name }, reason)
                })?;
            }
            // `count` ≥ 1 here, so this never fails.
            (usize::try_from(b.count - 1).unwrap_or(0), strides)
        }
    };
    let operands = [
        ("A", "lda", shape.transa, shape.m, shape.k, shape.lda),
        ("B", "ldb", shape.transb, shape.k, shape.n, shape.ldb),
        ("C", "ldc", Op::N, shape.m, shape.n, shape.ldc),
    ];
    for (((name, ld_name, op, rows, cols, ld), len), stride) in
        operands.into_iter().zip(lens).zip(strides)
    {
        let (stored_rows, stored_cols) = match op {
            Op::N => (rows, cols),
            Op::T => (cols, rows),
        };
        if ld < stored_rows {
            return Err(Error::misuse(
                call,
                Misuse::LeadingDimension {
                    name: ld_name,
                    ld,
                    rows: stored_rows,
                },
                format!(
                    "{ld_name} = {ld} is less than the {stored_rows} rows of {name} as stored \
                     ({stored_rows}×{stored_cols}, op {op:?})"
                ),
            ));
        }
        let overflow = || {
            let reason = format!("the extent of {name} overflows usize");
            Error::misuse(call, Misuse::TooLarge { what: name }, reason)
        };
        let one = required_len(op, rows, cols, ld).ok_or_else(overflow)?;
        let needed = stride
            .checked_mul(before_last)
            .and_then(|offset| offset.checked_add(one))
            .ok_or_else(overflow)?;
        if len < needed {
            let of_batch = if before_last > 0 {
                format!(" up to the last matrix of the batch (stride {stride})")
            } else {
                String::new()
            };
            return Err(Error::misuse(
                call,
                Misuse::TooShort { len, min: needed },
                format!(
                    "{name} holds {len} elements, but {stored_rows}×{stored_cols} with \
                     {ld_name} = {ld}{of_batch} spans {needed}"
                ),
            ));
        }
    }
    Ok(dims)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::sys::{candidates, check_status, load_from, ENV_VAR, LIBRARY_NAMES};
    use super::Op;
    use super::{check_gemm_dims, required_len, Batch, Dims, GemmShape};
    use crate::dylib::Candidate;
    use crate::error::{Error, Misuse};

    const CALL: &str = "cublasSgemm_v2";

    /// C (4×3) = A (4×2) · B (2×3), tightly packed, op N.
    fn shape() -> GemmShape {
        GemmShape::new((Op::N, Op::N), (4, 3, 2), (4, 2, 4))
    }

    fn misuse(e: Error) -> Misuse {
        match e {
            Error::Misuse { call, misuse, .. } => {
                assert_eq!(call, CALL);
                misuse
            }
            e => panic!("not a misuse: {e}"),
        }
    }

    fn fails(shape: &GemmShape, lens: [usize; 3], batch: Option<&Batch>) -> Misuse {
        misuse(check_gemm_dims(CALL, shape, lens, batch).unwrap_err())
    }

    #[test]
    fn required_len_counts_the_stored_extent() {
        // op N: the stored matrix is rows×cols.
        assert_eq!(required_len(Op::N, 4, 2, 4), Some(8));
        assert_eq!(required_len(Op::N, 4, 2, 10), Some(14));
        // op T: op(A) is 4×2, so A is stored 2×4: ld·3 + 2.
        assert_eq!(required_len(Op::T, 4, 2, 2), Some(8));
        assert_eq!(required_len(Op::T, 4, 2, 5), Some(17));
        assert_eq!(required_len(Op::N, 1, 1, 1), Some(1));
        assert_eq!(required_len(Op::N, 0, 3, 1), None);
        assert_eq!(required_len(Op::T, 3, 0, 1), None);
        assert_eq!(required_len(Op::N, 2, usize::MAX, usize::MAX), None);
    }

    #[test]
    fn exact_buffers_pass_and_give_cublas_ints() {
        let dims = check_gemm_dims(CALL, &shape(), [8, 6, 12], None).unwrap();
        let want = Dims {
            m: 4,
            n: 3,
            k: 2,
            lda: 4,
            ldb: 2,
            ldc: 4,
        };
        assert_eq!(dims, want);
        // Larger buffers are fine too.
        assert!(check_gemm_dims(CALL, &shape(), [100, 100, 100], None).is_ok());
    }

    #[test]
    fn zero_and_oversized_dimensions_are_refused() {
        let mut s = shape();
        s.k = 0;
        assert_eq!(fails(&s, [100; 3], None), Misuse::Zero { what: "k" });
        let mut s = shape();
        s.ldc = 0;
        assert_eq!(fails(&s, [100; 3], None), Misuse::Zero { what: "ldc" });
        let big = i32::MAX as usize + 1;
        let mut s = shape();
        s.m = big;
        s.lda = big;
        s.ldc = big;
        let r = fails(&s, [usize::MAX; 3], None);
        assert_eq!(r, Misuse::TooLarge { what: "m" });
        let mut s = shape();
        s.ldb = big;
        assert_eq!(
            fails(&s, [usize::MAX; 3], None),
            Misuse::TooLarge { what: "ldb" }
        );
        // i32::MAX itself fits.
        let mut s = shape();
        s.lda = i32::MAX as usize;
        let need_a = i32::MAX as usize + 4;
        assert!(check_gemm_dims(CALL, &s, [need_a, 6, 12], None).is_ok());
    }

    #[test]
    fn leading_dimensions_cover_the_stored_rows() {
        let mut s = shape();
        s.lda = 3;
        let ld = |name, ld, rows| Misuse::LeadingDimension { name, ld, rows };
        assert_eq!(fails(&s, [100; 3], None), ld("lda", 3, 4));
        // op T: A is stored k×m = 2×4, so lda = 2 is enough and 1 is not.
        let mut s = shape();
        s.transa = Op::T;
        s.lda = 2;
        assert!(check_gemm_dims(CALL, &s, [8, 6, 12], None).is_ok());
        s.lda = 1;
        assert_eq!(fails(&s, [100; 3], None), ld("lda", 1, 2));
        // op T on B: B is stored n×k = 3×2.
        let mut s = shape();
        s.transb = Op::T;
        s.ldb = 2;
        assert_eq!(fails(&s, [100; 3], None), ld("ldb", 2, 3));
        let mut s = shape();
        s.ldc = 3;
        assert_eq!(fails(&s, [100; 3], None), ld("ldc", 3, 4));
    }

    #[test]
    fn short_buffers_are_refused() {
        let short = |len, min| Misuse::TooShort { len, min };
        assert_eq!(fails(&shape(), [7, 6, 12], None), short(7, 8));
        assert_eq!(fails(&shape(), [8, 5, 12], None), short(5, 6));
        assert_eq!(fails(&shape(), [8, 6, 11], None), short(11, 12));
        // With padding the last column still ends at ld·(cols−1) + rows.
        let mut s = shape();
        s.lda = 10;
        assert_eq!(fails(&s, [13, 6, 12], None), short(13, 14));
        assert!(check_gemm_dims(CALL, &s, [14, 6, 12], None).is_ok());
        // Empty buffers never pass.
        assert_eq!(fails(&shape(), [0, 6, 12], None), short(0, 8));
    }

    #[test]
    fn batches_are_checked_up_to_the_last_matrix() {
        let batch = Batch {
            stride_a: 8,
            stride_b: 6,
            stride_c: 12,
            count: 3,
        };
        assert!(check_gemm_dims(CALL, &shape(), [24, 18, 36], Some(&batch)).is_ok());
        assert_eq!(
            fails(&shape(), [24, 18, 35], Some(&batch)),
            Misuse::TooShort { len: 35, min: 36 }
        );
        // A stride of 0 broadcasts one A over the batch.
        let broadcast = Batch {
            stride_a: 0,
            ..batch
        };
        assert!(check_gemm_dims(CALL, &shape(), [8, 18, 36], Some(&broadcast)).is_ok());
        let no_batch = Batch { count: 0, ..batch };
        assert_eq!(
            fails(&shape(), [100; 3], Some(&no_batch)),
            Misuse::Zero { what: "batch" }
        );
        let negative = Batch {
            stride_b: -6,
            ..batch
        };
        assert_eq!(
            fails(&shape(), [100; 3], Some(&negative)),
            Misuse::BadStride { name: "stride_b" }
        );
        let same_c = Batch {
            stride_c: 0,
            ..batch
        };
        assert_eq!(
            fails(&shape(), [100; 3], Some(&same_c)),
            Misuse::BadStride { name: "stride_c" }
        );
        // One matrix may write C in place whatever its stride.
        let one = Batch {
            stride_c: 0,
            count: 1,
            ..batch
        };
        assert!(check_gemm_dims(CALL, &shape(), [8, 6, 12], Some(&one)).is_ok());
        let huge = Batch {
            stride_a: i64::MAX,
            count: i32::MAX,
            ..batch
        };
        assert_eq!(
            fails(&shape(), [usize::MAX; 3], Some(&huge)),
            Misuse::TooLarge { what: "A" }
        );
    }

    #[test]
    fn statuses_name_the_call_and_the_code() {
        assert!(check_status("cublasGemmEx", 0).is_ok());
        let e = check_status("cublasGemmEx", 7).unwrap_err();
        assert_eq!(e.call(), Some("cublasGemmEx"));
        let msg = e.to_string();
        assert!(
            msg.starts_with("cublasGemmEx: CUBLAS_STATUS_INVALID_VALUE (7): "),
            "{msg}"
        );
        let msg = check_status("cublasSgemm_v2", 15).unwrap_err().to_string();
        assert!(msg.contains("CUBLAS_STATUS_NOT_SUPPORTED (15)"), "{msg}");
        let msg = check_status("cublasCreate_v2", 999)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("CUBLAS_STATUS_UNKNOWN (999)"), "{msg}");
    }

    #[test]
    fn candidates_start_with_the_environment_variable() {
        let names: Vec<Candidate> = LIBRARY_NAMES.into_iter().map(Candidate::Soname).collect();
        assert_eq!(candidates(None), names);
        assert_eq!(candidates(Some(OsString::new())), names);
        let mut with = vec![Candidate::Named("/opt/libcublas.so.13".into())];
        with.extend(names);
        assert_eq!(candidates(Some("/opt/libcublas.so.13".into())), with);
    }

    #[test]
    fn a_missing_library_names_every_path_tried() {
        let tried = [
            Candidate::Named("/nonexistent/libcublas.so.13".into()),
            Candidate::Found("/nonexistent/other/libcublas.so.12".into()),
        ];
        let e = load_from(&tried).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/libcublas.so.13"), "{msg}");
        assert!(msg.contains("/nonexistent/other/libcublas.so.12"), "{msg}");
        assert!(msg.contains(ENV_VAR), "{msg}");
        assert!(msg.contains("nvidia/cu13/lib/libcublas.so.13"), "{msg}");
        let msg = load_from(&[]).unwrap_err().to_string();
        assert!(msg.contains("tried nothing"), "{msg}");
    }

    #[test]
    fn a_named_library_must_be_an_absolute_path_to_a_regular_file() {
        // A relative name would be looked up from the working folder; a folder is no library.
        let msg = load_from(&[Candidate::Named("libcublas.so.13".into())])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("libcublas.so.13: not an absolute path"),
            "{msg}"
        );
        let dir = std::env::temp_dir();
        let msg = load_from(&[Candidate::Named(dir.clone())])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("is a folder, not a regular file"), "{msg}");
    }

    #[test]
    fn a_library_without_cublas_is_refused() {
        // The C library loads everywhere this crate runs, and has no cuBLAS.
        let e = load_from(&[Candidate::Soname("libc.so.6")]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("libc.so.6: not cuBLAS: no symbol cublasCreate_v2"),
            "{msg}"
        );
    }
}
