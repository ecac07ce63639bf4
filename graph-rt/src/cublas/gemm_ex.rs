//! Mixed-precision GEMMs through `cublasGemmEx`: bf16 or f16 matrices with f32 accumulation,
//! and bf16 inputs with an f32 result (a model's logits, kept unrounded).

use std::ffi::{c_int, c_void};

use super::handle::{Cublas, Op};
use super::sys;
use super::GemmShape;
use crate::driver::DeviceBuffer;
use crate::error::Result;

impl Cublas {
    /// [`Cublas::sgemm`] on bf16 matrices (`cublasGemmEx`, `CUDA_R_16BF`; elements of
    /// [`half::bf16`], re-exported as `graph_rt::half`) with f32 accumulation
    /// (`CUBLAS_COMPUTE_32F`) and f32 `alpha`, `beta`. An f16 buffer does not compile here:
    ///
    /// ```no_run
    /// # use graph_rt::*;
    /// # use graph_rt::cublas::{Cublas, Op as CublasOp};
    /// # fn f(blas: &Cublas, a: &DeviceBuffer<half::bf16>, b: &DeviceBuffer<half::bf16>,
    /// #      c: &mut DeviceBuffer<half::bf16>) -> Result<()> {
    /// blas.gemm_bf16(CublasOp::N, CublasOp::N, 16, 16, 16, 1.0, a, 16, b, 16, 0.0, c, 16)
    /// # }
    /// ```
    ///
    /// ```compile_fail,E0308
    /// # use graph_rt::*;
    /// # use graph_rt::cublas::{Cublas, Op as CublasOp};
    /// # fn f(blas: &Cublas, a: &DeviceBuffer<half::f16>, b: &DeviceBuffer<half::f16>,
    /// #      c: &mut DeviceBuffer<half::f16>) -> Result<()> {
    /// blas.gemm_bf16(CublasOp::N, CublasOp::N, 16, 16, 16, 1.0, a, 16, b, 16, 0.0, c, 16)
    /// # }
    /// ```
    #[allow(clippy::too_many_arguments)] // cuBLAS's arguments, in cuBLAS's order
    pub fn gemm_bf16(
        &self,
        transa: Op,
        transb: Op,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &DeviceBuffer<half::bf16>,
        lda: usize,
        b: &DeviceBuffer<half::bf16>,
        ldb: usize,
        beta: f32,
        c: &mut DeviceBuffer<half::bf16>,
        ldc: usize,
    ) -> Result<()> {
        let shape = GemmShape::new((transa, transb), (m, n, k), (lda, ldb, ldc));
        self.gemm_ex(&shape, (alpha, beta), a, b, c)
    }

    /// [`Cublas::sgemm`] on f16 matrices (`cublasGemmEx`, `CUDA_R_16F`; elements of
    /// [`half::f16`]) with f32 accumulation (`CUBLAS_COMPUTE_32F`) and f32 `alpha`, `beta`. A
    /// bf16 buffer does not compile here.
    #[allow(clippy::too_many_arguments)] // cuBLAS's arguments, in cuBLAS's order
    pub fn gemm_f16(
        &self,
        transa: Op,
        transb: Op,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &DeviceBuffer<half::f16>,
        lda: usize,
        b: &DeviceBuffer<half::f16>,
        ldb: usize,
        beta: f32,
        c: &mut DeviceBuffer<half::f16>,
        ldc: usize,
    ) -> Result<()> {
        let shape = GemmShape::new((transa, transb), (m, n, k), (lda, ldb, ldc));
        self.gemm_ex(&shape, (alpha, beta), a, b, c)
    }

    /// [`Cublas::gemm_bf16`] with an f32 result: A and B bf16, C f32 (`CUDA_R_32F`), f32
    /// accumulation. The product is not rounded to bf16: what a model's logits want before a
    /// softmax or a top-k.
    #[allow(clippy::too_many_arguments)] // cuBLAS's arguments, in cuBLAS's order
    pub fn gemm_bf16_f32(
        &self,
        transa: Op,
        transb: Op,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &DeviceBuffer<half::bf16>,
        lda: usize,
        b: &DeviceBuffer<half::bf16>,
        ldb: usize,
        beta: f32,
        c: &mut DeviceBuffer<f32>,
        ldc: usize,
    ) -> Result<()> {
        let shape = GemmShape::new((transa, transb), (m, n, k), (lda, ldb, ldc));
        self.gemm_ex(&shape, (alpha, beta), a, b, c)
    }

    /// `cublasGemmEx` with A and B of `T` and C of `C`, each passed as its `cudaDataType_t`.
    fn gemm_ex<T: ExElement, C: ExElement>(
        &self,
        shape: &GemmShape,
        (alpha, beta): (f32, f32),
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &mut DeviceBuffer<C>,
    ) -> Result<()> {
        const CALL: &str = "cublasGemmEx";
        let (ab_type, c_type) = (T::TYPE, C::TYPE);
        self.gemm(CALL, shape, None, [a.into(), b.into(), (&*c).into()], |d| {
            // SAFETY: valid handle; the buffers belong to the handle's context and hold every
            // element the GEMM touches (checked before `enqueue`), of the types named; alpha
            // and beta are host floats, the scale type of CUBLAS_COMPUTE_32F.
            unsafe {
                (self.lib.gemm_ex)(
                    self.handle,
                    shape.transa.raw(),
                    shape.transb.raw(),
                    d.m,
                    d.n,
                    d.k,
                    (&alpha as *const f32).cast(),
                    a.as_raw() as *const c_void,
                    ab_type,
                    d.lda,
                    b.as_raw() as *const c_void,
                    ab_type,
                    d.ldb,
                    (&beta as *const f32).cast(),
                    c.as_raw() as *mut c_void,
                    c_type,
                    d.ldc,
                    sys::CUBLAS_COMPUTE_32F,
                    sys::CUBLAS_GEMM_DEFAULT,
                )
            }
        })
    }
}

/// An element type `cublasGemmEx` is called with here, and the `cudaDataType_t` that names it:
/// the type passed is the buffer's, never a separate argument that could disagree with it.
trait ExElement: bytemuck::Pod {
    const TYPE: c_int;
}

impl ExElement for half::bf16 {
    const TYPE: c_int = sys::CUDA_R_16BF;
}

impl ExElement for half::f16 {
    const TYPE: c_int = sys::CUDA_R_16F;
}

impl ExElement for f32 {
    const TYPE: c_int = sys::CUDA_R_32F;
}
