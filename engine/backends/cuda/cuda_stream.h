/* cuda_stream.h: what the CUDA backend lends to the other CUDA parts of the engine (the layer
 * and DP op tables): its stream and its scratch. Only compiled with DPPROF_HAVE_CUDA. */
#ifndef DP_CUDA_STREAM_H
#define DP_CUDA_STREAM_H

#include <cuda_runtime_api.h>
#include <stddef.h>

typedef struct dp_device dp_device;

/* The device's stream: every kernel of the backend runs on it, in order. */
cudaStream_t dp_cuda_stream(dp_device *dev);
/* The backend's f32 scratch for the partials of deterministic reductions (DP_CUDA_SCRATCH_BYTES,
 * tagged `workspace`, module "kernels"); sets *floats to its length. Owned by the backend; its
 * contents are only valid between launches on the stream of one operation. */
float *dp_cuda_scratch(dp_device *dev, size_t *floats);

#endif
