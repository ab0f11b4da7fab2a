/* norm.cu: LayerNorm and RMSNorm, forward and backward.
 *
 * A row of d is held by a group of threads: one warp (8 rows per 256-thread block) when the
 * row fits 32 floats per lane, else the whole 256-thread block. Each thread caches its 16-byte
 * packs of the row in registers (at most 32 floats per tensor), so x is read once: forward
 * reads x and writes out (2 N d es bytes plus 8 N of statistics); the input-gradient kernel
 * reads x and dout (and dx when accumulating) and writes dx. Rows whose pointers or length do
 * not allow 16-byte packs take a generic block-per-row kernel that re-reads the row from L1/L2.
 * Statistics are f32 sums in a fixed butterfly order; rstd = 1/sqrt(var + eps) in IEEE f32.
 *
 * Weight and bias gradients are column sums over the N rows, done by the deterministic
 * two-kernel reduction of layer_util.cuh (fixed row chunks, partials in scratch, added in
 * chunk order). It runs before the dx kernel, so dx may alias dout. */
#include "layer_util.cuh"
#include "layer_kernels.h"

#define NORM_THREADS 256

/* Sum over a row group: a warp (GROUP 32) or the whole block. */
template <int GROUP> __device__ __forceinline__ float group_sum(float v, float *red) {
    if (GROUP == 32) return warp_sum(v);
    return block_sum(v, red);
}

template <int GROUP> __device__ __forceinline__ int64_t group_row() {
    return GROUP == 32 ? (int64_t)blockIdx.x * (NORM_THREADS / 32) + (threadIdx.x >> 5) : (int64_t)blockIdx.x;
}

template <int GROUP> __device__ __forceinline__ int group_lane() {
    return GROUP == 32 ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
}

/* VEC consecutive f32 parameters starting at p (16-byte aligned, VEC 4 or 8). */
template <int VEC> __device__ __forceinline__ void load_params(const float *p, float (&v)[VEC]) {
#pragma unroll
    for (int e = 0; e < VEC; e += 4) load4(p + e, v + e);
}

/* IEEE f32 division and square root (within an ulp of the CPU's double formula, without
 * double-precision subroutine calls) */
__device__ __forceinline__ float rstd_of(float sum, int64_t d, float eps) { return 1.0f / sqrtf(sum / (float)d + eps); }

/* ---- forward ------------------------------------------------------------------------------- */

template <typename T, int GROUP, int MAXP, bool RMS>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_forward_kernel(T *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                        const T *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int64_t N,
                        int64_t d, float eps) {
    constexpr int VEC = Pack<T>::N;
    __shared__ float red[32];
    const int64_t row = group_row<GROUP>();
    if (row >= N) return; /* a whole warp (GROUP 32) or the whole block */
    const int gl = group_lane<GROUP>();
    const int np = (int)(d / VEC);
    const T *xr = x + row * d;
    float v[MAXP][VEC];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXP; k++) {
        const int p = gl + k * GROUP;
        if (p < np) {
            load_pack(xr + (int64_t)p * VEC, v[k]);
#pragma unroll
            for (int e = 0; e < VEC; e++) s += v[k][e];
        } else {
#pragma unroll
            for (int e = 0; e < VEC; e++) v[k][e] = 0.0f;
        }
    }
    float mu = 0.0f;
    if (!RMS) mu = group_sum<GROUP>(s, red) / (float)d;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXP; k++) {
        if (gl + k * GROUP < np) {
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const float c = v[k][e] - mu;
                q += c * c;
            }
        }
    }
    const float rs = rstd_of(group_sum<GROUP>(q, red), d, eps);
    T *orow = out + row * d;
#pragma unroll
    for (int k = 0; k < MAXP; k++) {
        const int p = gl + k * GROUP;
        if (p < np) {
            float wv[VEC], bv[VEC], o[VEC];
            load_params<VEC>(w + (int64_t)p * VEC, wv);
            if (!RMS) load_params<VEC>(b + (int64_t)p * VEC, bv);
#pragma unroll
            for (int e = 0; e < VEC; e++) o[e] = RMS ? v[k][e] * rs * wv[e] : (v[k][e] - mu) * rs * wv[e] + bv[e];
            store_pack(orow + (int64_t)p * VEC, o);
        }
    }
    if (gl == 0) {
        if (!RMS) mean[row] = mu;
        rstd[row] = rs;
    }
}

