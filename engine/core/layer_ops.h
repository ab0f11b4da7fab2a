/* layer_ops.h: the transformer layers each backend implements (a second table beside
 * dp_backend's basic ops; dev->ops->layers points at it).
 *
 * Conventions, shared by every entry (the CPU implementation in cpu_layers.c is the
 * specification the CUDA kernels must match):
 * - Activations are row-major, token-major: a B x T x d tensor is N = B*T rows of d. Their dtype
 *   `t` is f32 or bf16 (the model's compute dtype). Gains and biases are f32 (the model widens a
 *   bf16 one first), embedding tables f32 or bf16 (wt), parameters the optimizers update f32 or
 *   bf16 (pt); parameter gradients are always f32. Statistics saved for backward (mean, rstd,
 *   log-sum-exp) are f32.
 * - Arithmetic is f32 whatever `t` is; bf16 values are widened on load and rounded (nearest
 *   even) on store.
 * - "dx accumulate": backward entries write dx (accumulate = 0) or add into it (= 1), so a
 *   residual branch adds its gradient to the stream's without a temporary.
 * - Parameter gradients are always accumulated (+=) into f32 buffers the caller zeroed.
 * - Every reduction is deterministic: a fixed partition and a fixed order, independent of the
 *   thread count or launch shape, no floating-point atomics.
 * - Scratch memory a kernel needs beyond the f32 partials in the backend's own workspace is
 *   passed in by the caller, who allocated it through the tagged allocator.
 * - Each returns DP_OK or a status with dp_error_set. */
#ifndef DP_LAYER_OPS_H
#define DP_LAYER_OPS_H

/* The target id that carries no loss and no gradient: a pad (Hugging Face's and PyTorch's
 * ignore_index, -100). kernels/layer_kernels.h holds the same value for the CUDA kernels. */
#define DP_IGNORE_INDEX (-100)

#include "dtype.h"

#include <stdint.h>

typedef struct dp_device dp_device;

