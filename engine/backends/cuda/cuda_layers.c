/* cuda_layers.c: the CUDA layer table (layer_ops.h). Each entry checks what the kernels cannot
 * take (naming the problem and the valid choices), launches on the backend's stream, and turns
 * a launch error into DP_EDEVICE naming the op. DPPROF_CUDA_SYNC_CHECK=1 adds a stream
 * synchronisation and an error check after every op, so an asynchronous fault is reported by
 * the op that caused it.
 *
 * Differences from the CPU reference that the device makes necessary: token ids and targets
 * live on the GPU, so these ops do not range-check them; the model's forward does, on every
 * device, before any kernel reads a table (model.c). Called directly with a bad id, the embedding
 * forward would read outside wte; the embedding backward skips it and the loss gives NaN. */
#ifdef DPPROF_HAVE_CUDA

#include "cuda_layers.h"

#include "cuda_stream.h"
#include "error.h"

#include "layer_kernels.h"

#include <stdlib.h>
#include <string.h>

static int sync_check_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("DPPROF_CUDA_SYNC_CHECK");
        enabled = v && *v && strcmp(v, "0") != 0;
    }
    return enabled;
}

/* DP_OK, or DP_EDEVICE naming op and the CUDA error of its launch (or of its execution when
 * DPPROF_CUDA_SYNC_CHECK is set). */
static int launched(dp_device *dev, const char *op, cudaError_t e) {
    if (e == cudaErrorInvalidValue)
        return dp_error_set(DP_EINVAL, "%s: the CUDA kernels cannot take these sizes or pointers", op);
    if (e != cudaSuccess) return dp_error_set(DP_EDEVICE, "%s: kernel launch failed: %s", op, cudaGetErrorString(e));
    if (sync_check_enabled()) {
        e = cudaStreamSynchronize(dp_cuda_stream(dev));
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess)
            return dp_error_set(DP_EDEVICE, "%s: kernel failed (DPPROF_CUDA_SYNC_CHECK): %s", op,
                                cudaGetErrorString(e));
    }
    return DP_OK;
}

static int need_float(dp_dtype t, const char *op) {
    if (t == DP_F32 || t == DP_BF16) return DP_OK;
    return dp_error_set(DP_ENOTSUP, "%s: activation dtype %s is not supported (f32 or bf16)", op, dp_dtype_name(t));
}

static int need_sizes(const char *op, int64_t a, int64_t b, int64_t c) {
    if (a < 0 || b < 0 || c < 0) return dp_error_set(DP_EINVAL, "%s: negative size", op);
    return DP_OK;
}

static float *scratch_of(dp_device *dev, size_t *floats) { return dp_cuda_scratch(dev, floats); }

/* ---- embeddings ------------------------------------------------------------------------------ */

static int cuda_embedding_forward(dp_device *dev, dp_dtype t, dp_dtype wt, void *out, const int32_t *ids,
                                  const void *wte, const void *wpe, int64_t N, int64_t T, int64_t d) {
    DP_TRY(need_float(t, "embedding_forward"));
    DP_TRY(need_float(wt, "embedding_forward"));
    DP_TRY(need_sizes("embedding_forward", N, T, d));
    if (N > 0 && T <= 0) return dp_error_set(DP_EINVAL, "embedding_forward: T = %lld must be positive", (long long)T);
    return launched(dev, "embedding_forward",
                    dpk_embedding_forward(dp_cuda_stream(dev), (int)t, (int)wt, out, ids, wte, wpe, N, T, d));
}

static int cuda_embedding_backward(dp_device *dev, dp_dtype t, const void *dout, const int32_t *ids, float *dwte,
                                   float *dwpe, int64_t N, int64_t T, int64_t d, int64_t V) {
    DP_TRY(need_float(t, "embedding_backward"));
    DP_TRY(need_sizes("embedding_backward", N, T, d));
    if (N > 0 && (T <= 0 || N % T != 0))
        return dp_error_set(DP_EINVAL, "embedding_backward: N = %lld rows is not a multiple of T = %lld", (long long)N,
                            (long long)T);
    if (N > INT32_MAX)
        return dp_error_set(DP_EINVAL, "embedding_backward: N = %lld rows exceeds 2^31 - 1", (long long)N);
    return launched(dev, "embedding_backward",
                    dpk_embedding_backward(dp_cuda_stream(dev), (int)t, dout, ids, dwte, dwpe, N, T, d, V));
}

