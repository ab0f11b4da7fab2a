/* cuda_stream.h: the CUDA backend's per-device state and what it lends to the other CUDA parts of
 * the engine (the layer and DP op tables, the op timers): its stream and its scratch. The getters
 * are inline so that the tables, which the backend's conductor (backend_cuda.c) registers, call
 * nothing back in it. Only compiled with DPPROF_HAVE_CUDA. */
#ifndef DP_CUDA_STREAM_H
#define DP_CUDA_STREAM_H

#include "backend.h"
#include "device.h"
#include "memory.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>

/* The backend's state (dev->impl): made by its init, freed by its shutdown. */
typedef struct dp_cuda_state {
    cudaStream_t stream;
    cudaMemPool_t pool;
    cublasHandle_t cublas;
    dp_alloc cublas_workspace;
    dp_alloc scratch; /* f32 partials of deterministic reductions */
} dp_cuda_state;

/* The device's stream: every kernel of the backend runs on it, in order. */
static inline cudaStream_t dp_cuda_stream(dp_device *dev) { return ((dp_cuda_state *)dev->impl)->stream; }

/* The backend's f32 scratch for the partials of deterministic reductions (DP_CUDA_SCRATCH_BYTES,
 * tagged `workspace`, module "kernels"); sets *floats to its length. Owned by the backend; its
 * contents are only valid between launches on the stream of one operation. */
static inline float *dp_cuda_scratch(dp_device *dev, size_t *floats) {
    *floats = DP_CUDA_SCRATCH_BYTES / sizeof(float);
    return (float *)((dp_cuda_state *)dev->impl)->scratch.ptr;
}

#endif
