/* cross_entropy.cu: fused softmax cross-entropy over rows of V logits, forward and in-place
 * backward.
 *
 * One 512-thread block per row. A row starts wherever n*V puts it (V = 50257 is odd), so each
 * row is split into a scalar head up to the first 16-byte boundary, a body of 16-byte packs (4
 * f32 or 8 bf16) and a scalar tail. Forward: every thread keeps an online (max, sum of exp)
 * pair, merged across the block in a fixed butterfly and warp order; lse = max + log(sum),
 * loss = lse - logit[target]. Backward: logit = (exp(logit - lse) - [j == target]) * scale[n/T]
 * in place; a target of DPK_IGNORE_INDEX (-100, a pad) has loss 0 and a zero gradient row.
 * f32 arithmetic whatever the logits' dtype; exponentials in base 2 on the hardware's
 * ex2 (one instruction: accurate expf kept the kernels instruction-bound at 80% of HBM), about
 * 1e-6 relative per term. Two 16-byte loads in flight per thread.
 * Bytes: forward N V es (one read), backward 2 N V es (read and write). */
#include "layer_util.cuh"
#include "layer_kernels.h"

#define CE_THREADS 512
#define ATT_LOG2E_CE 1.4426950408889634f
#define CE_LN2 0.6931471805599453f

struct MaxSum {
    float m, s; /* running max and sum of 2^(u - m), u = logit * log2(e) */
};

__device__ __forceinline__ MaxSum ms_merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return a; /* both empty */
    MaxSum r;
    r.m = m;
    r.s = a.s * fast_exp2(a.m - m) + b.s * fast_exp2(b.m - m); /* 2^-inf = 0 for an empty side */
    return r;
}

__device__ __forceinline__ void ms_add(MaxSum &a, float u) {
    if (u == -INFINITY) return;
    if (u > a.m) {
        a.s = a.s * fast_exp2(a.m - u) + 1.0f;
        a.m = u;
    } else {
        a.s += fast_exp2(u - a.m);
    }
}

/* one pack of VEC values already scaled by log2(e): one rescale at most, then VEC adds */
template <int VEC> __device__ __forceinline__ void ms_add_pack(MaxSum &a, const float (&u)[VEC]) {
    float pm = u[0];
#pragma unroll
    for (int e = 1; e < VEC; e++) pm = fmaxf(pm, u[e]);
    if (pm == -INFINITY) return;
    if (pm > a.m) {
        a.s *= fast_exp2(a.m - pm);
        a.m = pm;
    }
#pragma unroll
    for (int e = 0; e < VEC; e++) a.s += fast_exp2(u[e] - a.m);
}

/* Elements [0, head) reach 16-byte alignment; packs follow; the tail is [tail, V). */
template <typename T> __device__ __forceinline__ void row_split(const T *x, int64_t V, int64_t &head, int64_t &npk) {
    constexpr int VEC = Pack<T>::N;
    head = (int64_t)(((16u - ((uintptr_t)x & 15u)) & 15u) / sizeof(T));
    if (head > V) head = V;
    npk = (V - head) / VEC;
}

template <typename T>
__global__ void __launch_bounds__(CE_THREADS)
    ce_forward_kernel(float *__restrict__ losses, float *__restrict__ lse, const T *__restrict__ logits,
                      const int32_t *__restrict__ targets, int64_t V) {
    constexpr int VEC = Pack<T>::N;
    __shared__ MaxSum red[CE_THREADS / 32];
    const int64_t row = blockIdx.x;
    const T *x = logits + row * V;
    const T *body;
    int64_t head, npk;
    row_split(x, V, head, npk);
    body = x + head;
    const int64_t tail = head + npk * VEC;
    MaxSum a = {-INFINITY, 0.0f};
    for (int64_t i = threadIdx.x; i < head; i += CE_THREADS) ms_add(a, ldf(x + i) * ATT_LOG2E_CE);
    int64_t p = threadIdx.x;
    for (; p + CE_THREADS < npk; p += 2 * CE_THREADS) { /* two 16-byte loads in flight */
        float u0[VEC], u1[VEC];
        load_pack(body + p * VEC, u0);
        load_pack(body + (p + CE_THREADS) * VEC, u1);
#pragma unroll
        for (int e = 0; e < VEC; e++) u0[e] *= ATT_LOG2E_CE, u1[e] *= ATT_LOG2E_CE;
        ms_add_pack(a, u0);
        ms_add_pack(a, u1);
    }
    if (p < npk) {
        float u0[VEC];
        load_pack(body + p * VEC, u0);
#pragma unroll
        for (int e = 0; e < VEC; e++) u0[e] *= ATT_LOG2E_CE;
        ms_add_pack(a, u0);
    }
    for (int64_t i = tail + threadIdx.x; i < V; i += CE_THREADS) ms_add(a, ldf(x + i) * ATT_LOG2E_CE);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum b;
        b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
        b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
        a = ms_merge(a, b);
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        MaxSum r = red[0];
        for (int w = 1; w < CE_THREADS / 32; w++) r = ms_merge(r, red[w]);
        const float z = (r.m + log2f(r.s)) * CE_LN2;
        const int32_t t = targets[row];
        lse[row] = z;
        losses[row] = (t >= 0 && t < V)       ? z - ldf(x + t)
                      : t == DPK_IGNORE_INDEX ? 0.0f                        /* a pad carries no loss */
                                              : __int_as_float(0x7fc00000); /* NaN: bad target */
    }
}

