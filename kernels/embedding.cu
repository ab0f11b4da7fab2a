/* embedding.cu: token (+ position) embedding, forward and deterministic backward.
 *
 * Forward: one pass over N x d; wte and wpe rows are f32 (16-byte loads when d % 4 == 0) or bf16
 * (a bf16 model's frozen tables: one element per thread, widened, summed in f32).
 * Bytes: N d (2 wes + es) (wpe rows are re-read per sample but sit in L2).
 *
 * Backward of wte, deterministic without sorting: block n owns token id ids[n] when n is the
 * first row carrying that id (it checks ids[0..n) for an earlier one and leaves otherwise). The
 * owner lists, in increasing order, every row m >= n with ids[m] == id (ballots over 256 ids at a
 * time into a shared list), then each thread takes columns j and adds dout[m, j] to dwte[id, j]
 * row after row: exactly the CPU's sequential order, so the sums are bit-identical to it.
 * Scans of ids cost O(N^2 / 256) loads from L1/L2 (64 KiB of ids at N = 16384); dout is read
 * once. Backward of wpe: one thread per (t, j) adds dout[b*T + t, j] over b in order. */
#include "layer_util.cuh"
#include "layer_kernels.h"

#define EMB_THREADS 256
#define EMB_LIST 2048 /* rows gathered per pass of an owner block (8 KiB of shared memory) */

template <typename T, typename W>
__global__ void embedding_forward_kernel(T *__restrict__ out, const int32_t *__restrict__ ids,
                                         const W *__restrict__ wte, const W *__restrict__ wpe, int64_t N, int64_t T_,
                                         int64_t d) {
    const int64_t total = N * d, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t n = i / d, j = i - n * d;
        float v = ldf(wte + (int64_t)ids[n] * d + j);
        if (wpe) v += ldf(wpe + (n % T_) * d + j);
        stf(out + i, v);
    }
}

/* d % 4 == 0 and every pointer 16-byte aligned: 4 columns per thread. */
template <typename T>
__global__ void embedding_forward_vec4_kernel(T *__restrict__ out, const int32_t *__restrict__ ids,
                                              const float *__restrict__ wte, const float *__restrict__ wpe, int64_t N,
                                              int64_t T_, int64_t d) {
    const int64_t d4 = d / 4, total = N * d4, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t n = i / d4, j = (i - n * d4) * 4;
        float v[4], p[4];
        load4(wte + (int64_t)ids[n] * d + j, v);
        if (wpe) {
            load4(wpe + (n % T_) * d + j, p);
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] += p[e];
        }
        T *o = out + n * d + j;
        if (sizeof(T) == 4) {
            *reinterpret_cast<float4 *>(o) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
            uint2 u = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
            *reinterpret_cast<uint2 *>(o) = u;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(EMB_THREADS)
    embedding_backward_wte_kernel(const T *__restrict__ dout, const int32_t *__restrict__ ids, float *dwte, int64_t N,
                                  int64_t d, int64_t V) {
    __shared__ int32_t list[EMB_LIST];
    __shared__ int counts[EMB_THREADS / 32];
    const int64_t n = blockIdx.x;
    const int32_t id = ids[n];
    if (id < 0 || id >= V) return; /* uniform over the block */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    /* leave unless n is the first row with this id */
    int earlier = 0;
    for (int64_t i = threadIdx.x; i < n; i += EMB_THREADS) earlier |= ids[i] == id;
    if (__syncthreads_or(earlier)) return;

    float *row = dwte + (int64_t)id * d;
    int64_t pos = n; /* next row to scan; uniform over the block */
    while (pos < N) {
        int cnt = 0; /* rows gathered in list[0..cnt), increasing; uniform */
        while (pos < N && cnt + EMB_THREADS <= EMB_LIST) {
            const int64_t i = pos + threadIdx.x;
            const bool match = i < N && ids[i] == id;
            const unsigned ballot = __ballot_sync(0xffffffffu, match);
            if (lane == 0) counts[warp] = __popc(ballot);
            __syncthreads();
            int before = cnt, total = 0;
            for (int w = 0; w < EMB_THREADS / 32; w++) {
                if (w < warp) before += counts[w];
                total += counts[w];
            }
            if (match) list[before + __popc(ballot & ((1u << lane) - 1u))] = (int32_t)i;
            __syncthreads(); /* list entries visible; counts free for the next round */
            cnt += total;
            pos += EMB_THREADS;
        }
        for (int64_t j = threadIdx.x; j < d; j += EMB_THREADS) {
            float acc = row[j];
#pragma unroll 4
            for (int k = 0; k < cnt; k++) acc += ldf(dout + (int64_t)list[k] * d + j);
            row[j] = acc;
        }
        __syncthreads(); /* the list is rewritten by the next pass */
    }
}

template <typename T>
__global__ void embedding_backward_wpe_kernel(const T *__restrict__ dout, float *dwpe, int64_t B, int64_t T_,
                                              int64_t d) {
    const int64_t total = T_ * d, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float s = 0.0f;
        for (int64_t b = 0; b < B; b++) s += ldf(dout + b * total + i); /* (b*T + t)*d + j = b*T*d + i */
        dwpe[i] += s;
    }
}