typedef struct dp_layer_ops {
    /* out[n, :] = wte[ids[n], :] (+ wpe[n % T, :] when wpe != NULL) for n < N = B*T; ids are
     * i32 in [0, V). out has dtype t; the tables have dtype wt (f32, or bf16: a bf16 model's
     * frozen or master-less embeddings), the sum taken in f32. */
    int (*embedding_forward)(dp_device *dev, dp_dtype t, dp_dtype wt, void *out, const int32_t *ids, const void *wte,
                             const void *wpe, int64_t N, int64_t T, int64_t d);
    /* dwte[ids[n], :] += dout[n, :] for n in increasing order (dwte may be NULL: frozen);
     * dwpe[tt, :] += sum over b of dout[b*T + tt, :] (when dwpe != NULL). */
    int (*embedding_backward)(dp_device *dev, dp_dtype t, const void *dout, const int32_t *ids, float *dwte,
                              float *dwpe, int64_t N, int64_t T, int64_t d, int64_t V);

    /* LayerNorm over each row of x (N x d): mean, rstd = 1/sqrt(var + eps) (biased var), out =
     * (x - mean) * rstd * w + b. Saves mean[N], rstd[N]. */
    int (*layernorm_forward)(dp_device *dev, dp_dtype t, void *out, float *mean, float *rstd, const void *x,
                             const float *w, const float *b, int64_t N, int64_t d, float eps);
    /* dx (+)= LayerNorm's input gradient; dw += sum_n dout*xhat, db += sum_n dout (dw, db may be
     * NULL: frozen). xhat is recomputed from x, mean, rstd. */
    int (*layernorm_backward)(dp_device *dev, dp_dtype t, void *dx, float *dw, float *db, const void *dout,
                              const void *x, const float *w, const float *mean, const float *rstd, int64_t N, int64_t d,
                              int accumulate);
    /* RMSNorm: rstd = 1/sqrt(mean(x^2) + eps), out = x * rstd * w (Hugging Face's LlamaRMSNorm). */
    int (*rmsnorm_forward)(dp_device *dev, dp_dtype t, void *out, float *rstd, const void *x, const float *w, int64_t N,
                           int64_t d, float eps);
    /* dx (+)= RMSNorm's input gradient; dw += sum_n dout * x * rstd (dw may be NULL). */
    int (*rmsnorm_backward)(dp_device *dev, dp_dtype t, void *dx, float *dw, const void *dout, const void *x,
                            const float *w, const float *rstd, int64_t N, int64_t d, int accumulate);

    /* out[r, c] += bias[c] for r < rows, c < cols (the bias of a linear, after its GEMM). */
    int (*bias_add)(dp_device *dev, dp_dtype t, void *out, const float *bias, int64_t rows, int64_t cols);
    /* db[c] += sum_r g[r, c] (bias gradients). */
    int (*bias_backward)(dp_device *dev, dp_dtype t, float *db, const void *g, int64_t rows, int64_t cols);

    /* GELU, tanh form (GPT-2's gelu_new): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    int (*gelu_forward)(dp_device *dev, dp_dtype t, void *out, const void *x, int64_t n);
    /* dx (+)= dout * gelu'(x). dx may alias dout (the model computes the gradient in place). */
    int (*gelu_backward)(dp_device *dev, dp_dtype t, void *dx, const void *dout, const void *x, int64_t n,
                         int accumulate);
    /* SwiGLU: out = silu(gate) * up, element-wise over n elements (silu(z) = z / (1 + e^-z)). */
    int (*swiglu_forward)(dp_device *dev, dp_dtype t, void *out, const void *gate, const void *up, int64_t n);
    /* dgate = dout * up * silu'(gate), dup = dout * silu(gate) (written, not accumulated). dgate
     * may alias dout (the model writes it in place). */
    int (*swiglu_backward)(dp_device *dev, dp_dtype t, void *dgate, void *dup, const void *dout, const void *gate,
                           const void *up, int64_t n);

    /* Rotary embedding in place on x (N rows of H heads of hd, row stride ld elements), Hugging
     * Face's rotate-half layout: within each head, dimension j < hd/2 pairs with j + hd/2 at
     * angle pos * inv_freq[j], pos = n % T, rotated by (c, s) = (cos, sin)(angle) * scale.
     * inv_freq is a host array of hd/2 f32 (the model computes it once, with the rope scaling:
     * model_rope.c); scale is yarn's attention factor (1 otherwise). inverse = 1 applies the
     * transpose, (c, -s): the backward of the forward. Rounding points, the same on every device:
     * angle = pos * inv_freq[j] (f32), cosf and sinf, each times scale (f32), then
     * x1 c - x2 s and x2 c + x1 s (f32, each product rounded). */
    int (*rope)(dp_device *dev, dp_dtype t, void *x, int64_t ld, int64_t N, int64_t T, int64_t H, int64_t hd,
                const float *inv_freq, float scale, int inverse);

    /* Causal self-attention, FlashAttention-2 style: never a T x T matrix in device memory.
     * Grouped-query: H query heads share Hkv key/value heads (H a multiple of Hkv; Hkv = H is
     * ordinary multi-head attention, Hkv = 1 multi-query); query head h reads kv head
     * h / (H / Hkv), as transformers' repeat_kv, and the repeat is never materialised. q is an
     * N x (H*hd) view with row stride ld_q, k and v are N x (Hkv*hd) views with row stride ld_kv
     * (e.g. both 3d inside GPT's fused qkv); out is N x (H*hd) contiguous (row stride H*hd).
     * Row i of head h attends to keys j <= i of the same sample with softmax(scale * q.k).
     * Saves lse[(b*H + h)*T + i] = log-sum-exp of the scaled scores of that row (natural log). */
    int (*attention_forward)(dp_device *dev, dp_dtype t, void *out, float *lse, const void *q, const void *k,
                             const void *v, int64_t ld_q, int64_t ld_kv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                             int64_t hd, float scale);
    /* Gradients of attention_forward: writes dq (row stride ld_dq) and dk, dv (ld_dkv), laid out
     * like q, k, v. delta is caller-provided f32 scratch of B*H*T floats (rowsum(dout * out)).
     * Deterministic: no atomics (CUDA: dk/dv and dq from separate passes over the blocks; the CPU:
     * one thread per (sample, kv head) walks the blocks in a fixed order); a kv head's dk and dv
     * sum the H / Hkv query heads of its group in increasing order. */
    int (*attention_backward)(dp_device *dev, dp_dtype t, void *dq, void *dk, void *dv, int64_t ld_dq, int64_t ld_dkv,
                              const void *dout, const void *out, const float *lse, const void *q, const void *k,
                              const void *v, int64_t ld_q, int64_t ld_kv, float *delta, int64_t B, int64_t T, int64_t H,
                              int64_t Hkv, int64_t hd, float scale);

    /* Fused softmax cross-entropy, forward: for each of N rows of logits (N x V, dtype t),
     * losses[n] = logsumexp(row) - row[targets[n]] and lse[n] = logsumexp(row) (f32); a target of
     * DP_IGNORE_INDEX (a pad) has loss 0. */
    int (*cross_entropy_forward)(dp_device *dev, dp_dtype t, float *losses, float *lse, const void *logits,
                                 const int32_t *targets, int64_t N, int64_t V);
    /* Backward, in place: logits[n, :] becomes (softmax(row) - onehot(targets[n])) * scale[n / T],
     * using the lse saved by the forward. No second N x V buffer. sample_scale is a device array of
     * B = N / T f32 values; the model passes s_i / n_i there (the 1/n_i of the per-sample mean over
     * its n_i targets that are not ignored). A row whose target is DP_IGNORE_INDEX becomes 0. */
    int (*cross_entropy_backward)(dp_device *dev, dp_dtype t, void *logits, const float *lse, const int32_t *targets,
                                  const float *sample_scale, int64_t N, int64_t T, int64_t V);

    /* Optimizer steps over n elements (p: parameter of dtype pt, f32 or bf16 widened and rounded
     * once at the end; g: gradient, m/v/buf: states, f32).
     * AdamW (PyTorch's): p -= lr * wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps). */
    int (*adamw_step)(dp_device *dev, dp_dtype pt, void *p, const float *g, float *m, float *v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int64_t step);
    /* SGD (PyTorch's): g' = g + wd p; with momentum: buf = mu buf + g' (buf = g' at step 1 when
     * first_step), p -= lr * buf; without (buf NULL): p -= lr g'. */
    int (*sgd_step)(dp_device *dev, dp_dtype pt, void *p, const float *g, float *buf, int64_t n, float lr,
                    float momentum, float weight_decay, int first_step);
} dp_layer_ops;

#endif