template <typename T>
__global__ void __launch_bounds__(CE_THREADS)
    ce_backward_kernel(T *logits, const float *__restrict__ lse, const int32_t *__restrict__ targets,
                       const float *__restrict__ sample_scale, int64_t T_, int64_t V) {
    constexpr int VEC = Pack<T>::N;
    const int64_t row = blockIdx.x;
    T *x = logits + row * V;
    const int64_t t = targets[row];
    /* a pad (DPK_IGNORE_INDEX) gets a zero row: scale 0 and no index equals t */
    const float zl = lse[row] * ATT_LOG2E_CE, sc = t == DPK_IGNORE_INDEX ? 0.0f
                                                   : sample_scale        ? sample_scale[row / T_]
                                                                         : 1.0f;
    int64_t head, npk;
    row_split(x, V, head, npk);
    const int64_t tail = head + npk * VEC;
    /* softmax = 2^(x log2(e) - lse log2(e)); the target's entry loses 1 */
    for (int64_t i = threadIdx.x; i < head; i += CE_THREADS) {
        const float p = fast_exp2(fmaf(ldf(x + i), ATT_LOG2E_CE, -zl));
        stf(x + i, (i == t ? p - 1.0f : p) * sc);
    }
    int64_t pk = threadIdx.x;
    for (; pk < npk; pk += 2 * CE_THREADS) {
        const bool two = pk + CE_THREADS < npk;
        const int64_t j0 = head + pk * VEC, j1 = j0 + (int64_t)CE_THREADS * VEC;
        float v0[VEC], v1[VEC];
        load_pack(x + j0, v0);
        if (two) load_pack(x + j1, v1);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            const float p = fast_exp2(fmaf(v0[e], ATT_LOG2E_CE, -zl));
            v0[e] = (j0 + e == t ? p - 1.0f : p) * sc;
        }
        store_pack(x + j0, v0);
        if (two) {
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const float p = fast_exp2(fmaf(v1[e], ATT_LOG2E_CE, -zl));
                v1[e] = (j1 + e == t ? p - 1.0f : p) * sc;
            }
            store_pack(x + j1, v1);
        }
    }
    for (int64_t i = tail + threadIdx.x; i < V; i += CE_THREADS) {
        const float p = fast_exp2(fmaf(ldf(x + i), ATT_LOG2E_CE, -zl));
        stf(x + i, (i == t ? p - 1.0f : p) * sc);
    }
}

extern "C" cudaError_t dpk_cross_entropy_forward(cudaStream_t s, int dtype, float *losses, float *lse,
                                                 const void *logits, const int32_t *targets, int64_t N, int64_t V) {
    if (N <= 0) return cudaSuccess;
    if (V <= 0 || N > INT32_MAX) return cudaErrorInvalidValue;
    if (dtype == DPK_BF16)
        ce_forward_kernel<bf16><<<(unsigned)N, CE_THREADS, 0, s>>>(losses, lse, (const bf16 *)logits, targets, V);
    else
        ce_forward_kernel<float><<<(unsigned)N, CE_THREADS, 0, s>>>(losses, lse, (const float *)logits, targets, V);
    return cudaGetLastError();
}

extern "C" cudaError_t dpk_cross_entropy_backward(cudaStream_t s, int dtype, void *logits, const float *lse,
                                                  const int32_t *targets, const float *sample_scale, int64_t N,
                                                  int64_t T, int64_t V) {
    if (N <= 0) return cudaSuccess;
    if (V <= 0 || T <= 0 || N > INT32_MAX) return cudaErrorInvalidValue;
    if (dtype == DPK_BF16)
        ce_backward_kernel<bf16><<<(unsigned)N, CE_THREADS, 0, s>>>((bf16 *)logits, lse, targets, sample_scale, T, V);
    else
        ce_backward_kernel<float><<<(unsigned)N, CE_THREADS, 0, s>>>((float *)logits, lse, targets, sample_scale, T, V);
    return cudaGetLastError();
}
