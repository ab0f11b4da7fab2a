/* layers.h: C entry points of the transformer layer kernels (the CUDA side of
 * engine/core/layer_ops.h, whose comments define every operation). Each launches on stream s and
 * returns the launch's cudaError_t (cudaErrorInvalidValue for shapes it cannot take; the engine
 * checks those first and names the problem). dtype codes: 0 f32, 1 bf16 (as dp_dtype).
 * Parameters, their gradients, statistics and scratch are f32; arithmetic is f32.
 * `scratch` is the backend's f32 workspace for deterministic column sums (scratch_floats
 * floats, at least 64); kernels never allocate. */
#ifndef DPK_LAYERS_H
#define DPK_LAYERS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* embedding.cu: out[n, :] = wte[ids[n], :] (+ wpe[n % T, :]). */
cudaError_t dpk_embedding_forward(cudaStream_t s, int dtype, int wdtype, void *out, const int32_t *ids, const void *wte,
                                  const void *wpe, int64_t N, int64_t T, int64_t d);
/* dwte[ids[n], :] += dout[n, :] in increasing n (rows of one id are added by one block, in
 * order; ids outside [0, V) are skipped), dwpe[t, :] += sum over b in order (either may be NULL). */
cudaError_t dpk_embedding_backward(cudaStream_t s, int dtype, const void *dout, const int32_t *ids, float *dwte,
                                   float *dwpe, int64_t N, int64_t T, int64_t d, int64_t V);

/* norm.cu: LayerNorm and RMSNorm over rows of d; saved statistics f32. */
cudaError_t dpk_layernorm_forward(cudaStream_t s, int dtype, void *out, float *mean, float *rstd, const void *x,
                                  const float *w, const float *b, int64_t N, int64_t d, float eps);
cudaError_t dpk_layernorm_backward(cudaStream_t s, int dtype, void *dx, float *dw, float *db, const void *dout,
                                   const void *x, const float *w, const float *mean, const float *rstd, int64_t N,
                                   int64_t d, int accumulate, float *scratch, size_t scratch_floats);
cudaError_t dpk_rmsnorm_forward(cudaStream_t s, int dtype, void *out, float *rstd, const void *x, const float *w,
                                int64_t N, int64_t d, float eps);
cudaError_t dpk_rmsnorm_backward(cudaStream_t s, int dtype, void *dx, float *dw, const void *dout, const void *x,
                                 const float *w, const float *rstd, int64_t N, int64_t d, int accumulate,
                                 float *scratch, size_t scratch_floats);

/* activation.cu: bias, GELU (tanh form) and SwiGLU. */
cudaError_t dpk_bias_add(cudaStream_t s, int dtype, void *out, const float *bias, int64_t rows, int64_t cols);
cudaError_t dpk_bias_backward(cudaStream_t s, int dtype, float *db, const void *g, int64_t rows, int64_t cols,
                              float *scratch, size_t scratch_floats);
cudaError_t dpk_gelu_forward(cudaStream_t s, int dtype, void *out, const void *x, int64_t n);
cudaError_t dpk_gelu_backward(cudaStream_t s, int dtype, void *dx, const void *dout, const void *x, int64_t n,
                              int accumulate);
cudaError_t dpk_swiglu_forward(cudaStream_t s, int dtype, void *out, const void *gate, const void *up, int64_t n);
cudaError_t dpk_swiglu_backward(cudaStream_t s, int dtype, void *dgate, void *dup, const void *dout, const void *gate,
                                const void *up, int64_t n);

/* rope.cu: rotate-half rotary embedding in place (hd even, hd / 2 <= DPK_ROPE_MAX_PAIRS) at the
 * host's hd / 2 inverse frequencies, cos and sin times scale. */
#define DPK_ROPE_MAX_PAIRS 256
cudaError_t dpk_rope(cudaStream_t s, int dtype, void *x, int64_t ld, int64_t N, int64_t T, int64_t H, int64_t hd,
                     const float *inv_freq, float scale, int inverse);

/* attention_fwd.cu / attention_bwd.cu: causal FlashAttention-2 (hd <= 256), grouped-query
 * (query head h reads kv head h / (H / Hkv); q and dq have row strides ld_q / ld_dq, k, v and
 * dk, dv ld_kv / ld_dkv). bf16 with hd 64 or 128 (and 16-byte aligned rows) runs on tensor
 * cores; everything else on a tiled SIMT kernel. The backward writes delta (B*H*T f32) itself;
 * a kv head's dk, dv sum its group's query heads in one block, in order (no atomics). */
cudaError_t dpk_attention_forward(cudaStream_t s, int dtype, void *out, float *lse, const void *q, const void *k,
                                  const void *v, int64_t ld_q, int64_t ld_kv, int64_t B, int64_t T, int64_t H,
                                  int64_t Hkv, int64_t hd, float scale);
cudaError_t dpk_attention_backward(cudaStream_t s, int dtype, void *dq, void *dk, void *dv, int64_t ld_dq,
                                   int64_t ld_dkv, const void *dout, const void *out, const float *lse, const void *q,
                                   const void *k, const void *v, int64_t ld_q, int64_t ld_kv, float *delta, int64_t B,
                                   int64_t T, int64_t H, int64_t Hkv, int64_t hd, float scale);
/* 1 when attention of this dtype and shape runs on tensor cores (for benchmarks and docs). */
int dpk_attention_uses_mma(int dtype, int64_t hd, int64_t ld_q, int64_t ld_kv, const void *q, const void *k,
                           const void *v);

/* cross_entropy.cu: one block per row of V logits. A target of DPK_IGNORE_INDEX (engine's
 * DP_IGNORE_INDEX, checked equal in cuda_layers.c) is a pad: loss 0, gradient row 0. */
#define DPK_IGNORE_INDEX (-100)
cudaError_t dpk_cross_entropy_forward(cudaStream_t s, int dtype, float *losses, float *lse, const void *logits,
                                      const int32_t *targets, int64_t N, int64_t V);
cudaError_t dpk_cross_entropy_backward(cudaStream_t s, int dtype, void *logits, const float *lse,
                                       const int32_t *targets, const float *sample_scale, int64_t N, int64_t T,
                                       int64_t V);

/* optim_steps.cu: PyTorch's AdamW and SGD, operation for operation (no fused multiply-add). */
cudaError_t dpk_adamw_step(cudaStream_t s, int pdtype, void *p, const float *g, float *m, float *v, int64_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, int64_t step);
cudaError_t dpk_sgd_step(cudaStream_t s, int pdtype, void *p, const float *g, float *buf, int64_t n, float lr,
                         float momentum, float weight_decay, int first_step);

#ifdef __cplusplus
}
#endif

#endif
