/* rope.cu: rotary embedding in place, Hugging Face's rotate-half layout (layer_ops.h).
 *
 * One warp per (row n, head h); each lane rotates pairs x1 = x[j], x2 = x[j + hd/2] (two
 * consecutive j at a time, 4- or 8-byte accesses, when hd % 4 == 0) by angle = pos * inv_freq[j],
 * pos = n % T. inv_freq[j] comes from the host (the model computes it once with its rope
 * scaling: engine/model/model_rope.c), passed as a kernel parameter and copied to shared memory;
 * cos and sin are scaled by yarn's attention factor (1 otherwise). The product pos * inv_freq,
 * the scales and the rotation are separate f32 roundings as on the CPU, so only sinf/cosf (2 ulp
 * here) differ. Bytes: 2 N H hd es (each element read and written once). */
#include "layer_util.cuh"
#include "layer_kernels.h"

#include <math.h>
#include <string.h>

#define ROPE_THREADS 256
#define ROPE_MAX_BLOCKS 4096 /* grid-stride; keeps the per-block inv_freq table cheap */

/* the rotation of one pair, rounded as on the CPU: x1 c - x2 s, x2 c + x1 s */
__device__ __forceinline__ void rotate(float &x1, float &x2, float cs, float sn) {
    const float a = __fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn));
    const float b = __fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn));
    x1 = a;
    x2 = b;
}

/* Two consecutive elements (4 bytes of bf16, 8 of f32; 2-element aligned). */
__device__ __forceinline__ void load2(const float *p, float &a, float &b) {
    const float2 v = *reinterpret_cast<const float2 *>(p);
    a = v.x, b = v.y;
}
__device__ __forceinline__ void load2(const bf16 *p, float &a, float &b) {
    const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162 *>(p);
    a = __low2float(v), b = __high2float(v);
}
__device__ __forceinline__ void store2(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(bf16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}

/* One warp per (row n, head h), rows = N H; lanes walk the pairs j < hd/2, two consecutive
 * pairs per lane with 2-element accesses when PAIRS2 (hd % 4 == 0, rows 2-element aligned). */
/* inv_freq[j] for hd / 2 <= DPK_ROPE_MAX_PAIRS, from the host: the angles are bit-identical to the
 * CPU's */
struct RopeTable {
    float inv_freq[DPK_ROPE_MAX_PAIRS];
};

/* (c, s) = (cos, sin)(angle) * scale, s negated for the inverse: the rounding points of layer_ops.h */
__device__ __forceinline__ void cos_sin(float angle, float scale, int inverse, float &c, float &s) {
    float sn, cs;
    sincosf(angle, &sn, &cs);
    c = __fmul_rn(cs, scale);
    s = __fmul_rn(sn, scale);
    if (inverse) s = -s;
}

template <typename T, bool PAIRS2>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(T *x, int64_t ld, int rows, int T_, int H, int hd, float scale, int inverse, RopeTable tab) {
    extern __shared__ float inv_freq[]; /* hd / 2 */
    const int half = hd / 2;
    for (int j = threadIdx.x; j < half; j += ROPE_THREADS) inv_freq[j] = tab.inv_freq[j];
    __syncthreads();
    const int lane = threadIdx.x & 31, warps = gridDim.x * (ROPE_THREADS / 32);
    for (int r = blockIdx.x * (ROPE_THREADS / 32) + (threadIdx.x >> 5); r < rows; r += warps) {
        const int n = r / H, h = r - n * H;
        const float pos = (float)(n % T_);
        T *p1 = x + (int64_t)n * ld + (int64_t)h * hd, *p2 = p1 + half;
        if (PAIRS2) {
            for (int j = 2 * lane; j < half; j += 64) {
                float a1, b1, a2, b2, s0, c0, s1, c1;
                load2(p1 + j, a1, b1);
                load2(p2 + j, a2, b2);
                cos_sin(__fmul_rn(pos, inv_freq[j]), scale, inverse, c0, s0);
                cos_sin(__fmul_rn(pos, inv_freq[j + 1]), scale, inverse, c1, s1);
                rotate(a1, a2, c0, s0);
                rotate(b1, b2, c1, s1);
                store2(p1 + j, a1, b1);
                store2(p2 + j, a2, b2);
            }
        } else {
            for (int j = lane; j < half; j += 32) {
                float x1 = ldf(p1 + j), x2 = ldf(p2 + j), sn, cs;
                cos_sin(__fmul_rn(pos, inv_freq[j]), scale, inverse, cs, sn);
                rotate(x1, x2, cs, sn);
                stf(p1 + j, x1);
                stf(p2 + j, x2);
            }
        }
    }
}

template <typename T>
static cudaError_t rope_t(cudaStream_t s, T *x, int64_t ld, int64_t N, int64_t T_, int64_t H, int64_t hd,
                          const float *inv_freq, float scale, int inverse) {
    const int64_t rows = N * H;
    unsigned blocks = (unsigned)((rows + ROPE_THREADS / 32 - 1) / (ROPE_THREADS / 32));
    if (blocks > ROPE_MAX_BLOCKS) blocks = ROPE_MAX_BLOCKS;
    const size_t smem = (size_t)(hd / 2) * sizeof(float);
    const bool pairs2 = hd % 4 == 0 && ld % 2 == 0 && ((uintptr_t)x % (2 * sizeof(T))) == 0;
    RopeTable tab;
    memset(&tab, 0, sizeof tab);
    memcpy(tab.inv_freq, inv_freq, (size_t)(hd / 2) * sizeof(float));
    if (pairs2)
        rope_kernel<T, true>
            <<<blocks, ROPE_THREADS, smem, s>>>(x, ld, (int)rows, (int)T_, (int)H, (int)hd, scale, inverse, tab);
    else
        rope_kernel<T, false>
            <<<blocks, ROPE_THREADS, smem, s>>>(x, ld, (int)rows, (int)T_, (int)H, (int)hd, scale, inverse, tab);
    return cudaGetLastError();
}

extern "C" cudaError_t dpk_rope(cudaStream_t s, int dtype, void *x, int64_t ld, int64_t N, int64_t T, int64_t H,
                                int64_t hd, const float *inv_freq, float scale, int inverse) {
    if (N <= 0 || H <= 0 || hd <= 0) return cudaSuccess;
    if (T <= 0 || hd % 2 || ld < H * hd || hd / 2 > DPK_ROPE_MAX_PAIRS || N * H > INT32_MAX || !inv_freq)
        return cudaErrorInvalidValue;
    if (dtype == DPK_BF16) return rope_t(s, (bf16 *)x, ld, N, T, H, hd, inv_freq, scale, inverse);
    return rope_t(s, (float *)x, ld, N, T, H, hd, inv_freq, scale, inverse);
}
