/* layer_util.cuh: device helpers shared by the layer kernels (kernels/layer_kernels.h): typed element
 * and 16-byte pack loads and stores (f32 or bf16, widened to f32), deterministic warp and block
 * sums, and the deterministic column reduction (per-chunk partials in scratch, then added in
 * chunk order) behind the bias and norm weight gradients. */
#ifndef DPK_LAYER_UTIL_CUH
#define DPK_LAYER_UTIL_CUH

#include "common.cuh"

#include <stdint.h>

typedef __nv_bfloat16 bf16;

/* ---- scalar loads and stores, f32 arithmetic --------------------------------------------- */

__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* ---- 16-byte packs: 4 floats or 8 bf16 ---------------------------------------------------- */

template <typename T> struct Pack;
template <> struct Pack<float> { static constexpr int N = 4; };
template <> struct Pack<bf16> { static constexpr int N = 8; };

__device__ __forceinline__ void load_pack(const float *p, float (&v)[4]) {
    float4 f = *reinterpret_cast<const float4 *>(p);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}
__device__ __forceinline__ void load_pack(const bf16 *p, float (&v)[8]) {
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[2 * i] = __uint_as_float(w[i] << 16);             /* low half: the lower address */
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u); /* high half */
    }
}
__device__ __forceinline__ void store_pack(float *p, const float (&v)[4]) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* .x (lo) at the lower address */
    return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ void store_pack(bf16 *p, const float (&v)[8]) {
    uint4 u;
    u.x = pack_bf16x2(v[0], v[1]);
    u.y = pack_bf16x2(v[2], v[3]);
    u.z = pack_bf16x2(v[4], v[5]);
    u.w = pack_bf16x2(v[6], v[7]);
    *reinterpret_cast<uint4 *>(p) = u;
}

/* 4 consecutive f32 parameters (p 16-byte aligned). */
__device__ __forceinline__ void load4(const float *p, float *v) {
    float4 f = *reinterpret_cast<const float4 *>(p);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}

/* 2^x by the hardware's ex2.approx (about 2 ulp; results below 2^-126 flush to 0; -inf -> 0):
 * one instruction where exp2f/expf take a dozen, for softmax-style exponentials. */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static inline bool dpk_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- deterministic sums: fixed butterfly and fixed warp order ----------------------------- */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
 * result. `red` is 32 floats of shared memory; the call starts and ends with a barrier, so
 * it can be called repeatedly with the same buffer. */
__device__ __forceinline__ float block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < nwarps; w++) s += red[w]; /* same order in every thread */
    return s;
}

/* ---- deterministic column sums ------------------------------------------------------------- *
 * dst[j] += sum over rows r of f(r, j), for the bias gradient (f = g), LayerNorm's (dw: g xhat,
 * db: g) and RMSNorm's (dw: g x rstd). Rows are cut into `chunks` fixed chunks; block (column
 * tile of 32, chunk) has 8 row lanes that each walk their rows of the chunk in order, the 8
 * lane sums are added in lane order, and the chunk partial goes to scratch[chunk][col]; a second
 * kernel adds the partials of a column in chunk order. The partition depends only on N, d and
 * the scratch size, so results are reproducible run to run. */

enum { COLSUM_BIAS = 0, COLSUM_LAYERNORM = 1, COLSUM_RMSNORM = 2 };

#define COLSUM_TX 32
#define COLSUM_TY 8

/* Columns [j0, j0 + width) of an N x d matrix; partial sums for output o (0: dw or db of the
 * bias, 1: db of LayerNorm) at part[(o * chunks + chunk) * width + (j - j0)]. */