/* ---- LayerNorm and RMSNorm ------------------------------------------------------------------- */

static int cuda_layernorm_forward(dp_device *dev, dp_dtype t, void *out, float *mean, float *rstd, const void *x,
                                  const float *w, const float *b, int64_t N, int64_t d, float eps) {
    DP_TRY(need_float(t, "layernorm_forward"));
    DP_TRY(need_sizes("layernorm_forward", N, d, 0));
    return launched(dev, "layernorm_forward",
                    dpk_layernorm_forward(dp_cuda_stream(dev), (int)t, out, mean, rstd, x, w, b, N, d, eps));
}

static int cuda_layernorm_backward(dp_device *dev, dp_dtype t, void *dx, float *dw, float *db, const void *dout,
                                   const void *x, const float *w, const float *mean, const float *rstd, int64_t N,
                                   int64_t d, int accumulate) {
    DP_TRY(need_float(t, "layernorm_backward"));
    DP_TRY(need_sizes("layernorm_backward", N, d, 0));
    size_t nf;
    float *scratch = scratch_of(dev, &nf);
    return launched(dev, "layernorm_backward",
                    dpk_layernorm_backward(dp_cuda_stream(dev), (int)t, dx, dw, db, dout, x, w, mean, rstd, N, d,
                                           accumulate, scratch, nf));
}

static int cuda_rmsnorm_forward(dp_device *dev, dp_dtype t, void *out, float *rstd, const void *x, const float *w,
                                int64_t N, int64_t d, float eps) {
    DP_TRY(need_float(t, "rmsnorm_forward"));
    DP_TRY(need_sizes("rmsnorm_forward", N, d, 0));
    return launched(dev, "rmsnorm_forward",
                    dpk_rmsnorm_forward(dp_cuda_stream(dev), (int)t, out, rstd, x, w, N, d, eps));
}

static int cuda_rmsnorm_backward(dp_device *dev, dp_dtype t, void *dx, float *dw, const void *dout, const void *x,
                                 const float *w, const float *rstd, int64_t N, int64_t d, int accumulate) {
    DP_TRY(need_float(t, "rmsnorm_backward"));
    DP_TRY(need_sizes("rmsnorm_backward", N, d, 0));
    size_t nf;
    float *scratch = scratch_of(dev, &nf);
    return launched(
        dev, "rmsnorm_backward",
        dpk_rmsnorm_backward(dp_cuda_stream(dev), (int)t, dx, dw, dout, x, w, rstd, N, d, accumulate, scratch, nf));
}

/* ---- bias, GELU, SwiGLU ---------------------------------------------------------------------- */

static int cuda_bias_add(dp_device *dev, dp_dtype t, void *out, const float *bias, int64_t rows, int64_t cols) {
    DP_TRY(need_float(t, "bias_add"));
    DP_TRY(need_sizes("bias_add", rows, cols, 0));
    return launched(dev, "bias_add", dpk_bias_add(dp_cuda_stream(dev), (int)t, out, bias, rows, cols));
}

static int cuda_bias_backward(dp_device *dev, dp_dtype t, float *db, const void *g, int64_t rows, int64_t cols) {
    DP_TRY(need_float(t, "bias_backward"));
    DP_TRY(need_sizes("bias_backward", rows, cols, 0));
    size_t nf;
    float *scratch = scratch_of(dev, &nf);
    return launched(dev, "bias_backward",
                    dpk_bias_backward(dp_cuda_stream(dev), (int)t, db, g, rows, cols, scratch, nf));
}

static int cuda_gelu_forward(dp_device *dev, dp_dtype t, void *out, const void *x, int64_t n) {
    DP_TRY(need_float(t, "gelu_forward"));
    return launched(dev, "gelu_forward", dpk_gelu_forward(dp_cuda_stream(dev), (int)t, out, x, n));
}

static int cuda_gelu_backward(dp_device *dev, dp_dtype t, void *dx, const void *dout, const void *x, int64_t n,
                              int accumulate) {
    DP_TRY(need_float(t, "gelu_backward"));
    return launched(dev, "gelu_backward", dpk_gelu_backward(dp_cuda_stream(dev), (int)t, dx, dout, x, n, accumulate));
}

