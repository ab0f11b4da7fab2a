/* dp_common.cuh: pieces shared by the DP kernels: a deterministic block sum and the kernel that
 * adds per-sample partials in order. */
#ifndef DPK_DP_COMMON_CUH
#define DPK_DP_COMMON_CUH

#include "common.cuh"

namespace dpk_dp {
namespace { /* each .cu gets its own copy */

/* Sum of v over a block of NT threads (a multiple of 32), in a fixed tree order; the result is
 * valid in thread 0. Uses NT/32 floats of shared memory; ends with the block synchronised. */
template <int NT> __device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[NT / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* warp_sums may still be read by a previous call */
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = 0.0f;
    if (warp == 0) {
        v = lane < NT / 32 ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

/* out[b0 + i] (+)= alpha * sum_k partial[i * parts + k] (k in order, in double) for i < nb. */
__global__ void finish_partials(int64_t nb, int64_t parts, const float *partial, float alpha, float *out,
                                int accumulate) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nb; i += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t k = 0; k < parts; k++) s += partial[i * parts + k];
        double v = (double)alpha * s;
        out[i] = (float)(accumulate ? (double)out[i] + v : v);
    }
}

/* Samples per launch so that nb * parts partials fit in the scratch (at least 1). */
static inline int64_t samples_per_launch(int64_t B, int64_t parts, size_t scratch_elems) {
    int64_t nb = (int64_t)(scratch_elems / (size_t)(parts > 0 ? parts : 1));
    if (nb > B) nb = B;
    if (nb > 65535) nb = 65535; /* grid.y */
    return nb > 0 ? nb : 1;
}

static inline cudaError_t launch_finish(cudaStream_t s, int64_t nb, int64_t parts, const float *partial, float alpha,
                                        float *out, int accumulate) {
    finish_partials<<<dpk_blocks((size_t)nb), 256, 0, s>>>(nb, parts, partial, alpha, out, accumulate);
    return cudaGetLastError();
}

} // namespace
} // namespace dpk_dp

#endif
