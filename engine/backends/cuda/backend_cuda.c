/* backend_cuda.c: the CUDA backend. One non-blocking stream per process; device memory from the
 * device's default stream-ordered pool (cudaMallocAsync) with its release threshold raised so it
 * caches like PyTorch's allocator, and reserved bytes read from the pool's attributes; cuBLAS
 * with its workspace given from the same pool, tagged `workspace`. */
#include "backend_cuda.h"
#include "cuda_dpsgd.h"
#include "cuda_flash_variant.h"
#include "cuda_layers.h"
#include "cuda_profile.h"
#include "cuda_stream.h"
#include "device.h"
#include "error.h"
#include "scope.h"

#include "dp_kernels.h"
#include "kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#define CUDA_TRY(call)                                                                                                 \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) return dp_error_set(DP_EDEVICE, "%s failed: %s", #call, cudaGetErrorString(e_));        \
    } while (0)

#define CUBLAS_TRY(call)                                                                                               \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                               \
            return dp_error_set(DP_EDEVICE, "%s failed: cuBLAS status %d", #call, (int)s_);                            \
    } while (0)

static dp_cuda_state *impl_of(dp_device *dev) { return (dp_cuda_state *)dev->impl; }

static int cuda_probe(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        /* Without a GPU the runtime says "CUDA driver version is insufficient for CUDA runtime
         * version" (no driver at all) or "no CUDA-capable device is detected": say what it means. */
        int driver = access("/proc/driver/nvidia/version", R_OK) == 0;
        if (e == cudaErrorNoDevice)
            snprintf(why, n, "no CUDA device on this machine (the NVIDIA driver sees none)");
        else if (e == cudaErrorInsufficientDriver && !driver)
            snprintf(why, n, "no CUDA device on this machine (no NVIDIA driver is loaded: /proc/driver/nvidia absent)");
        else if (e == cudaErrorInsufficientDriver)
            snprintf(why, n, "the NVIDIA driver is older than this build's CUDA runtime %d.%d (%s)", CUDART_VERSION / 1000,
                     CUDART_VERSION % 1000 / 10, cudaGetErrorString(e));
        else
            snprintf(why, n, "%s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (count == 0) snprintf(why, n, "no CUDA device on this machine (the NVIDIA driver sees none)");
    return count;
}

/* The bf16 flash tile kernels' configuration from DPPROF_FLASH_VARIANT (a benchmark knob: unset is
 * the default kernels), said on stderr when it is not the default so no result passes for one. */
static int select_flash_variant(void) {
    int gram, grad;
    DP_TRY(dp_cuda_flash_variant_parse(getenv("DPPROF_FLASH_VARIANT"), &gram, &grad));
    dpk_dp_flash_select(gram, grad);
    if (gram || grad)
        fprintf(stderr,
                "dpprof: DPPROF_FLASH_VARIANT: flash tile kernels Gram variant %d, gradient variant %d "
                "(not the defaults)\n",
                gram, grad);
    return DP_OK;
}

static int cuda_init(dp_device *dev) {
    char why[256];
    if (cuda_probe(why, sizeof why) <= 0) return dp_error_set(DP_EDEVICE, "device 'cuda' is not available: %s", why);
    DP_TRY(select_flash_variant());
    dp_cuda_state *im = calloc(1, sizeof *im);
    if (!im) return dp_error_set(DP_EOOM, "out of host memory");
    dev->impl = im;
    CUDA_TRY(cudaSetDevice(0));
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    snprintf(dev->info.name, sizeof dev->info.name, "%s", prop.name);
    dev->info.total_memory = prop.totalGlobalMem;
    dev->info.cores = prop.multiProcessorCount;
    dev->info.cc_major = prop.major;
    dev->info.cc_minor = prop.minor;
    cudaDriverGetVersion(&dev->info.driver_version);
    cudaRuntimeGetVersion(&dev->info.runtime_version);
    {
        dp_device *cpu;
        if (dp_device_get(DP_DEV_CPU, &cpu) == DP_OK)
            snprintf(dev->info.cpu, sizeof dev->info.cpu, "%s", cpu->info.cpu);
    }
    CUDA_TRY(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaDeviceGetDefaultMemPool(&im->pool, 0));
    uint64_t threshold = UINT64_MAX; /* keep freed memory reserved, as a caching allocator does */
    CUDA_TRY(cudaMemPoolSetAttribute(im->pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    CUBLAS_TRY(cublasCreate(&im->cublas));
    CUBLAS_TRY(cublasSetStream(im->cublas, im->stream));
    /* the workspaces are allocations like any other, so that budgets and plans see them */
    uint32_t id = dp_module_intern("cublas");
    DP_TRY(dp_mem_alloc_module(dev->mem, DP_CUDA_CUBLAS_WORKSPACE_BYTES, DP_CAT_WORKSPACE, id, &im->cublas_workspace));
    CUBLAS_TRY(cublasSetWorkspace(im->cublas, im->cublas_workspace.ptr, DP_CUDA_CUBLAS_WORKSPACE_BYTES));
    DP_TRY(dp_mem_alloc_module(dev->mem, DP_CUDA_SCRATCH_BYTES, DP_CAT_WORKSPACE, dp_module_intern("kernels"),
                               &im->scratch));
    return DP_OK;
}

static void cuda_shutdown(dp_device *dev) {
    dp_cuda_state *im = impl_of(dev);
    if (!im) return;
    if (im->stream) cudaStreamSynchronize(im->stream);
    if (im->cublas) cublasDestroy(im->cublas);
    dp_mem_release(dev->mem, &im->cublas_workspace);
    dp_mem_release(dev->mem, &im->scratch);
    if (im->stream) {
        cudaStreamSynchronize(im->stream);
        cudaStreamDestroy(im->stream);
    }
    free(im);
    dev->impl = NULL;
}

static int cuda_raw_alloc(void *ctx, size_t bytes, void **ptr) {
    dp_device *dev = ctx;
    *ptr = NULL;
    if (bytes == 0) return DP_OK;
    cudaError_t e = cudaMallocAsync(ptr, bytes, impl_of(dev)->stream);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* clear the sticky-free error so later calls work */
        *ptr = NULL;
        return DP_EOOM;
    }
    if (e != cudaSuccess)
        return dp_error_set(DP_EDEVICE, "cudaMallocAsync(%zu) failed: %s", bytes, cudaGetErrorString(e));
    return DP_OK;
}

static void cuda_raw_free(void *ctx, void *ptr, size_t bytes) {
    dp_device *dev = ctx;
    (void)bytes;
    if (ptr) cudaFreeAsync(ptr, impl_of(dev)->stream);
}

static uint64_t cuda_reserved(void *ctx) {
    dp_device *dev = ctx;
    uint64_t v = 0;
    if (impl_of(dev) && impl_of(dev)->pool)
        cudaMemPoolGetAttribute(impl_of(dev)->pool, cudaMemPoolAttrReservedMemCurrent, &v);
    return v;
}

static int cuda_sync(dp_device *dev) {
    CUDA_TRY(cudaStreamSynchronize(impl_of(dev)->stream));
    return DP_OK;
}

static int cuda_memcpy(dp_device *dev, void *dst, const void *src, size_t bytes, dp_copy_kind kind) {
    if (!bytes) return DP_OK;
    enum cudaMemcpyKind k = kind == DP_COPY_H2D   ? cudaMemcpyHostToDevice
                            : kind == DP_COPY_D2H ? cudaMemcpyDeviceToHost
                                                  : cudaMemcpyDeviceToDevice;
    cudaStream_t s = impl_of(dev)->stream;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, k, s));
    if (kind != DP_COPY_D2D) CUDA_TRY(cudaStreamSynchronize(s));
    return DP_OK;
}

