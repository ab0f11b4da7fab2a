/* activation.cu: bias add and bias gradient, GELU (tanh form) and SwiGLU, forward and backward.
 *
 * All memory-bound, one pass each: a grid-stride loop over 16-byte packs (4 f32 or 8 bf16) when
 * every pointer is 16-byte aligned, then the tail (or everything, when not aligned) element by
 * element. Bytes per element, es = 2 or 4: bias_add 2 es; gelu fwd 2 es, bwd 3 es (4 es
 * accumulating); swiglu fwd 3 es, bwd 5 es. The bias gradient is the deterministic column sum
 * of layer_util.cuh (reads g once). Outputs may alias inputs element for element (dx = dout):
 * each thread loads all inputs of a pack before storing it. */
#include "layer_util.cuh"
#include "layer_kernels.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

template <int NIN, int NOUT> struct EwArgs {
    const void *in[NIN];
    void *out[NOUT];
};

/* out[o][i] = F(in[0][i], ..., in[NIN-1][i]) for i < n. */
template <typename T, int NIN, int NOUT, typename F>
__global__ void __launch_bounds__(256) ew_kernel(EwArgs<NIN, NOUT> a, int64_t n, int vec, F f) {
    constexpr int VEC = Pack<T>::N;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t npk = vec ? n / VEC : 0;
    for (int64_t p = tid; p < npk; p += stride) {
        float x[NIN][VEC], y[NOUT][VEC];
#pragma unroll
        for (int i = 0; i < NIN; i++) load_pack((const T *)a.in[i] + p * VEC, x[i]);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            float xi[NIN], yo[NOUT];
#pragma unroll
            for (int i = 0; i < NIN; i++) xi[i] = x[i][e];
            f(xi, yo);
#pragma unroll
            for (int o = 0; o < NOUT; o++) y[o][e] = yo[o];
        }
#pragma unroll
        for (int o = 0; o < NOUT; o++) store_pack((T *)a.out[o] + p * VEC, y[o]);
    }
    for (int64_t i = npk * VEC + tid; i < n; i += stride) {
        float xi[NIN], yo[NOUT];
#pragma unroll
        for (int k = 0; k < NIN; k++) xi[k] = ldf((const T *)a.in[k] + i);
        f(xi, yo);
#pragma unroll
        for (int o = 0; o < NOUT; o++) stf((T *)a.out[o] + i, yo[o]);
    }
}

template <typename T, int NIN, int NOUT, typename F>
static cudaError_t ew_launch(cudaStream_t s, const EwArgs<NIN, NOUT> &a, int64_t n, F f) {
    if (n <= 0) return cudaSuccess;
    int vec = 1;
    for (int i = 0; i < NIN; i++) vec &= dpk_aligned16(a.in[i]);
    for (int o = 0; o < NOUT; o++) vec &= dpk_aligned16(a.out[o]);
    const size_t work = vec ? (size_t)(n / Pack<T>::N) + (size_t)Pack<T>::N : (size_t)n;
    ew_kernel<T, NIN, NOUT, F><<<dpk_blocks(work), 256, 0, s>>>(a, n, vec, f);
    return cudaGetLastError();
}

/* ---- GELU ------------------------------------------------------------------------------------ */

struct GeluForward {
    __device__ void operator()(const float *x, float *y) const {
        const float v = x[0];
        const float u = GELU_SCALE * (v + 0.044715f * v * v * v);
        y[0] = 0.5f * v * (1.0f + tanhf(u));
    }
};

/* in: dout, x (, dx when accumulating) */
template <bool ACC> struct GeluBackward {
    __device__ void operator()(const float *x, float *y) const {
        const float go = x[0], v = x[1];
        const float th = tanhf(GELU_SCALE * (v + 0.044715f * v * v * v));
        const float sech2 = 1.0f - th * th;
        const float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * v * v);
        y[0] = ACC ? x[2] + go * grad : go * grad;
    }
};

/* ---- SwiGLU ---------------------------------------------------------------------------------- */

/* in: gate, up */
struct SwigluForward {
    __device__ void operator()(const float *x, float *y) const {
        const float g = x[0];
        y[0] = g / (1.0f + expf(-g)) * x[1];
    }
};

/* in: gate, up, dout; out: dgate, dup */
struct SwigluBackward {
    __device__ void operator()(const float *x, float *y) const {
        const float g = x[0], u = x[1], go = x[2];
        const float sig = 1.0f / (1.0f + expf(-g));
        y[0] = go * u * sig * (1.0f + g * (1.0f - sig));
        y[1] = go * g * sig;
    }
};