/* Any d and alignment: one block per row, scalar loads, the row re-read from cache. */
template <typename T, bool RMS>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_forward_generic_kernel(T *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                                const T *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
                                int64_t N, int64_t d, float eps) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const T *xr = x + row * d;
    float s = 0.0f;
    if (!RMS)
        for (int64_t j = threadIdx.x; j < d; j += NORM_THREADS) s += ldf(xr + j);
    const float mu = RMS ? 0.0f : block_sum(s, red) / (float)d;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += NORM_THREADS) {
        const float c = ldf(xr + j) - mu;
        q += c * c;
    }
    const float rs = rstd_of(block_sum(q, red), d, eps);
    for (int64_t j = threadIdx.x; j < d; j += NORM_THREADS) {
        const float xv = ldf(xr + j);
        stf(out + row * d + j, RMS ? xv * rs * w[j] : (xv - mu) * rs * w[j] + b[j]);
    }
    if (threadIdx.x == 0) {
        if (!RMS) mean[row] = mu;
        rstd[row] = rs;
    }
}

/* ---- backward: input gradient ---------------------------------------------------------------
 * g = dout * w, xhat = (x - mean) rstd (RMS: x rstd);
 * dx (+)= rstd (g - mean_j(g) - xhat mean_j(g xhat)) (RMS: no mean_j(g) term). */

template <typename T, int GROUP, int MAXP, bool RMS>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_backward_dx_kernel(T *dx, const T *dout, const T *__restrict__ x, const float *__restrict__ w,
                            const float *__restrict__ mean, const float *__restrict__ rstd, int64_t N, int64_t d,
                            int accumulate) {
    constexpr int VEC = Pack<T>::N;
    __shared__ float red[32];
    const int64_t row = group_row<GROUP>();
    if (row >= N) return;
    const int gl = group_lane<GROUP>();
    const int np = (int)(d / VEC);
    const float mu = RMS ? 0.0f : mean[row], rs = rstd[row];
    float xh[MAXP][VEC], g[MAXP][VEC]; /* xhat and dout * w */
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXP; k++) {
        const int p = gl + k * GROUP;
        if (p < np) {
            float wv[VEC];
            load_pack(x + row * d + (int64_t)p * VEC, xh[k]);
            load_pack(dout + row * d + (int64_t)p * VEC, g[k]);
            load_params<VEC>(w + (int64_t)p * VEC, wv);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                xh[k][e] = (xh[k][e] - mu) * rs;
                g[k][e] *= wv[e];
                sg += g[k][e];
                sgx += g[k][e] * xh[k][e];
            }
        }
    }
    const float mg = RMS ? 0.0f : group_sum<GROUP>(sg, red) / (float)d;
    const float mgx = group_sum<GROUP>(sgx, red) / (float)d;
#pragma unroll
    for (int k = 0; k < MAXP; k++) {
        const int p = gl + k * GROUP;
        if (p < np) {
            T *dp = dx + row * d + (int64_t)p * VEC;
            float o[VEC], old[VEC];
            if (accumulate) load_pack(dp, old);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                o[e] = (g[k][e] - mg - xh[k][e] * mgx) * rs;
                if (accumulate) o[e] += old[e];
            }
            store_pack(dp, o);
        }
    }
}

