/* dp_kernels.h: C entry points of the DP kernels (dp_reduce.cu, dp_sort.cu, dp_flash.cu), the
 * CUDA side of engine/core/dpsgd_ops.h: see there for what each computes. Each launches on stream s and
 * returns the launch's cudaError_t. dtype codes as dp_dtype (0 f32, 1 bf16). Entries that reduce
 * take the backend's f32 scratch (scratch_elems floats) for their per-sample partials, which a
 * second kernel adds in a fixed order: no atomics, the same bits for the same sizes. */
#ifndef DPK_DP_KERNELS_H
#define DPK_DP_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] (+)= alpha sum_j x[i,j] y[i,j] (x, y: B x n of dtypes tx, ty). */
cudaError_t dpk_dp_batched_dot(cudaStream_t s, int64_t B, int64_t n, int tx, const void *x, int ty, const void *y,
                               float alpha, float *out, int accumulate, float *scratch, size_t scratch_elems);
/* out[i] (+)= alpha sum_{s,t} gram[i,s,t] [ids[i,s] == ids[i,t]]. */
cudaError_t dpk_dp_gram_dot_masked(cudaStream_t s, int64_t B, int64_t T, const float *gram, const int32_t *ids,
                                   float alpha, float *out, int accumulate, float *scratch, size_t scratch_elems);
/* out[i, c] = sum_t g[i, t, c]. */
cudaError_t dpk_dp_token_sum(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t p, const void *g, float *out);
/* dw[i, c] = sum_t g xhat, db[i, c] = sum_t g (db may be NULL; mean NULL: RMSNorm). */
cudaError_t dpk_dp_norm_grads(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, const void *x,
                              const float *mean, const float *rstd, const void *g, float *dw, float *db);
/* x[i, j] *= c[i]. */
cudaError_t dpk_dp_scale_samples(cudaStream_t s, int dtype, int64_t B, int64_t n, void *x, const float *c);
/* keys[i, :] = (id << 32 | t) of sample i sorted ascending. */
cudaError_t dpk_dp_sort_ids(cudaStream_t s, int64_t B, int64_t T, const int32_t *ids, uint64_t *keys);
/* out[i] (+)= alpha sum over runs of equal ids of ||sum of the run's rows of g||^2. */
cudaError_t dpk_dp_grouped_sumsq(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, const void *g,
                                 const uint64_t *keys, float alpha, float *out, int accumulate, float *scratch,
                                 size_t scratch_elems);
/* psg[i, ids[i,t], :] += alpha g[i, t, :], t in increasing order. */
cudaError_t dpk_dp_scatter_rows(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                                const int32_t *ids, float alpha, float *psg);
/* h[i, s, u] = g[i, s, ids[i, u]]. */
cudaError_t dpk_dp_gather_cols(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t V, const void *g,
                               const int32_t *ids, void *h);
/* Flash Gram tiles: out[i] (+)= alpha ||g_i^T a_i||^2 from the lower triangle of 128 x 128 tiles
 * of a_i a_i^T and g_i g_i^T (bf16: mma.sync tensor cores; f32: CUDA cores). */
cudaError_t dpk_dp_gram_tile_sumsq(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                                   const void *g, float alpha, float *out, int accumulate, float *scratch,
                                   size_t scratch_elems);
/* Flash gradient tiles: out[i] (+)= alpha ||g_i^T a_i||^2 from 128 x 128 tiles of g_i^T a_i. */
cudaError_t dpk_dp_grad_tile_sumsq(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                                   const void *g, float alpha, float *out, int accumulate, float *scratch,
                                   size_t scratch_elems);
/* r[i, u, :] = sum_s g[i, s, ids[i, u]] a[i, s, :] (r f32), the gathered operand loaded per tile. */
cudaError_t dpk_dp_tied_rows(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                             const int32_t *ids, const void *a, float *r);

/* Benchmarks only: selects the bf16 tile kernels' configurations. 0 (the default): 8 warps of
 * 64 x 32, K slices of 64, fragments double-buffered; 1: the same with K slices of 32; 2: gram
 * without fragment double-buffering, grad with 4 warps of 64 x 64; 3: gram with one accumulator
 * (a a^T stashed in shared memory, two blocks per SM), grad as 0. Not thread-safe; results agree
 * up to f32 summation order. */
void dpk_dp_flash_select(int gram, int grad);

#ifdef __cplusplus
}
#endif

#endif
