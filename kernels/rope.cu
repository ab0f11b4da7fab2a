/* rope.cu: rotary embedding in place, Hugging Face's rotate-half layout (layer_ops.h).
 *
 * One thread per pair (row n, head h, j < hd/2): x1 = x[j], x2 = x[j + hd/2] rotate by
 * angle = pos * inv_freq[j], pos = n % T. inv_freq[j] = theta^(-(2j)/hd) is computed once per
 * block into shared memory, in double and rounded to f32 (the correctly rounded value the CPU's
 * powf returns in nearly every case); the exponent, the product pos * inv_freq and the rotation
 * are separate f32 roundings as on the CPU, so only sinf/cosf (2 ulp here) differ.
 * Bytes: 2 N H hd es (each element read and written once). */
#include "layer_util.cuh"
#include "layers.h"

#define ROPE_THREADS 256
#define ROPE_MAX_BLOCKS 2048 /* grid-stride; keeps the per-block inv_freq table cheap */

template <typename T>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(T *x, int64_t ld, int64_t N, int64_t T_, int64_t H, int64_t hd, float theta, int inverse) {
    extern __shared__ float inv_freq[]; /* hd / 2 */
    const int64_t half = hd / 2;
    for (int64_t j = threadIdx.x; j < half; j += ROPE_THREADS) {
        const float e = -(float)(2 * j) / (float)hd;
        inv_freq[j] = (float)pow((double)theta, (double)e);
    }
    __syncthreads();
    const int64_t total = N * H * half, stride = (int64_t)gridDim.x * ROPE_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * ROPE_THREADS + threadIdx.x; i < total; i += stride) {
        const int64_t j = i % half, nh = i / half, h = nh % H, n = nh / H;
        const float angle = __fmul_rn((float)(n % T_), inv_freq[j]);
        float sn, cs;
        sincosf(angle, &sn, &cs);
        if (inverse) sn = -sn;
        T *p1 = x + n * ld + h * hd + j, *p2 = p1 + half;
        const float x1 = ldf(p1), x2 = ldf(p2);
        stf(p1, __fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn)));
        stf(p2, __fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn)));
    }
}

extern "C" cudaError_t dpk_rope(cudaStream_t s, int dtype, void *x, int64_t ld, int64_t N, int64_t T, int64_t H,
                                int64_t hd, float theta, int inverse) {
    if (N <= 0 || H <= 0 || hd <= 0) return cudaSuccess;
    if (T <= 0 || hd % 2 || ld < H * hd || hd / 2 > 12288) return cudaErrorInvalidValue;
    const size_t total = (size_t)(N * H * (hd / 2));
    unsigned blocks = dpk_blocks(total);
    if (blocks > ROPE_MAX_BLOCKS) blocks = ROPE_MAX_BLOCKS;
    const size_t smem = (size_t)(hd / 2) * sizeof(float);
    if (dtype == DPK_BF16)
        rope_kernel<bf16><<<blocks, ROPE_THREADS, smem, s>>>((bf16 *)x, ld, N, T, H, hd, theta, inverse);
    else
        rope_kernel<float><<<blocks, ROPE_THREADS, smem, s>>>((float *)x, ld, N, T, H, hd, theta, inverse);
    return cudaGetLastError();
}