template <typename T, bool RMS>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_backward_dx_generic_kernel(T *dx, const T *dout, const T *__restrict__ x, const float *__restrict__ w,
                                    const float *__restrict__ mean, const float *__restrict__ rstd, int64_t N,
                                    int64_t d, int accumulate) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x, o = row * d;
    const float mu = RMS ? 0.0f : mean[row], rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += NORM_THREADS) {
        const float xh = (ldf(x + o + j) - mu) * rs, g = ldf(dout + o + j) * w[j];
        sg += g;
        sgx += g * xh;
    }
    const float mg = RMS ? 0.0f : block_sum(sg, red) / (float)d;
    const float mgx = block_sum(sgx, red) / (float)d;
    /* each element is read and then written by the same thread: dx may alias dout */
    for (int64_t j = threadIdx.x; j < d; j += NORM_THREADS) {
        const float xh = (ldf(x + o + j) - mu) * rs, g = ldf(dout + o + j) * w[j];
        float v = (g - mg - xh * mgx) * rs;
        if (accumulate) v += ldf(dx + o + j);
        stf(dx + o + j, v);
    }
}

/* ---- dispatch ------------------------------------------------------------------------------ */

/* The row layout: group (32 or 256 threads) and packs per thread, or 0 for the generic kernel. */
struct NormPlan {
    int group, maxp;
};

template <typename T> static NormPlan norm_plan(int64_t d, bool aligned) {
    constexpr int VEC = Pack<T>::N, MAXW = 32 / VEC; /* packs per thread in 32 floats */
    NormPlan pl = {0, 0};
    if (!aligned || d % VEC != 0) return pl;
    const int64_t np = d / VEC;
    for (int group = 32; group <= NORM_THREADS; group *= 8) /* 32, then 256 */
        for (int m = 1; m <= MAXW; m *= 2)
            if (np <= (int64_t)group * m) {
                pl.group = group;
                pl.maxp = m;
                return pl;
            }
    return pl;
}

static unsigned norm_blocks(int group, int64_t N) {
    return group == 32 ? (unsigned)((N + NORM_THREADS / 32 - 1) / (NORM_THREADS / 32)) : (unsigned)N;
}

#define NORM_CASES(GROUP, LAUNCH)                                                                                      \
    case GROUP * 10 + 1: LAUNCH(GROUP, 1); break;                                                                      \
    case GROUP * 10 + 2: LAUNCH(GROUP, 2); break;                                                                      \
    case GROUP * 10 + 4: LAUNCH(GROUP, 4); break;                                                                      \
    case GROUP * 10 + 8: LAUNCH(GROUP, (Pack<T>::N == 4 ? 8 : 4)); break;

template <typename T, bool RMS>
static cudaError_t norm_forward_t(cudaStream_t s, T *out, float *mean, float *rstd, const T *x, const float *w,
                                  const float *b, int64_t N, int64_t d, float eps) {
    const bool aligned = dpk_aligned16(out) && dpk_aligned16(x) && dpk_aligned16(w) && (RMS || dpk_aligned16(b));
    const NormPlan pl = norm_plan<T>(d, aligned);
#define NORM_FWD(GROUP, MAXP)                                                                                          \
    norm_forward_kernel<T, GROUP, MAXP, RMS>                                                                           \
        <<<norm_blocks(GROUP, N), NORM_THREADS, 0, s>>>(out, mean, rstd, x, w, b, N, d, eps)
    switch (pl.group * 10 + pl.maxp) {
        NORM_CASES(32, NORM_FWD)
        NORM_CASES(256, NORM_FWD)
    default:
        norm_forward_generic_kernel<T, RMS><<<(unsigned)N, NORM_THREADS, 0, s>>>(out, mean, rstd, x, w, b, N, d, eps);
    }
#undef NORM_FWD
    return cudaGetLastError();
}

