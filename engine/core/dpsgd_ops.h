/* dpsgd_ops.h: the per-sample kernels of DP-SGD each backend implements (dev->ops->dpsgd points at
 * the table; call them through DPSGD_DISPATCH, dispatch.h).
 *
 * Conventions (cpu_dpsgd.c is the specification the CUDA kernels must match):
 * - A batch of B samples of T tokens: A (the input of a linear) is B x T x d, G (its output
 *   gradient) B x T x p, both row-major in the compute dtype `t` (f32 or bf16). Token ids are
 *   B x T i32. Everything computed here (Gram matrices, per-sample gradients, norms, partial
 *   sums) is f32, accumulated in f32 or better whatever `t` is.
 * - Squared norms go to out[i] for sample i (f32, B entries): written (accumulate = 0) or added
 *   (accumulate = 1), always times alpha (the square of a LoRA scale, 2 for a cross term).
 * - Every reduction is deterministic: a fixed partition that depends only on the sizes, f32
 *   partials in the backend's own scratch, added in a fixed order; no floating-point atomics.
 * - No entry allocates device memory through the tagged allocator: anything a kernel needs
 *   beyond its scratch partials (sort keys, Gram matrices) is passed in by dp code, which
 *   allocated it with the right category (device-independent, so plan allocates the same).
 * - The fused "flash" entries never hold a T x T matrix or a p x d per-sample gradient: they
 *   walk tiles of one, as a GEMM does, and keep only per-sample partial sums. Their flop counts
 *   are in the comments; dpsgd_flash.c records them in the ledger.
 * - Each returns DP_OK or a status with dp_error_set. */
#ifndef DPSGD_OPS_H
#define DPSGD_OPS_H

#include "dtype.h"

#include <stdint.h>

typedef struct dp_device dp_device;

/* Tile edge of the fused kernels (rows of a Gram tile, rows/columns of a gradient tile). The
 * flop counts of the fused entries assume the work of whole tiles. */
#define DPSGD_FLASH_TILE 128

typedef struct dpsgd_ops {
    /* out[i] (+)= alpha * sum_j x[i*n + j] * y[i*n + j] for i < B: the Frobenius product of two
     * per-sample matrices (ghost's <a a^T, g g^T>, the tied cross term). tx, ty: f32 or bf16. */
    int (*batched_dot)(dp_device *dev, int64_t B, int64_t n, dp_dtype tx, const void *x, dp_dtype ty, const void *y,
                       float alpha, float *out, int accumulate);
    /* out[i] (+)= alpha * sum_{s,t<T} gram[i,s,t] [ids[i,s] == ids[i,t]]: an embedding's ghost
     * norm, the token-equality mask applied on the fly to its f32 Gram matrix g g^T (B x T x T). */
    int (*gram_dot_masked)(dp_device *dev, int64_t B, int64_t T, const float *gram, const int32_t *ids, float alpha,
                           float *out, int accumulate);
    /* out[i, c] = sum_t g[i, t, c] for c < p: the per-sample gradients of a bias (B x p f32). */
    int (*token_sum)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t p, const void *g, float *out);
    /* Per-sample gradients of a norm layer's gain and bias (B x d f32 each):
     * dw[i, c] = sum_t g[i,t,c] xhat[i,t,c], db[i, c] = sum_t g[i,t,c] (db may be NULL), where
     * xhat = (x - mean) * rstd (LayerNorm) or x * rstd when mean is NULL (RMSNorm); mean and
     * rstd are the B*T statistics the forward saved. */
    int (*norm_grads)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, const void *x, const float *mean,
                      const float *rstd, const void *g, float *dw, float *db);
    /* x[i, j] *= c[i] for i < B, j < n, in place (f32 or bf16): per-sample clip factors applied
     * to a kept output gradient. */
    int (*scale_samples)(dp_device *dev, dp_dtype t, int64_t B, int64_t n, void *x, const float *c);
    /* keys[i, k] for k < T: sample i's tokens sorted by (id, position), packed as
     * ((uint64_t)id << 32) | t, ascending. Equal ids become adjacent runs. */
    int (*sort_ids)(dp_device *dev, int64_t B, int64_t T, const int32_t *ids, uint64_t *keys);
    /* out[i] (+)= alpha * sum over runs of equal id in keys[i, :] of ||sum_{t in run} g[i,t,:]||^2:
     * the squared norm of an embedding's per-sample gradient, equal ids grouped (O(B T d)). */
    int (*grouped_sumsq)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, const void *g,
                         const uint64_t *keys, float alpha, float *out, int accumulate);
    /* psg[i, ids[i,t], :] += alpha * g[i, t, :] for t < T in increasing order: adds an
     * embedding's use to dense per-sample gradients psg (B x V x d f32). */
    int (*scatter_rows)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                        const int32_t *ids, float alpha, float *psg);
    /* h[i, s, u] = g[i, s, ids[i, u]] for s, u < T (g: B x T x V, h: B x T x T, both dtype t): the
     * columns of a tied head's output gradient at the sample's token ids (ghost's cross term). */
    int (*gather_cols)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t V, const void *g, const int32_t *ids,
                       void *h);

    /* Flash, Gram-tile formulation: out[i] (+)= alpha * ||g_i^T a_i||^2 = alpha <a_i a_i^T, g_i g_i^T>,
     * walking the lower triangle of T x T in DPSGD_FLASH_TILE tiles (off-diagonal tiles count twice):
     * B * T(T+1) * (d+p) flops, no T x T matrix. a: B x T x d, g: B x T x p. */
    int (*gram_tile_sumsq)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                           const void *g, float alpha, float *out, int accumulate);
    /* Flash, gradient-tile formulation: out[i] (+)= alpha * ||g_i^T a_i||^2, forming the p x d
     * per-sample gradient one DPSGD_FLASH_TILE^2 tile at a time in registers and summing its squares:
     * 2 B T p d flops, no p x d buffer. */
    int (*grad_tile_sumsq)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                           const void *g, float alpha, float *out, int accumulate);
    /* Rows of a tied head's per-sample gradient at the sample's own ids, fused:
     * r[i, u, :] = sum_s g[i, s, ids[i, u]] a[i, s, :] (g: B x T x V, a: B x T x d, r: B x T x d
     * f32), i.e. (g_i^T a_i)[ids[i,u], :], as a tiled GEMM whose left operand is gathered on the
     * fly: 2 B T^2 d flops, no T x T matrix. */
    int (*tied_rows)(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                     const int32_t *ids, const void *a, float *r);
} dpsgd_ops;

#endif
