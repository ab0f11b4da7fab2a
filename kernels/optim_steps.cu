/* optim_steps.cu: AdamW and SGD steps over f32 parameters, PyTorch's single-tensor formulas written
 * operation for operation as the CPU backend does (engine/backends/cpu/cpu_layers.c), each rounded
 * separately (__f*_rn: no fused multiply-add), so both devices give the same bits. A bf16
 * parameter (a bf16 model without f32 masters) is widened, stepped in f32 and rounded once (one
 * element per thread).
 *
 * Grid-stride over float4s when every pointer is 16-byte aligned, then the tail.
 * Bytes per element: AdamW reads p, g, m, v and writes p, m, v (28 B); SGD with momentum reads
 * p, g, buf and writes p, buf (20 B), without 12 B. */
#include "layer_util.cuh"
#include "layer_kernels.h"

struct AdamwArgs {
    float decay; /* 1 - lr * weight_decay */
    float one_minus_b1, beta2, one_minus_b2;
    float step_size; /* lr / (1 - beta1^step) */
    float bc2_sqrt;  /* sqrt(1 - beta2^step) */
    float eps;
};

__device__ __forceinline__ void adamw_elem(float &p, float g, float &m, float &v, const AdamwArgs &a) {
    const float pi = __fmul_rn(p, a.decay);
    const float mi = __fadd_rn(m, __fmul_rn(a.one_minus_b1, __fsub_rn(g, m)));
    const float vi = __fadd_rn(__fmul_rn(v, a.beta2), __fmul_rn(__fmul_rn(a.one_minus_b2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
    p = __fsub_rn(pi, __fmul_rn(a.step_size, __fdiv_rn(mi, denom)));
    m = mi;
    v = vi;
}

__global__ void __launch_bounds__(256)
    adamw_kernel(float *p, const float *__restrict__ g, float *m, float *v, int64_t n, int vec, AdamwArgs a) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n4 = vec ? n / 4 : 0;
    for (int64_t i = tid; i < n4; i += stride) {
        float4 P = reinterpret_cast<float4 *>(p)[i], G = reinterpret_cast<const float4 *>(g)[i];
        float4 M = reinterpret_cast<float4 *>(m)[i], Vv = reinterpret_cast<float4 *>(v)[i];
        adamw_elem(P.x, G.x, M.x, Vv.x, a);
        adamw_elem(P.y, G.y, M.y, Vv.y, a);
        adamw_elem(P.z, G.z, M.z, Vv.z, a);
        adamw_elem(P.w, G.w, M.w, Vv.w, a);
        reinterpret_cast<float4 *>(p)[i] = P;
        reinterpret_cast<float4 *>(m)[i] = M;
        reinterpret_cast<float4 *>(v)[i] = Vv;
    }
    for (int64_t i = n4 * 4 + tid; i < n; i += stride) adamw_elem(p[i], g[i], m[i], v[i], a);
}

struct SgdArgs {
    float lr, momentum, weight_decay;
    int first_step;
};

__device__ __forceinline__ float sgd_dir(float p, float g, const SgdArgs &a) {
    return a.weight_decay != 0.0f ? __fadd_rn(g, __fmul_rn(a.weight_decay, p)) : g;
}

/* buf == NULL: plain SGD. */
__global__ void __launch_bounds__(256)
    sgd_kernel(float *p, const float *__restrict__ g, float *buf, int64_t n, int vec, SgdArgs a) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n4 = vec ? n / 4 : 0;
    for (int64_t i = tid; i < n4; i += stride) {
        float4 P = reinterpret_cast<float4 *>(p)[i], G = reinterpret_cast<const float4 *>(g)[i];
        float pv[4] = {P.x, P.y, P.z, P.w}, gv[4] = {G.x, G.y, G.z, G.w}, bv[4] = {0, 0, 0, 0};
        if (buf) {
            float4 Bf = reinterpret_cast<float4 *>(buf)[i];
            bv[0] = Bf.x, bv[1] = Bf.y, bv[2] = Bf.z, bv[3] = Bf.w;
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float d = sgd_dir(pv[e], gv[e], a);
            if (buf) {
                bv[e] = a.first_step ? d : __fadd_rn(__fmul_rn(a.momentum, bv[e]), d);
                d = bv[e];
            }
            pv[e] = __fsub_rn(pv[e], __fmul_rn(a.lr, d));
        }
        reinterpret_cast<float4 *>(p)[i] = make_float4(pv[0], pv[1], pv[2], pv[3]);
        if (buf) reinterpret_cast<float4 *>(buf)[i] = make_float4(bv[0], bv[1], bv[2], bv[3]);
    }
    for (int64_t i = n4 * 4 + tid; i < n; i += stride) {
        float d = sgd_dir(p[i], g[i], a);
        if (buf) {
            buf[i] = a.first_step ? d : __fadd_rn(__fmul_rn(a.momentum, buf[i]), d);
            d = buf[i];
        }
        p[i] = __fsub_rn(p[i], __fmul_rn(a.lr, d));
    }
}

/* bf16 parameters: the f32 step on the widened value, rounded once */
__global__ void __launch_bounds__(256)
    adamw_bf16_kernel(bf16 *p, const float *__restrict__ g, float *m, float *v, int64_t n, AdamwArgs a) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float pv = ldf(p + i);
        adamw_elem(pv, g[i], m[i], v[i], a);
        stf(p + i, pv);
    }
}