template <typename T, int MODE>
__global__ void __launch_bounds__(COLSUM_TX *COLSUM_TY)
    colsum_partials_kernel(const T *__restrict__ g, const T *__restrict__ x, const float *__restrict__ mean,
                           const float *__restrict__ rstd, int64_t N, int64_t d, int64_t j0, int64_t width,
                           int64_t rows_per_chunk, int chunks, float *__restrict__ part) {
    constexpr int OUTS = MODE == COLSUM_LAYERNORM ? 2 : 1;
    __shared__ float red[OUTS][COLSUM_TY][COLSUM_TX + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t jl = (int64_t)blockIdx.x * COLSUM_TX + tx, j = j0 + jl;
    const int chunk = blockIdx.y;
    const int64_t r0 = (int64_t)chunk * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float a0 = 0.0f, a1 = 0.0f;
    if (jl < width) {
        for (int64_t r = r0 + ty; r < r1; r += COLSUM_TY) {
            const float gv = ldf(g + r * d + j);
            if (MODE == COLSUM_BIAS) {
                a0 += gv;
            } else if (MODE == COLSUM_LAYERNORM) {
                const float xh = (ldf(x + r * d + j) - mean[r]) * rstd[r];
                a0 += gv * xh;
                a1 += gv;
            } else {
                a0 += gv * (ldf(x + r * d + j) * rstd[r]);
            }
        }
    }
    red[0][ty][tx] = a0;
    if (OUTS == 2) red[OUTS - 1][ty][tx] = a1;
    __syncthreads();
    if (ty < OUTS && jl < width) {
        float s = 0.0f;
        for (int k = 0; k < COLSUM_TY; k++) s += red[ty][k][tx];
        part[((int64_t)ty * chunks + chunk) * width + jl] = s;
    }
}

/* dst[o][j0 + jl] += sum over chunks c in order of part[(o * chunks + c) * width + jl]; a NULL
 * destination is skipped. */
static __global__ void colsum_finish_kernel(const float *__restrict__ part, int chunks, int64_t width, int64_t j0,
                                            float *dst0, float *dst1) {
    const int64_t jl = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int o = blockIdx.y;
    float *dst = o == 0 ? dst0 : dst1;
    if (jl >= width || !dst) return;
    float s = 0.0f;
    for (int c = 0; c < chunks; c++) s += part[((int64_t)o * chunks + c) * width + jl];
    dst[j0 + jl] += s;
}

/* Launches the two kernels over column slabs that fit the scratch (scratch_floats >= 64). */
template <typename T, int MODE>
static cudaError_t colsum_launch(cudaStream_t s, const T *g, const T *x, const float *mean, const float *rstd,
                                 int64_t N, int64_t d, float *dst0, float *dst1, float *scratch,
                                 size_t scratch_floats) {
    constexpr int OUTS = MODE == COLSUM_LAYERNORM ? 2 : 1;
    if (N <= 0 || d <= 0) return cudaSuccess;
    if (scratch_floats < (size_t)OUTS * COLSUM_TX) return cudaErrorInvalidValue;
    int64_t width = d;
    if ((size_t)(OUTS * width) > scratch_floats) width = (int64_t)(scratch_floats / OUTS) / COLSUM_TX * COLSUM_TX;
    for (int64_t j0 = 0; j0 < d; j0 += width) {
        const int64_t w = d - j0 < width ? d - j0 : width;
        int64_t chunks = (N + 31) / 32; /* at least 32 rows (4 per row lane) per chunk */
        const int64_t fit = (int64_t)(scratch_floats / (size_t)(OUTS * w));
        if (chunks > fit) chunks = fit;
        if (chunks > 1024) chunks = 1024;
        if (chunks < 1) chunks = 1;
        const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
        chunks = (N + rows_per_chunk - 1) / rows_per_chunk; /* no empty chunk */
        dim3 grid((unsigned)((w + COLSUM_TX - 1) / COLSUM_TX), (unsigned)chunks);
        colsum_partials_kernel<T, MODE><<<grid, dim3(COLSUM_TX, COLSUM_TY), 0, s>>>(
            g, x, mean, rstd, N, d, j0, w, rows_per_chunk, (int)chunks, scratch);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        dim3 fgrid((unsigned)((w + 255) / 256), (unsigned)OUTS);
        colsum_finish_kernel<<<fgrid, 256, 0, s>>>(scratch, (int)chunks, w, j0, dst0, dst1);
        e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

#endif
