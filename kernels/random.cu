/* random.cu: Philox fills, bit-identical to the CPU backend (see common/philox.h). One thread
 * makes the 4 values of one Philox block. */
#include "common.cuh"
#include "kernels.h"
#include "philox.h"

__global__ void rand_kernel(int dtype, void *x, size_t n, int normal, float a, float b, uint64_t seed, uint64_t stream,
                            uint64_t offset, int accumulate, float post) {
    /* element i of x is element offset+i of the stream; thread t covers stream block first+t */
    uint64_t first = offset >> 2, last = (offset + n - 1) >> 2;
    for (uint64_t blk = first + blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; blk <= last;
         blk += (uint64_t)gridDim.x * blockDim.x) {
        float v[4];
        if (normal) {
            dp_philox_normal4(seed, stream, blk, v);
            for (int k = 0; k < 4; k++) v[k] = __fadd_rn(a, __fmul_rn(b, v[k]));
        } else {
            dp_philox_out o = dp_philox4x32(seed, stream, blk);
            float w = __fsub_rn(b, a);
            for (int k = 0; k < 4; k++) v[k] = __fadd_rn(a, __fmul_rn(w, dp_philox_uniform_word(o.v[k])));
        }
        for (int k = 0; k < 4; k++) {
            uint64_t e = blk * 4 + k;
            if (e < offset || e >= offset + n) continue;
            size_t i = (size_t)(e - offset);
            float r = accumulate ? __fadd_rn(dpk_load(dtype, x, i), v[k]) : v[k];
            if (post != 1.0f) r = __fmul_rn(r, post); /* as the separate scale would round it */
            dpk_store(dtype, x, i, r);
        }
    }
}

extern "C" cudaError_t dpk_rand(cudaStream_t s, int dtype, void *x, size_t n, int normal, float a, float b,
                                uint64_t seed, uint64_t stream, uint64_t offset, int accumulate, float post) {
    if (!n) return cudaSuccess;
    size_t blocks4 = (size_t)(((offset + n - 1) >> 2) - (offset >> 2) + 1);
    rand_kernel<<<dpk_blocks(blocks4), 256, 0, s>>>(dtype, x, n, normal, a, b, seed, stream, offset, accumulate, post);
    return cudaGetLastError();
}