#define LAUNCH_TRY(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) return dp_error_set(DP_EDEVICE, "kernel %s failed: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

static int cuda_fill(dp_device *dev, dp_dtype t, void *x, size_t n, double value) {
    LAUNCH_TRY(dpk_fill(impl_of(dev)->stream, (int)t, x, n, (float)value, (int32_t)value));
    return DP_OK;
}

static int cuda_rand(dp_device *dev, dp_dtype t, void *x, size_t n, dp_rand_dist dist, float a, float b, uint64_t seed,
                     uint64_t stream, uint64_t offset, int accumulate, float post) {
    if (t == DP_I32) return dp_error_set(DP_ENOTSUP, "rand: dtype i32 is not supported (f32 or bf16)");
    LAUNCH_TRY(dpk_rand(impl_of(dev)->stream, (int)t, x, n, dist == DP_RAND_NORMAL, a, b, seed, stream, offset,
                        accumulate, post));
    return DP_OK;
}

static int cuda_cast(dp_device *dev, dp_dtype dt, void *dst, dp_dtype st, const void *src, size_t n) {
    if (dt == st) return cuda_memcpy(dev, dst, src, n * dp_dtype_size(dt), DP_COPY_D2D);
    if (dt == DP_I32 || st == DP_I32)
        return dp_error_set(DP_ENOTSUP, "cast: between %s and %s is not supported", dp_dtype_name(st),
                            dp_dtype_name(dt));
    LAUNCH_TRY(dpk_cast(impl_of(dev)->stream, (int)dt, dst, (int)st, src, n));
    return DP_OK;
}

