/* backend.h: the table of functions each device implements.
 *
 * Backends see raw pointers, element counts and strides, never tensors: shape checks, the
 * ledger and allocation decisions happen above them (ops.c, the model, dp), in device
 * independent code, so the CPU, CUDA and plan backends allocate the same bytes. Every entry
 * returns DP_OK or a status with dp_error_set. Matrices are row-major. Reductions are
 * deterministic (fixed partition, fixed order, no atomics) and accumulate in f32 or better. */
#ifndef DP_BACKEND_H
#define DP_BACKEND_H

#include "dtype.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dp_device dp_device;
struct dp_layer_ops; /* layer_ops.h: the transformer layers */
struct dpsgd_ops;    /* dpsgd_ops.h: per-sample norm and clipping kernels */

/* Device memory the CUDA backend takes at start-up, tagged `workspace`: cuBLAS's workspace
 * (module "cublas"; 32 MiB as NVIDIA recommends for Hopper) and the f32 partials of the
 * deterministic reductions (module "kernels"). The plan backend's CUDA device model takes the
 * same. */
#define DP_CUDA_CUBLAS_WORKSPACE_BYTES (32u << 20)
#define DP_CUDA_SCRATCH_BYTES (1u << 20)

typedef enum { DP_COPY_H2D, DP_COPY_D2H, DP_COPY_D2D } dp_copy_kind;
typedef enum { DP_RAND_UNIFORM, DP_RAND_NORMAL } dp_rand_dist;

/* C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b] for b < batch, row-major; op(A) is m x k,
 * op(B) is k x n, C is m x n. lda/ldb/ldc are row strides in elements of the stored matrices,
 * stride_* the distance between batch items. A and B share a dtype (f32 or bf16); C is f32 or
 * bf16; accumulation is f32. */
typedef struct dp_gemm_args {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    dp_dtype ab_type, c_type;
    const void *a;
    int64_t lda, stride_a;
    const void *b;
    int64_t ldb, stride_b;
    void *c;
    int64_t ldc, stride_c;
    int64_t batch;
} dp_gemm_args;

typedef struct dp_backend {
    const char *name;
    /* Number of usable devices of this kind, or 0 with the reason in why (n bytes); NULL when
     * the device is always usable. Must not initialise anything a forked child could not redo. */
    int (*probe)(char *why, size_t n);
    /* Sets dev->impl and dev->info; DP_EDEVICE when the device cannot be used. */
    int (*init)(dp_device *dev);
    /* Frees what init made. */
    void (*shutdown)(dp_device *dev);

    /* Raw device memory (see dp_raw_allocator in memory.h); ctx is dev. */
    int (*raw_alloc)(void *ctx, size_t bytes, void **ptr);
    void (*raw_free)(void *ctx, void *ptr, size_t bytes);
    /* Reserved bytes of the device pool; NULL when reserved equals allocated. */
    uint64_t (*reserved)(void *ctx);

    /* Waits for all queued work. */
    int (*sync)(dp_device *dev);
    /* Copies bytes; host pointers are ordinary memory. Synchronous with respect to the host for
     * D2H and H2D. */
    int (*memcpy)(dp_device *dev, void *dst, const void *src, size_t bytes, dp_copy_kind kind);

    /* x[i] = value for i < n. */
    int (*fill)(dp_device *dev, dp_dtype t, void *x, size_t n, double value);
    /* x[i] (+)= a + (b - a) u (uniform) or a + b z (normal) for element offset+i of the Philox
     * stream (seed, stream); accumulate adds instead of storing; then x[i] *= post (skipped when
     * post is 1: DP's division by the batch size in the same pass). f32 or bf16. */
    int (*rand)(dp_device *dev, dp_dtype t, void *x, size_t n, dp_rand_dist dist, float a, float b, uint64_t seed,
                uint64_t stream, uint64_t offset, int accumulate, float post);
    /* dst[i] = (dst_t) src[i], between f32 and bf16 (or a plain copy when the types match). */
    int (*cast)(dp_device *dev, dp_dtype dst_t, void *dst, dp_dtype src_t, const void *src, size_t n);

    /* General matrix product, see dp_gemm_args. */
    int (*gemm)(dp_device *dev, const dp_gemm_args *g);
    /* out[i] = x[i] + y[i] (out may alias x or y). */
    int (*add)(dp_device *dev, dp_dtype t, size_t n, const void *x, const void *y, void *out);
    /* x[i] *= alpha. */
    int (*scale)(dp_device *dev, dp_dtype t, size_t n, void *x, float alpha);
    /* y[i] += alpha * x[i]. */
    int (*axpy)(dp_device *dev, dp_dtype t, size_t n, float alpha, const void *x, void *y);
    /* out[r] (+)= sum_c x[r*cols + c]^2 for r < rows; out is f32 on the device. */
    int (*sumsq_rows)(dp_device *dev, dp_dtype t, size_t rows, size_t cols, const void *x, float *out, int accumulate);

    /* Timers for profile = "ops" (profile.h); NULL on a synchronous backend, whose calls the host
     * clock times. timer_mark records a mark at the current point of the device's queue into
     * *mark; timer_ms is the device time in ms between two marks the queue has passed (after a
     * sync); timer_release frees a mark. */
    int (*timer_mark)(dp_device *dev, void **mark);
    double (*timer_ms)(dp_device *dev, void *from, void *to);
    void (*timer_release)(dp_device *dev, void *mark);
    /* The device's peak flop/s for dtype t and its memory bandwidth in bytes/s, with how they
     * were obtained in how (one line); DP_ENOTSUP when unknown. NULL: unknown. */
    int (*peak)(dp_device *dev, dp_dtype t, double *flops, double *bandwidth, char *how, size_t n);

    /* The transformer layers (layer_ops.h); NULL on the plan backend. */
    const struct dp_layer_ops *layers;
    /* The DP kernels (dpsgd_ops.h); NULL on the plan backend. */
    const struct dpsgd_ops *dpsgd;
} dp_backend;

#endif
