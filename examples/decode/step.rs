//! The decode step's work as the step's closure enqueues it (`Model::enqueue`): which kernels and
//! products, in what order, over which buffers.

use graph_rt::cublas::Op;
use graph_rt::half::bf16;
use graph_rt::step::StepScope;
use graph_rt::{DeviceBuffer, LaunchConfig};
use graph_rt_dev::decode::reference::EPS;

use crate::model::{argmax_blocks, attention_smem, Batch, Gemms, Model, Params, Variant};

impl Model {
    /// One decode step of batch `a` through the step's scope: embedding and norm; per layer the
    /// QKV product, attention over the positions written (the rotary embedding and the cache append
    /// fused in), the output
    /// product, the residual add and norm, the gate/up product, SiLU·up, the down product; the
    /// residual add and final norm, the head product and the argmax. With the example's own
    /// products ([`Gemms::Own`], where they apply) the residual add and norm are fused into the
    /// product that reads them, SiLU·up into the down product and the argmax into the head's
    /// product (23 graph nodes for the reference configuration instead of 40, the table's
    /// refresh included). Rounded where PyTorch's bf16 eager model rounds.
    pub fn enqueue(
        &self,
        s: &StepScope<'_>,
        a: &mut Batch,
        p: &Params,
        v: Variant,
    ) -> graph_rt::Result<()> {
        let c = &self.c;
        let k = match (&self.k_pdl, v.pdl) {
            (Some(k), true) => k,
            _ => &self.k,
        };
        let (b, d, hd) = (a.rows, c.d, c.head_dim());
        let (qkv_w, attn_w, mlp) = ((c.heads + 2 * c.kv_heads) * hd, c.heads * hd, c.mlp);
        let own = v.gemms == Gemms::Own;
        let (fuse_norm, fuse_silu) = (own && k.gemv_fits(b, d), own && k.gemv_fits(b, mlp));
        let i = |n: usize| n as i32;
        // The first kernel after the table's refresh is never programmatic: it reads the slots.
        let first = LaunchConfig::new(b as u32, 256u32);
        let rows = k.cfg(first);
        let attn_cfg = k.cfg(
            LaunchConfig::new((c.heads as u32, b as u32), 1024u32)
                .shared_mem(attention_smem(c) as u32),
        );
        let blas = &self.blas;
        let gemm = |m: usize,
                    kk: usize,
                    w: &DeviceBuffer<bf16>,
                    x: &DeviceBuffer<bf16>,
                    y: &mut DeviceBuffer<bf16>| {
            // y (m × b, column-major: row-major [b, m]) = W x, W row-major [m, kk].
            if own && k.gemv_fits(b, kk) {
                let cfg = k.gemv_cfg(m, b, kk, self.sms)?;
                // SAFETY: W holds m × kk, x b × kk and y b × m elements; kk a multiple of 8.
                return unsafe { s.launch(&k.gemv, &cfg, (w, x, &*y, i(m), i(kk), i(b))) };
            }
            s.cublas(blas, |bl| {
                bl.gemm_bf16(Op::T, Op::N, m, b, kk, 1.0, w, kk, x, kk, 0.0, y, m)
            })
        };
        // SAFETY (every launch below): buffers of the sizes its kernel reads and writes
        // (decode.cuh's comments): rows × width of each activation, the caches
        // [rows, kv_heads, max_len, head_dim], slots of the step's table for the tokens (rows),
        // the logits (rows × vocab), the next tokens (rows), the position and length; the
        // kernels bound token, position and length themselves; a fused product's residual in
        // and out are the two buffers of `a.x`.
        unsafe {
            s.launch_table(
                &k.embed_norm,
                &first,
                (
                    p.tokens.slot(),
                    &self.w.embedding,
                    &self.w.layers[0].n1,
                    &a.x[0],
                    &a.h,
                    i(d),
                    i(c.vocab),
                    EPS,
                ),
            )?;
        }
        // The residual is a.x[cur]; `pending`: a.delta still to be added to it.
        let (mut cur, mut pending) = (0usize, false);
        let add_norm = |a: &Batch, cur: usize, w: &DeviceBuffer<bf16>| {
            let args = (&a.x[cur], &a.delta, w, &a.h, i(d), EPS);
            // SAFETY: as above.
            unsafe { s.launch(&k.add_norm, &rows, args) }
        };
        // y = W · RMSNorm(x + delta) · w, the sum written to the other residual buffer.
        let fused = |a: &Batch, cur: usize, wt: &DeviceBuffer<bf16>, nw, y: &DeviceBuffer<bf16>| {
            let m = y.len() / b;
            let args = (
                wt,
                &a.x[cur],
                &a.delta,
                &a.x[1 - cur],
                nw,
                y,
                i(m),
                i(d),
                i(b),
                EPS,
            );
            // SAFETY: as above.
            unsafe { s.launch(&k.gemv_norm, &k.gemv_cfg(m, b, d, self.sms)?, args) }
        };
        let dims = (i(c.heads), i(c.kv_heads), i(hd), i(c.max_len));
        for (l, w) in self.w.layers.iter().enumerate() {
            if pending && fuse_norm {
                fused(a, cur, &w.qkv, &w.n1, &a.qkv)?;
                cur = 1 - cur;
            } else {
                if pending {
                    add_norm(a, cur, &w.n1)?;
                }
                gemm(qkv_w, d, &w.qkv, &a.h, &mut a.qkv)?;
            }
            // SAFETY: as above.
            unsafe {
                let (kc, vc) = (&a.k[l], &a.v[l]);
                let scale = 1.0 / (hd as f32).sqrt();
                let (n, kv, hw, t) = dims;
                let (pos, len) = (p.pos.slot(), p.len.slot());
                let attn = (&a.qkv, kc, vc, &a.attn, n, kv, hw, t, scale, pos, len);
                s.launch_table(&k.attention, &attn_cfg, attn)?;
            }
            gemm(d, attn_w, &w.o, &a.attn, &mut a.delta)?;
            if fuse_norm {
                fused(a, cur, &w.up, &w.n2, &a.gate_up)?;
                cur = 1 - cur;
            } else {
                add_norm(a, cur, &w.n2)?;
                gemm(2 * mlp, d, &w.up, &a.h, &mut a.gate_up)?;
            }
            if fuse_silu {
                let cfg = k.gemv_cfg(d, b, mlp, self.sms)?;
                let args = (&w.down, &a.gate_up, &a.delta, i(d), i(mlp), i(b));
                // SAFETY: as above.
                unsafe { s.launch(&k.gemv_silu, &cfg, args)? };
            } else {
                let cfg = k.cfg(LaunchConfig::for_elements(b * mlp, 256));
                // SAFETY: as above.
                unsafe { s.launch(&k.silu_mul, &cfg, (&a.gate_up, &a.act, i(mlp), i(b * mlp)))? };
                gemm(d, mlp, &w.down, &a.act, &mut a.delta)?;
            }
            pending = true;
        }
        let (head, final_norm) = (&self.w.head, &self.w.final_norm);
        if fuse_norm {
            // The head's product with the argmax fused in: no argmax kernel after it.
            let cfg = k.gemv_cfg(c.vocab, b, d, self.sms)?;
            let (x, y) = (&a.x[cur], &a.x[1 - cur]);
            let args = (
                head,
                x,
                &a.delta,
                y,
                final_norm,
                p.logits.slot(),
                i(c.vocab),
                i(d),
                i(b),
                EPS,
                p.next.slot(),
                &a.argmax_best,
                &a.argmax_done,
            );
            // SAFETY: as above; the head holds vocab × d elements, the logits b × vocab, the
            // next tokens b; the best keys b words and the count one, zero between launches.
            return unsafe { s.launch_table(&k.gemv_norm_argmax, &cfg, args) };
        }
        add_norm(a, cur, final_norm)?;
        let mut logits = s.buffer(&p.logits)?;
        s.cublas(blas, |bl| {
            let (v, h) = (c.vocab, &a.h);
            bl.gemm_bf16_f32(
                Op::T,
                Op::N,
                v,
                b,
                d,
                1.0,
                head,
                d,
                h,
                d,
                0.0,
                &mut logits,
                v,
            )
        })?;
        // SAFETY: as above.
        unsafe {
            let grid = (argmax_blocks(c.vocab), b as u32);
            let (best, done) = (&a.argmax_best, &a.argmax_done);
            s.launch_table(
                &k.argmax,
                &k.cfg(LaunchConfig::new(grid, 1024u32)),
                (p.logits.slot(), p.next.slot(), i(c.vocab), best, done),
            )
        }
    }
}