static cudaDataType_t cuda_type(dp_dtype t) { return t == DP_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

static int cuda_gemm(dp_device *dev, const dp_gemm_args *g) {
    if (g->m == 0 || g->n == 0 || g->batch == 0) return DP_OK;
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands */
    cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_TRY(cublasGemmStridedBatchedEx(
        impl_of(dev)->cublas, tb, ta, (int)g->n, (int)g->m, (int)g->k, &g->alpha, g->b, cuda_type(g->ab_type),
        (int)g->ldb, g->stride_b, g->a, cuda_type(g->ab_type), (int)g->lda, g->stride_a, &g->beta, g->c,
        cuda_type(g->c_type), (int)g->ldc, g->stride_c, (int)g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return DP_OK;
}

static int need_float(dp_dtype t, const char *op) {
    if (t == DP_F32 || t == DP_BF16) return DP_OK;
    return dp_error_set(DP_ENOTSUP, "%s: dtype %s is not supported (f32 or bf16)", op, dp_dtype_name(t));
}

static int cuda_add(dp_device *dev, dp_dtype t, size_t n, const void *x, const void *y, void *out) {
    DP_TRY(need_float(t, "add"));
    LAUNCH_TRY(dpk_add(impl_of(dev)->stream, (int)t, n, x, y, out));
    return DP_OK;
}

static int cuda_scale(dp_device *dev, dp_dtype t, size_t n, void *x, float alpha) {
    DP_TRY(need_float(t, "scale"));
    LAUNCH_TRY(dpk_scale(impl_of(dev)->stream, (int)t, n, x, alpha));
    return DP_OK;
}

static int cuda_axpy(dp_device *dev, dp_dtype t, size_t n, float alpha, const void *x, void *y) {
    DP_TRY(need_float(t, "axpy"));
    LAUNCH_TRY(dpk_axpy(impl_of(dev)->stream, (int)t, n, alpha, x, y));
    return DP_OK;
}

static int cuda_sumsq_rows(dp_device *dev, dp_dtype t, size_t rows, size_t cols, const void *x, float *out,
                           int accumulate) {
    DP_TRY(need_float(t, "sumsq_rows"));
    dp_cuda_state *im = impl_of(dev);
    LAUNCH_TRY(dpk_sumsq_rows(im->stream, (int)t, rows, cols, x, out, accumulate, im->scratch.ptr,
                              DP_CUDA_SCRATCH_BYTES / sizeof(float)));
    return DP_OK;
}

const dp_backend dp_backend_cuda = {
    .name = "cuda",
    .probe = cuda_probe,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .reserved = cuda_reserved,
    .sync = cuda_sync,
    .memcpy = cuda_memcpy,
    .fill = cuda_fill,
    .rand = cuda_rand,
    .cast = cuda_cast,
    .gemm = cuda_gemm,
    .add = cuda_add,
    .scale = cuda_scale,
    .axpy = cuda_axpy,
    .sumsq_rows = cuda_sumsq_rows,
    .timer_mark = dp_cuda_timer_mark,
    .timer_ms = dp_cuda_timer_ms,
    .timer_release = dp_cuda_timer_release,
    .peak = dp_cuda_peak,
    .layers = &dp_cuda_layer_ops,
    .dpsgd = &dpsgd_cuda_ops,
};