__global__ void __launch_bounds__(256) sgd_bf16_kernel(bf16 *p, const float *__restrict__ g, float *buf, int64_t n,
                                                       float lr, float momentum, float weight_decay, int first_step) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float pv = ldf(p + i);
        float d = weight_decay != 0.0f ? __fadd_rn(g[i], __fmul_rn(weight_decay, pv)) : g[i];
        if (buf) {
            buf[i] = first_step ? d : __fadd_rn(__fmul_rn(momentum, buf[i]), d);
            d = buf[i];
        }
        stf(p + i, __fsub_rn(pv, __fmul_rn(lr, d)));
    }
}

/* Host scalars are computed as the CPU backend computes them (f32 products, double bias
 * corrections). */
extern "C" cudaError_t dpk_adamw_step(cudaStream_t s, int pdtype, void *pv, const float *g, float *m, float *v,
                                      int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                                      int64_t step) {
    if (n <= 0) return cudaSuccess;
    if (step < 1) return cudaErrorInvalidValue;
    volatile float lr_wd = lr * weight_decay; /* volatile: a separate f32 rounding, never fused */
    const double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    AdamwArgs a;
    a.decay = 1.0f - lr_wd;
    a.one_minus_b1 = 1.0f - beta1;
    a.beta2 = beta2;
    a.one_minus_b2 = 1.0f - beta2;
    a.step_size = (float)((double)lr / bc1);
    a.bc2_sqrt = (float)sqrt(bc2);
    a.eps = eps;
    if (pdtype == DPK_BF16) {
        adamw_bf16_kernel<<<dpk_blocks((size_t)n), 256, 0, s>>>((bf16 *)pv, g, m, v, n, a);
        return cudaGetLastError();
    }
    float *p = (float *)pv;
    const int vec = dpk_aligned16(p) && dpk_aligned16(g) && dpk_aligned16(m) && dpk_aligned16(v);
    adamw_kernel<<<dpk_blocks((size_t)(vec ? n / 4 + 4 : n)), 256, 0, s>>>(p, g, m, v, n, vec, a);
    return cudaGetLastError();
}

extern "C" cudaError_t dpk_sgd_step(cudaStream_t s, int pdtype, void *pv, const float *g, float *buf, int64_t n,
                                    float lr, float momentum, float weight_decay, int first_step) {
    if (n <= 0) return cudaSuccess;
    if (pdtype == DPK_BF16) {
        sgd_bf16_kernel<<<dpk_blocks((size_t)n), 256, 0, s>>>((bf16 *)pv, g, buf, n, lr, momentum, weight_decay,
                                                              first_step);
        return cudaGetLastError();
    }
    float *p = (float *)pv;
    SgdArgs a = {lr, momentum, weight_decay, first_step};
    const int vec = dpk_aligned16(p) && dpk_aligned16(g) && (!buf || dpk_aligned16(buf));
    sgd_kernel<<<dpk_blocks((size_t)(vec ? n / 4 + 4 : n)), 256, 0, s>>>(p, g, buf, n, vec, a);
    return cudaGetLastError();
}