template <typename T>
static cudaError_t embedding_forward_t(cudaStream_t s, T *out, const int32_t *ids, int wdtype, const void *wte,
                                       const void *wpe, int64_t N, int64_t T_, int64_t d) {
    if (wdtype == DPK_BF16) {
        embedding_forward_kernel<T, bf16>
            <<<dpk_blocks((size_t)(N * d)), 256, 0, s>>>(out, ids, (const bf16 *)wte, (const bf16 *)wpe, N, T_, d);
        return cudaGetLastError();
    }
    const float *fte = (const float *)wte, *fpe = (const float *)wpe;
    const bool vec = d % 4 == 0 && dpk_aligned16(out) && dpk_aligned16(fte) && (!fpe || dpk_aligned16(fpe));
    if (vec)
        embedding_forward_vec4_kernel<T><<<dpk_blocks((size_t)(N * d / 4)), 256, 0, s>>>(out, ids, fte, fpe, N, T_, d);
    else
        embedding_forward_kernel<T, float><<<dpk_blocks((size_t)(N * d)), 256, 0, s>>>(out, ids, fte, fpe, N, T_, d);
    return cudaGetLastError();
}

extern "C" cudaError_t dpk_embedding_forward(cudaStream_t s, int dtype, int wdtype, void *out, const int32_t *ids,
                                             const void *wte, const void *wpe, int64_t N, int64_t T, int64_t d) {
    if (N <= 0 || d <= 0) return cudaSuccess;
    if (T <= 0) return cudaErrorInvalidValue;
    if (dtype == DPK_BF16) return embedding_forward_t(s, (bf16 *)out, ids, wdtype, wte, wpe, N, T, d);
    return embedding_forward_t(s, (float *)out, ids, wdtype, wte, wpe, N, T, d);
}

template <typename T>
static cudaError_t embedding_backward_t(cudaStream_t s, const T *dout, const int32_t *ids, float *dwte, float *dwpe,
                                        int64_t N, int64_t T_, int64_t d, int64_t V) {
    if (dwte) {
        embedding_backward_wte_kernel<T><<<(unsigned)N, EMB_THREADS, 0, s>>>(dout, ids, dwte, N, d, V);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if (dwpe) {
        embedding_backward_wpe_kernel<T><<<dpk_blocks((size_t)(T_ * d)), 256, 0, s>>>(dout, dwpe, N / T_, T_, d);
        return cudaGetLastError();
    }
    return cudaSuccess;
}

extern "C" cudaError_t dpk_embedding_backward(cudaStream_t s, int dtype, const void *dout, const int32_t *ids,
                                              float *dwte, float *dwpe, int64_t N, int64_t T, int64_t d, int64_t V) {
    if (N <= 0 || d <= 0) return cudaSuccess;
    if (T <= 0 || N % T != 0 || N > INT32_MAX) return cudaErrorInvalidValue;
    if (dtype == DPK_BF16) return embedding_backward_t(s, (const bf16 *)dout, ids, dwte, dwpe, N, T, d, V);
    return embedding_backward_t(s, (const float *)dout, ids, dwte, dwpe, N, T, d, V);
}