template <typename T, bool RMS>
static cudaError_t norm_backward_t(cudaStream_t s, T *dx, float *dw, float *db, const T *dout, const T *x,
                                   const float *w, const float *mean, const float *rstd, int64_t N, int64_t d,
                                   int accumulate, float *scratch, size_t scratch_floats) {
    /* column sums first: they read dout, which dx may overwrite */
    if (dw || db) {
        cudaError_t e =
            RMS ? colsum_launch<T, COLSUM_RMSNORM>(s, dout, x, mean, rstd, N, d, dw, NULL, scratch, scratch_floats)
                : colsum_launch<T, COLSUM_LAYERNORM>(s, dout, x, mean, rstd, N, d, dw, db, scratch, scratch_floats);
        if (e != cudaSuccess) return e;
    }
    const bool aligned = dpk_aligned16(dx) && dpk_aligned16(dout) && dpk_aligned16(x) && dpk_aligned16(w);
    const NormPlan pl = norm_plan<T>(d, aligned);
    /* the packs of x and dout: 2 x 8 x VEC floats per thread at most (MAXP 8 only for f32) */
#define NORM_BWD(GROUP, MAXP)                                                                                          \
    norm_backward_dx_kernel<T, GROUP, MAXP, RMS>                                                                       \
        <<<norm_blocks(GROUP, N), NORM_THREADS, 0, s>>>(dx, dout, x, w, mean, rstd, N, d, accumulate)
    switch (pl.group * 10 + pl.maxp) {
        NORM_CASES(32, NORM_BWD)
        NORM_CASES(256, NORM_BWD)
    default:
        norm_backward_dx_generic_kernel<T, RMS>
            <<<(unsigned)N, NORM_THREADS, 0, s>>>(dx, dout, x, w, mean, rstd, N, d, accumulate);
    }
#undef NORM_BWD
    return cudaGetLastError();
}

extern "C" cudaError_t dpk_layernorm_forward(cudaStream_t s, int dtype, void *out, float *mean, float *rstd,
                                             const void *x, const float *w, const float *b, int64_t N, int64_t d,
                                             float eps) {
    if (N <= 0 || d <= 0) return cudaSuccess;
    if (dtype == DPK_BF16)
        return norm_forward_t<bf16, false>(s, (bf16 *)out, mean, rstd, (const bf16 *)x, w, b, N, d, eps);
    return norm_forward_t<float, false>(s, (float *)out, mean, rstd, (const float *)x, w, b, N, d, eps);
}

extern "C" cudaError_t dpk_rmsnorm_forward(cudaStream_t s, int dtype, void *out, float *rstd, const void *x,
                                           const float *w, int64_t N, int64_t d, float eps) {
    if (N <= 0 || d <= 0) return cudaSuccess;
    if (dtype == DPK_BF16)
        return norm_forward_t<bf16, true>(s, (bf16 *)out, NULL, rstd, (const bf16 *)x, w, NULL, N, d, eps);
    return norm_forward_t<float, true>(s, (float *)out, NULL, rstd, (const float *)x, w, NULL, N, d, eps);
}

extern "C" cudaError_t dpk_layernorm_backward(cudaStream_t s, int dtype, void *dx, float *dw, float *db,
                                              const void *dout, const void *x, const float *w, const float *mean,
                                              const float *rstd, int64_t N, int64_t d, int accumulate, float *scratch,
                                              size_t scratch_floats) {
    if (N <= 0 || d <= 0) return cudaSuccess;
    if (dtype == DPK_BF16)
        return norm_backward_t<bf16, false>(s, (bf16 *)dx, dw, db, (const bf16 *)dout, (const bf16 *)x, w, mean, rstd,
                                            N, d, accumulate, scratch, scratch_floats);
    return norm_backward_t<float, false>(s, (float *)dx, dw, db, (const float *)dout, (const float *)x, w, mean, rstd,
                                         N, d, accumulate, scratch, scratch_floats);
}

extern "C" cudaError_t dpk_rmsnorm_backward(cudaStream_t s, int dtype, void *dx, float *dw, const void *dout,
                                            const void *x, const float *w, const float *rstd, int64_t N, int64_t d,
                                            int accumulate, float *scratch, size_t scratch_floats) {
    if (N <= 0 || d <= 0) return cudaSuccess;
    if (dtype == DPK_BF16)
        return norm_backward_t<bf16, true>(s, (bf16 *)dx, dw, NULL, (const bf16 *)dout, (const bf16 *)x, w, NULL, rstd,
                                           N, d, accumulate, scratch, scratch_floats);
    return norm_backward_t<float, true>(s, (float *)dx, dw, NULL, (const float *)dout, (const float *)x, w, NULL, rstd,
                                        N, d, accumulate, scratch, scratch_floats);
}
