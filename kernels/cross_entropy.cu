/* cross_entropy.cu: fused softmax cross-entropy over rows of V logits, forward and in-place
 * backward.
 *
 * One 512-thread block per row. A row starts wherever n*V puts it (V = 50257 is odd), so each
 * row is split into a scalar head up to the first 16-byte boundary, a body of 16-byte packs (4
 * f32 or 8 bf16) and a scalar tail. Forward: every thread keeps an online (max, sum of exp)
 * pair, merged across the block in a fixed butterfly and warp order; lse = max + log(sum),
 * loss = lse - logit[target]. Backward: logit = (exp(logit - lse) - [j == target]) * scale[n/T]
 * in place. f32 arithmetic (expf) whatever the logits' dtype.
 * Bytes: forward N V es (one read), backward 2 N V es (read and write). */
#include "layer_util.cuh"
#include "layers.h"

#define CE_THREADS 512

struct MaxSum {
    float m, s; /* running max and sum of exp(x - m) */
};

__device__ __forceinline__ MaxSum ms_merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return a; /* both empty */
    MaxSum r;
    r.m = m;
    r.s = a.s * expf(a.m - m) + b.s * expf(b.m - m); /* expf(-inf) = 0 for an empty side */
    return r;
}

__device__ __forceinline__ void ms_add(MaxSum &a, float v) {
    if (v == -INFINITY) return;
    if (v > a.m) {
        a.s = a.s * expf(a.m - v) + 1.0f;
        a.m = v;
    } else {
        a.s += expf(v - a.m);
    }
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
    int64_t head, npk;
    row_split(x, V, head, npk);
    const int64_t tail = head + npk * VEC;
    MaxSum a = {-INFINITY, 0.0f};
    for (int64_t i = threadIdx.x; i < head; i += CE_THREADS) ms_add(a, ldf(x + i));
    for (int64_t p = threadIdx.x; p < npk; p += CE_THREADS) {
        float v[VEC];
        load_pack(x + head + p * VEC, v);
        float pm = v[0];
#pragma unroll
        for (int e = 1; e < VEC; e++) pm = fmaxf(pm, v[e]);
        if (pm == -INFINITY) continue;
        if (pm > a.m) {
            a.s *= expf(a.m - pm);
            a.m = pm;
        }
#pragma unroll
        for (int e = 0; e < VEC; e++) a.s += expf(v[e] - a.m);
    }
    for (int64_t i = tail + threadIdx.x; i < V; i += CE_THREADS) ms_add(a, ldf(x + i));
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
        const float z = r.m + logf(r.s);
        const int32_t t = targets[row];
        lse[row] = z;
        losses[row] = (t >= 0 && t < V) ? z - ldf(x + t) : __int_as_float(0x7fc00000); /* NaN: bad target */
    }
}

template <typename T>
__global__ void __launch_bounds__(CE_THREADS)
    ce_backward_kernel(T *logits, const float *__restrict__ lse, const int32_t *__restrict__ targets,
                       const float *__restrict__ sample_scale, int64_t T_, int64_t V) {
    constexpr int VEC = Pack<T>::N;
    const int64_t row = blockIdx.x;
    T *x = logits + row * V;
    const float z = lse[row], sc = sample_scale ? sample_scale[row / T_] : 1.0f;
    const int64_t t = targets[row];
    int64_t head, npk;
    row_split(x, V, head, npk);
    const int64_t tail = head + npk * VEC;
    for (int64_t i = threadIdx.x; i < head; i += CE_THREADS) {
        const float p = expf(ldf(x + i) - z);
        stf(x + i, (i == t ? p - 1.0f : p) * sc);
    }
    for (int64_t pk = threadIdx.x; pk < npk; pk += CE_THREADS) {
        const int64_t j0 = head + pk * VEC;
        float v[VEC];
        load_pack(x + j0, v);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            const float p = expf(v[e] - z);
            v[e] = (j0 + e == t ? p - 1.0f : p) * sc;
        }
        store_pack(x + j0, v);
    }
    for (int64_t i = tail + threadIdx.x; i < V; i += CE_THREADS) {
        const float p = expf(ldf(x + i) - z);
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