static int cuda_swiglu_forward(dp_device *dev, dp_dtype t, void *out, const void *gate, const void *up, int64_t n) {
    DP_TRY(need_float(t, "swiglu_forward"));
    return launched(dev, "swiglu_forward", dpk_swiglu_forward(dp_cuda_stream(dev), (int)t, out, gate, up, n));
}

static int cuda_swiglu_backward(dp_device *dev, dp_dtype t, void *dgate, void *dup, const void *dout, const void *gate,
                                const void *up, int64_t n) {
    DP_TRY(need_float(t, "swiglu_backward"));
    return launched(dev, "swiglu_backward",
                    dpk_swiglu_backward(dp_cuda_stream(dev), (int)t, dgate, dup, dout, gate, up, n));
}

/* ---- rotary embedding ------------------------------------------------------------------------ */

static int cuda_rope(dp_device *dev, dp_dtype t, void *x, int64_t ld, int64_t N, int64_t T, int64_t H, int64_t hd,
                     const float *inv_freq, float scale, int inverse) {
    DP_TRY(need_float(t, "rope"));
    DP_TRY(need_sizes("rope", N, H, hd));
    if (hd % 2) return dp_error_set(DP_EINVAL, "rope: head dimension %lld is odd", (long long)hd);
    if (N > 0 && T <= 0) return dp_error_set(DP_EINVAL, "rope: T = %lld must be positive", (long long)T);
    if (ld < H * hd)
        return dp_error_set(DP_EINVAL, "rope: row stride %lld is less than H*hd = %lld", (long long)ld,
                            (long long)(H * hd));
    if (hd / 2 > DPK_ROPE_MAX_PAIRS)
        return dp_error_set(DP_ENOTSUP, "rope: head dimension %lld exceeds %d on cuda", (long long)hd,
                            2 * DPK_ROPE_MAX_PAIRS);
    return launched(dev, "rope", dpk_rope(dp_cuda_stream(dev), (int)t, x, ld, N, T, H, hd, inv_freq, scale, inverse));
}

/* ---- attention ------------------------------------------------------------------------------- */

static int attention_check(const char *op, int64_t ld_q, int64_t ld_kv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                           int64_t hd) {
    DP_TRY(need_sizes(op, B, T, H));
    if (hd <= 0 || hd > 256)
        return dp_error_set(DP_ENOTSUP, "%s: head dimension %lld is not supported on cuda (1 to 256)", op,
                            (long long)hd);
    if (Hkv <= 0 || H % Hkv)
        return dp_error_set(DP_EINVAL, "%s: %lld query heads are not groups of %lld key/value heads", op, (long long)H,
                            (long long)Hkv);
    if (ld_q < H * hd || ld_kv < Hkv * hd)
        return dp_error_set(DP_EINVAL,
                            "%s: row strides %lld (q) and %lld (k, v) are less than H*hd = %lld and Hkv*hd = %lld", op,
                            (long long)ld_q, (long long)ld_kv, (long long)(H * hd), (long long)(Hkv * hd));
    if (B * H > 65535) return dp_error_set(DP_ENOTSUP, "%s: B*H = %lld exceeds 65535 on cuda", op, (long long)(B * H));
    if (B * T > INT32_MAX) return dp_error_set(DP_ENOTSUP, "%s: B*T = %lld exceeds 2^31 - 1", op, (long long)(B * T));
    return DP_OK;
}

static int cuda_attention_forward(dp_device *dev, dp_dtype t, void *out, float *lse, const void *q, const void *k,
                                  const void *v, int64_t ld_q, int64_t ld_kv, int64_t B, int64_t T, int64_t H,
                                  int64_t Hkv, int64_t hd, float scale) {
    DP_TRY(need_float(t, "attention_forward"));
    DP_TRY(attention_check("attention_forward", ld_q, ld_kv, B, T, H, Hkv, hd));
    return launched(
        dev, "attention_forward",
        dpk_attention_forward(dp_cuda_stream(dev), (int)t, out, lse, q, k, v, ld_q, ld_kv, B, T, H, Hkv, hd, scale));
}

