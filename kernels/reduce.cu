/* reduce.cu: deterministic row-wise sums of squares. Each row is split into a fixed number of
 * parts (a function of rows, cols and the scratch size only); one block sums a part in a fixed
 * tree order and writes an f32 partial; a second kernel adds a row's partials in order. */
#include "common.cuh"
#include "kernels.h"

#define SUMSQ_THREADS 256
#define SUMSQ_PART_MIN 16384 /* elements per part, at least */

__device__ float block_sum(float v) {
    __shared__ float warp_sums[SUMSQ_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = threadIdx.x < SUMSQ_THREADS / 32 ? warp_sums[threadIdx.x] : 0.0f;
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void sumsq_parts_kernel(int dtype, size_t cols, const void *x, size_t parts, size_t part_len,
                                   float *partial) {
    size_t row = blockIdx.y, part = blockIdx.x;
    size_t begin = part * part_len, end = begin + part_len < cols ? begin + part_len : cols;
    const char *base = (const char *)x + row * cols * (dtype == DPK_BF16 ? 2 : 4);
    float acc = 0.0f;
    for (size_t i = begin + threadIdx.x; i < end; i += SUMSQ_THREADS) {
        float v = dpk_load(dtype, base, i);
        acc = fmaf(v, v, acc);
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[row * parts + part] = acc;
}

__global__ void sumsq_finish_kernel(size_t rows, size_t parts, const float *partial, float *out, int accumulate) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (size_t p = 0; p < parts; p++) s += partial[r * parts + p];
        out[r] = (float)(accumulate ? out[r] + s : s);
    }
}

extern "C" cudaError_t dpk_sumsq_rows(cudaStream_t s, int dtype, size_t rows, size_t cols, const void *x, float *out,
                                      int accumulate, float *scratch, size_t scratch_elems) {
    size_t es = dtype == DPK_BF16 ? 2 : 4;
    size_t chunk_rows = rows < 65535 ? rows : 65535; /* grid.y limit; chunks reuse the scratch */
    if (chunk_rows > scratch_elems) chunk_rows = scratch_elems;
    if (rows && !chunk_rows) return cudaErrorInvalidValue;
    for (size_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        size_t nr = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
        size_t parts = (cols + SUMSQ_PART_MIN - 1) / SUMSQ_PART_MIN;
        if (parts > 4096) parts = 4096;
        if (nr * parts > scratch_elems) parts = scratch_elems / nr;
        if (parts < 1) parts = 1;
        size_t part_len = (cols + parts - 1) / parts;
        dim3 grid((unsigned)parts, (unsigned)nr);
        sumsq_parts_kernel<<<grid, SUMSQ_THREADS, 0, s>>>(dtype, cols, (const char *)x + r0 * cols * es, parts,
                                                          part_len ? part_len : 1, scratch);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        sumsq_finish_kernel<<<dpk_blocks(nr), 256, 0, s>>>(nr, parts, scratch, out + r0, accumulate);
        e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