template <typename T> static cudaError_t gelu_forward_t(cudaStream_t s, void *out, const void *x, int64_t n) {
    EwArgs<1, 1> a = {{x}, {out}};
    return ew_launch<T>(s, a, n, GeluForward());
}

template <typename T>
static cudaError_t gelu_backward_t(cudaStream_t s, void *dx, const void *dout, const void *x, int64_t n, int acc) {
    if (acc) {
        EwArgs<3, 1> a = {{dout, x, dx}, {dx}};
        return ew_launch<T>(s, a, n, GeluBackward<true>());
    }
    EwArgs<2, 1> a = {{dout, x}, {dx}};
    return ew_launch<T>(s, a, n, GeluBackward<false>());
}

extern "C" cudaError_t dpk_gelu_forward(cudaStream_t s, int dtype, void *out, const void *x, int64_t n) {
    return dtype == DPK_BF16 ? gelu_forward_t<bf16>(s, out, x, n) : gelu_forward_t<float>(s, out, x, n);
}

extern "C" cudaError_t dpk_gelu_backward(cudaStream_t s, int dtype, void *dx, const void *dout, const void *x,
                                         int64_t n, int accumulate) {
    return dtype == DPK_BF16 ? gelu_backward_t<bf16>(s, dx, dout, x, n, accumulate)
                             : gelu_backward_t<float>(s, dx, dout, x, n, accumulate);
}

extern "C" cudaError_t dpk_swiglu_forward(cudaStream_t s, int dtype, void *out, const void *gate, const void *up,
                                          int64_t n) {
    EwArgs<2, 1> a = {{gate, up}, {out}};
    return dtype == DPK_BF16 ? ew_launch<bf16>(s, a, n, SwigluForward()) : ew_launch<float>(s, a, n, SwigluForward());
}

extern "C" cudaError_t dpk_swiglu_backward(cudaStream_t s, int dtype, void *dgate, void *dup, const void *dout,
                                           const void *gate, const void *up, int64_t n) {
    EwArgs<3, 2> a = {{gate, up, dout}, {dgate, dup}};
    return dtype == DPK_BF16 ? ew_launch<bf16>(s, a, n, SwigluBackward()) : ew_launch<float>(s, a, n, SwigluBackward());
}

/* ---- bias ------------------------------------------------------------------------------------ */

template <typename T>
__global__ void __launch_bounds__(256)
    bias_add_kernel(T *out, const float *__restrict__ bias, int64_t rows, int64_t cols, int vec) {
    constexpr int VEC = Pack<T>::N;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) { /* cols % VEC == 0: a pack never crosses a row */
        const int64_t cp = cols / VEC, npk = rows * cp;
        for (int64_t p = tid; p < npk; p += stride) {
            const int64_t c = (p % cp) * VEC;
            float v[VEC], b[VEC];
            load_pack(out + p * VEC, v);
#pragma unroll
            for (int e = 0; e < VEC; e += 4) load4(bias + c + e, b + e);
#pragma unroll
            for (int e = 0; e < VEC; e++) v[e] += b[e];
            store_pack(out + p * VEC, v);
        }
    } else {
        const int64_t n = rows * cols;
        for (int64_t i = tid; i < n; i += stride) stf(out + i, ldf(out + i) + bias[i % cols]);
    }
}

template <typename T>
static cudaError_t bias_add_t(cudaStream_t s, T *out, const float *bias, int64_t rows, int64_t cols) {
    constexpr int VEC = Pack<T>::N;
    const int vec = cols % VEC == 0 && dpk_aligned16(out) && dpk_aligned16(bias);
    const size_t work = (size_t)(rows * cols) / (vec ? VEC : 1);
    bias_add_kernel<T><<<dpk_blocks(work), 256, 0, s>>>(out, bias, rows, cols, vec);
    return cudaGetLastError();
}

extern "C" cudaError_t dpk_bias_add(cudaStream_t s, int dtype, void *out, const float *bias, int64_t rows,
                                    int64_t cols) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    return dtype == DPK_BF16 ? bias_add_t(s, (bf16 *)out, bias, rows, cols)
                             : bias_add_t(s, (float *)out, bias, rows, cols);
}

extern "C" cudaError_t dpk_bias_backward(cudaStream_t s, int dtype, float *db, const void *g, int64_t rows,
                                         int64_t cols, float *scratch, size_t scratch_floats) {
    if (dtype == DPK_BF16)
        return colsum_launch<bf16, COLSUM_BIAS>(s, (const bf16 *)g, NULL, NULL, NULL, rows, cols, db, NULL, scratch,
                                                scratch_floats);
    return colsum_launch<float, COLSUM_BIAS>(s, (const float *)g, NULL, NULL, NULL, rows, cols, db, NULL, scratch,
                                             scratch_floats);
}
