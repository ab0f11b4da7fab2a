/* dp_sort.cu: per-sample sort of (token id, position) keys, so that equal ids form runs. One block
 * per sample runs a bitonic network in its "ascending comparators only" form (each merge starts
 * by comparing mirrored pairs), which lets a length that is not a power of two be padded
 * virtually with +inf: a comparator whose upper element lies past the end does nothing. Keys
 * live in shared memory up to SORT_SMEM_KEYS, in the output buffer (global memory, touched by
 * this block only) beyond. Keys are unique (the position is in them), so the order is total. */
#include "common.cuh"
#include "dp_kernels.h"

#define SORT_THREADS 1024
#define SORT_SMEM_KEYS 4096

__device__ __forceinline__ void compare_exchange(uint64_t *k, int64_t lo, int64_t hi, int64_t n) {
    if (hi >= n) return; /* virtual +inf */
    const uint64_t a = k[lo], b = k[hi];
    if (a > b) {
        k[lo] = b;
        k[hi] = a;
    }
}

/* sorts k[0..n) ascending; called by every thread of the block */
__device__ void bitonic_sort(uint64_t *k, int64_t n) {
    int64_t N = 1;
    while (N < n) N <<= 1;
    for (int64_t size = 2; size <= N; size <<= 1) {
        const int64_t half = size >> 1;
        for (int64_t p = threadIdx.x; p < N / 2; p += blockDim.x) {
            const int64_t base = (p / half) * size, off = p % half;
            compare_exchange(k, base + off, base + size - 1 - off, n);
        }
        __syncthreads();
        for (int64_t stride = half >> 1; stride > 0; stride >>= 1) {
            for (int64_t p = threadIdx.x; p < N / 2; p += blockDim.x) {
                const int64_t lo = (p / stride) * 2 * stride + p % stride;
                compare_exchange(k, lo, lo + stride, n);
            }
            __syncthreads();
        }
    }
}

__global__ void sort_ids_kernel(int64_t T, const int32_t *ids, uint64_t *keys) {
    __shared__ uint64_t smem[SORT_SMEM_KEYS];
    const int64_t i = blockIdx.x;
    uint64_t *k = T <= SORT_SMEM_KEYS ? smem : keys + i * T;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
        k[t] = ((uint64_t)(uint32_t)ids[i * T + t] << 32) | (uint64_t)t;
    __syncthreads();
    bitonic_sort(k, T);
    if (T <= SORT_SMEM_KEYS)
        for (int64_t t = threadIdx.x; t < T; t += blockDim.x) keys[i * T + t] = smem[t];
}

extern "C" cudaError_t dpk_dp_sort_ids(cudaStream_t s, int64_t B, int64_t T, const int32_t *ids, uint64_t *keys) {
    for (int64_t b0 = 0; b0 < B; b0 += 65535) {
        const int64_t nb = B - b0 < 65535 ? B - b0 : 65535;
        sort_ids_kernel<<<(unsigned)nb, SORT_THREADS, 0, s>>>(T, ids + b0 * T, keys + b0 * T);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