static int cuda_attention_backward(dp_device *dev, dp_dtype t, void *dq, void *dk, void *dv, int64_t ld_dq,
                                   int64_t ld_dkv, const void *dout, const void *out, const float *lse, const void *q,
                                   const void *k, const void *v, int64_t ld_q, int64_t ld_kv, float *delta, int64_t B,
                                   int64_t T, int64_t H, int64_t Hkv, int64_t hd, float scale) {
    DP_TRY(need_float(t, "attention_backward"));
    DP_TRY(attention_check("attention_backward", ld_q, ld_kv, B, T, H, Hkv, hd));
    if (ld_dq < H * hd || ld_dkv < Hkv * hd)
        return dp_error_set(DP_EINVAL,
                            "attention_backward: gradient row strides %lld (dq) and %lld (dk, dv) are too small",
                            (long long)ld_dq, (long long)ld_dkv);
    return launched(dev, "attention_backward",
                    dpk_attention_backward(dp_cuda_stream(dev), (int)t, dq, dk, dv, ld_dq, ld_dkv, dout, out, lse, q, k,
                                           v, ld_q, ld_kv, delta, B, T, H, Hkv, hd, scale));
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

_Static_assert(DPK_IGNORE_INDEX == DP_IGNORE_INDEX, "the kernels' ignore index is the engine's");

static int ce_check(const char *op, int64_t N, int64_t V) {
    DP_TRY(need_sizes(op, N, V, 0));
    if (N > 0 && V <= 0) return dp_error_set(DP_EINVAL, "%s: vocabulary size %lld must be positive", op, (long long)V);
    if (N > INT32_MAX) return dp_error_set(DP_ENOTSUP, "%s: N = %lld rows exceeds 2^31 - 1", op, (long long)N);
    return DP_OK;
}

static int cuda_cross_entropy_forward(dp_device *dev, dp_dtype t, float *losses, float *lse, const void *logits,
                                      const int32_t *targets, int64_t N, int64_t V) {
    DP_TRY(need_float(t, "cross_entropy_forward"));
    DP_TRY(ce_check("cross_entropy_forward", N, V));
    return launched(dev, "cross_entropy_forward",
                    dpk_cross_entropy_forward(dp_cuda_stream(dev), (int)t, losses, lse, logits, targets, N, V));
}

static int cuda_cross_entropy_backward(dp_device *dev, dp_dtype t, void *logits, const float *lse,
                                       const int32_t *targets, const float *sample_scale, int64_t N, int64_t T,
                                       int64_t V) {
    DP_TRY(need_float(t, "cross_entropy_backward"));
    DP_TRY(ce_check("cross_entropy_backward", N, V));
    if (N > 0 && T <= 0)
        return dp_error_set(DP_EINVAL, "cross_entropy_backward: T = %lld must be positive", (long long)T);
    return launched(
        dev, "cross_entropy_backward",
        dpk_cross_entropy_backward(dp_cuda_stream(dev), (int)t, logits, lse, targets, sample_scale, N, T, V));
}

/* ---- optimizers ------------------------------------------------------------------------------ */

static int cuda_adamw_step(dp_device *dev, dp_dtype pt, void *p, const float *g, float *m, float *v, int64_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
    DP_TRY(need_float(pt, "adamw_step"));
    if (step < 1) return dp_error_set(DP_EINVAL, "adamw_step: step %lld (counts from 1)", (long long)step);
    return launched(
        dev, "adamw_step",
        dpk_adamw_step(dp_cuda_stream(dev), (int)pt, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step));
}

static int cuda_sgd_step(dp_device *dev, dp_dtype pt, void *p, const float *g, float *buf, int64_t n, float lr,
                         float momentum, float weight_decay, int first_step) {
    DP_TRY(need_float(pt, "sgd_step"));
    return launched(dev, "sgd_step",
                    dpk_sgd_step(dp_cuda_stream(dev), (int)pt, p, g, buf, n, lr, momentum, weight_decay, first_step));
}

const dp_layer_ops dp_cuda_layer_ops = {
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .bias_add = cuda_bias_add,
    .bias_backward = cuda_bias_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .rope = cuda_rope,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .cross_entropy_forward = cuda_cross_entropy_forward,
    .cross_entropy_backward = cuda_cross_entropy_backward,
    .adamw_step = cuda_adamw_step,
    .sgd_step = cuda_sgd_step,
};

#else
/* Built without CUDA: this file contributes nothing (ISO C needs one declaration). */
typedef int dp_cuda_layers_unused;
#endif
