/* cuda_dpsgd.c: the CUDA DP table (dpsgd_ops.h). Each entry checks the dtypes the kernels take,
 * launches on the backend's stream with the backend's scratch for partial sums, and turns a
 * launch error into DP_EDEVICE naming the op. The kernels are kernels/dp_*.cu. */
#ifdef DPPROF_HAVE_CUDA

#include "cuda_dpsgd.h"

#include "cuda_stream.h"
#include "device.h"
#include "error.h"

#include "dp_kernels.h"

static int launched(cudaError_t e, const char *op) {
    if (e == cudaSuccess) return DP_OK;
    return dp_error_set(DP_EDEVICE, "dp op %s failed on cuda: %s", op, cudaGetErrorString(e));
}

static int need_float(dp_dtype t, const char *op) {
    if (t == DP_F32 || t == DP_BF16) return DP_OK;
    return dp_error_set(DP_ENOTSUP, "%s: dtype %s is not supported (f32 or bf16)", op, dp_dtype_name(t));
}

static int cuda_batched_dot(dp_device *dev, int64_t B, int64_t n, dp_dtype tx, const void *x, dp_dtype ty,
                            const void *y, float alpha, float *out, int accumulate) {
    DP_TRY(need_float(tx, "batched_dot"));
    DP_TRY(need_float(ty, "batched_dot"));
    size_t elems;
    float *scratch = dp_cuda_scratch(dev, &elems);
    return launched(
        dpk_dp_batched_dot(dp_cuda_stream(dev), B, n, (int)tx, x, (int)ty, y, alpha, out, accumulate, scratch, elems),
        "batched_dot");
}

static int cuda_gram_dot_masked(dp_device *dev, int64_t B, int64_t T, const float *gram, const int32_t *ids,
                                float alpha, float *out, int accumulate) {
    size_t elems;
    float *scratch = dp_cuda_scratch(dev, &elems);
    return launched(
        dpk_dp_gram_dot_masked(dp_cuda_stream(dev), B, T, gram, ids, alpha, out, accumulate, scratch, elems),
        "gram_dot_masked");
}

static int cuda_token_sum(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t p, const void *g, float *out) {
    DP_TRY(need_float(t, "token_sum"));
    return launched(dpk_dp_token_sum(dp_cuda_stream(dev), (int)t, B, T, p, g, out), "token_sum");
}

static int cuda_norm_grads(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, const void *x,
                           const float *mean, const float *rstd, const void *g, float *dw, float *db) {
    DP_TRY(need_float(t, "norm_grads"));
    return launched(dpk_dp_norm_grads(dp_cuda_stream(dev), (int)t, B, T, d, x, mean, rstd, g, dw, db), "norm_grads");
}

static int cuda_scale_samples(dp_device *dev, dp_dtype t, int64_t B, int64_t n, void *x, const float *c) {
    DP_TRY(need_float(t, "scale_samples"));
    return launched(dpk_dp_scale_samples(dp_cuda_stream(dev), (int)t, B, n, x, c), "scale_samples");
}

static int cuda_sort_ids(dp_device *dev, int64_t B, int64_t T, const int32_t *ids, uint64_t *keys) {
    return launched(dpk_dp_sort_ids(dp_cuda_stream(dev), B, T, ids, keys), "sort_ids");
}

static int cuda_grouped_sumsq(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, const void *g,
                              const uint64_t *keys, float alpha, float *out, int accumulate) {
    DP_TRY(need_float(t, "grouped_sumsq"));
    size_t elems;
    float *scratch = dp_cuda_scratch(dev, &elems);
    return launched(
        dpk_dp_grouped_sumsq(dp_cuda_stream(dev), (int)t, B, T, d, g, keys, alpha, out, accumulate, scratch, elems),
        "grouped_sumsq");
}

static int cuda_scatter_rows(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                             const int32_t *ids, float alpha, float *psg) {
    DP_TRY(need_float(t, "scatter_rows"));
    return launched(dpk_dp_scatter_rows(dp_cuda_stream(dev), (int)t, B, T, d, V, g, ids, alpha, psg), "scatter_rows");
}

static int cuda_gather_cols(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t V, const void *g,
                            const int32_t *ids, void *h) {
    DP_TRY(need_float(t, "gather_cols"));
    return launched(dpk_dp_gather_cols(dp_cuda_stream(dev), (int)t, B, T, V, g, ids, h), "gather_cols");
}

static int cuda_gram_tile_sumsq(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                                const void *g, float alpha, float *out, int accumulate) {
    DP_TRY(need_float(t, "gram_tile_sumsq"));
    size_t elems;
    float *scratch = dp_cuda_scratch(dev, &elems);
    return launched(
        dpk_dp_gram_tile_sumsq(dp_cuda_stream(dev), (int)t, B, T, d, p, a, g, alpha, out, accumulate, scratch, elems),
        "gram_tile_sumsq");
}

static int cuda_grad_tile_sumsq(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                                const void *g, float alpha, float *out, int accumulate) {
    DP_TRY(need_float(t, "grad_tile_sumsq"));
    size_t elems;
    float *scratch = dp_cuda_scratch(dev, &elems);
    return launched(
        dpk_dp_grad_tile_sumsq(dp_cuda_stream(dev), (int)t, B, T, d, p, a, g, alpha, out, accumulate, scratch, elems),
        "grad_tile_sumsq");
}

static int cuda_tied_rows(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                          const int32_t *ids, const void *a, float *r) {
    DP_TRY(need_float(t, "tied_rows"));
    return launched(dpk_dp_tied_rows(dp_cuda_stream(dev), (int)t, B, T, d, V, g, ids, a, r), "tied_rows");
}

const dpsgd_ops dpsgd_cuda_ops = {
    .batched_dot = cuda_batched_dot,
    .gram_dot_masked = cuda_gram_dot_masked,
    .token_sum = cuda_token_sum,
    .norm_grads = cuda_norm_grads,
    .scale_samples = cuda_scale_samples,
    .sort_ids = cuda_sort_ids,
    .grouped_sumsq = cuda_grouped_sumsq,
    .scatter_rows = cuda_scatter_rows,
    .gather_cols = cuda_gather_cols,
    .gram_tile_sumsq = cuda_gram_tile_sumsq,
    .grad_tile_sumsq = cuda_grad_tile_sumsq,
    .tied_rows = cuda_tied_rows,
};

#else
typedef int dp_cuda_dp_unused; /* ISO C: a translation unit declares something */
#endif
