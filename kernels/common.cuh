/* common.cuh: helpers shared by the kernels: element loads and stores by dtype, launch sizes. */
#ifndef DPK_COMMON_CUH
#define DPK_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define DPK_F32 0
#define DPK_BF16 1
#define DPK_I32 2

__device__ __forceinline__ float dpk_load(int dtype, const void *x, size_t i) {
    return dtype == DPK_BF16 ? __bfloat162float(((const __nv_bfloat16 *)x)[i]) : ((const float *)x)[i];
}

__device__ __forceinline__ void dpk_store(int dtype, void *x, size_t i, float v) {
    if (dtype == DPK_BF16)
        ((__nv_bfloat16 *)x)[i] = __float2bfloat16_rn(v);
    else
        ((float *)x)[i] = v;
}

/* Blocks for a grid-stride loop over n elements with 256 threads, capped to keep launches cheap. */
static inline unsigned dpk_blocks(size_t n) {
    size_t b = (n + 255) / 256;
    if (b > 65535u * 4u) b = 65535u * 4u;
    return b ? (unsigned)b : 1u;
}

#endif
