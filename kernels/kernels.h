/* kernels.h: C entry points of the CUDA kernels. Each launches on the given stream and returns
 * the launch's cudaError_t. Kernels know nothing of the engine: they take raw pointers, counts
 * and dtype codes (0 f32, 1 bf16, 2 i32, as dp_dtype). */
#ifndef DPK_KERNELS_H
#define DPK_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[i] = value for i < n (f32 and bf16 take fvalue, i32 takes ivalue). */
cudaError_t dpk_fill(cudaStream_t s, int dtype, void *x, size_t n, float fvalue, int32_t ivalue);
/* x[i] (+)= Philox uniform a + (b-a)u or normal a + b z of element offset+i, then x[i] *= post
 * unless post is 1; bit-identical to the CPU backend (common/philox.h). */
cudaError_t dpk_rand(cudaStream_t s, int dtype, void *x, size_t n, int normal, float a, float b, uint64_t seed,
                     uint64_t stream, uint64_t offset, int accumulate, float post);
/* dst[i] = src[i] converted between f32 and bf16 (round to nearest even). */
cudaError_t dpk_cast(cudaStream_t s, int dst_dtype, void *dst, int src_dtype, const void *src, size_t n);
/* out[i] = x[i] + y[i]. */
cudaError_t dpk_add(cudaStream_t s, int dtype, size_t n, const void *x, const void *y, void *out);
/* x[i] *= alpha. */
cudaError_t dpk_scale(cudaStream_t s, int dtype, size_t n, void *x, float alpha);
/* y[i] += alpha x[i]. */
cudaError_t dpk_axpy(cudaStream_t s, int dtype, size_t n, float alpha, const void *x, void *y);
/* out[r] (+)= sum_c x[r, c]^2, deterministic: a fixed split of each row into parts whose f32
 * partials go to scratch (scratch_elems floats) and are added in order. */
cudaError_t dpk_sumsq_rows(cudaStream_t s, int dtype, size_t rows, size_t cols, const void *x, float *out,
                           int accumulate, float *scratch, size_t scratch_elems);

#ifdef __cplusplus
}
#endif

#endif
