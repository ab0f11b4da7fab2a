/* tensor.h: dense, contiguous, row-major tensors of up to 4 dimensions on one device.
 *
 * A tensor either owns one tagged allocation (dp_tensor_init) or is a view into another
 * tensor's storage (dp_tensor_view), which owns nothing and must not outlive its base. On the
 * plan device data is NULL: sizes and tags are all there is. */
#ifndef DP_TENSOR_H
#define DP_TENSOR_H

#include "backend.h"
#include "device.h"
#include "dtype.h"
#include "memory.h"

#include <stdint.h>

#define DP_MAX_DIMS 4

typedef struct dp_tensor {
    dp_dtype dtype;
    int ndim; /* 0 (a scalar) to DP_MAX_DIMS */
    int64_t shape[DP_MAX_DIMS];
    int64_t numel;
    dp_device *dev;
    void *data;     /* first element; NULL on plan and for empty tensors */
    dp_alloc alloc; /* the owned allocation (alloc.live == 0 for views) */
} dp_tensor;

/* Validates a shape: 0..4 dimensions, none negative, numel*size fits in 63 bits. Sets *numel. */
int dp_shape_check(int ndim, const int64_t *shape, dp_dtype dt, int64_t *numel);

/* Allocates t on dev with category cat and module id `module` (scope.h): the one tensor
 * allocation, for callers whose tensors belong to a module other than the current scope's (the
 * model's absolute paths, DP hooks allocating for their layer). t is left empty
 * (dp_tensor_release-safe) on failure; returns DP_OK, DP_EINVAL (bad shape) or DP_EOOM. */
int dp_tensor_init_module(dp_tensor *t, dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape, dp_category cat,
                          uint32_t module);
/* dp_tensor_init_module with the current scope's module. */
int dp_tensor_init(dp_tensor *t, dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape, dp_category cat);
/* Releases t's allocation (idempotent; views just forget their data). */
void dp_tensor_release(dp_tensor *t);
/* Counts t's allocation under another category and module from now on (dp_mem_retag); DP_EINVAL
 * for a view. */
int dp_tensor_retag(dp_tensor *t, dp_category cat, uint32_t module);
/* Heap-allocated form of dp_tensor_init; NULL on failure (see dp_error_message). */
dp_tensor *dp_tensor_new(dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape, dp_category cat);
/* Releases and frees a tensor from dp_tensor_new; NULL is a no-op. */
void dp_tensor_free(dp_tensor *t);

/* Makes *view a tensor of shape over base's elements [offset, offset + numel). Owns nothing. */
int dp_tensor_view(dp_tensor *view, const dp_tensor *base, int64_t offset, int ndim, const int64_t *shape);
/* Bytes of t's elements. */
uint64_t dp_tensor_bytes(const dp_tensor *t);
/* Pointer to element i of t (t->data + i * element size); NULL when t has no data. */
void *dp_tensor_at(const dp_tensor *t, int64_t i);
/* Writes a one-line description ("f32[2x3] cpu activations layers.0.mlp") into buf; returns buf. */
const char *dp_tensor_describe(const dp_tensor *t, char *buf, size_t n);

/* Copies src into dst (any devices; same numel; dtypes equal, or f32/bf16 converted). */
int dp_tensor_copy(dp_tensor *dst, const dp_tensor *src);
/* Copies t's elements to host memory (bytes must equal dp_tensor_bytes). */
int dp_tensor_to_host(const dp_tensor *t, void *host, uint64_t bytes);
/* Copies host memory into t's elements (bytes must equal dp_tensor_bytes). */
int dp_tensor_from_host(dp_tensor *t, const void *host, uint64_t bytes);
/* Reads n f32 values from the host into t (f32, or bf16 rounded to nearest even through a host
 * buffer). DP_EINVAL when n is not t's element count or t is not a float tensor; DP_EOOM. */
int dp_tensor_from_host_f32(dp_tensor *t, const float *host, int64_t n);
/* Writes t's n values to the host as f32 (bf16 widened exactly; zeros on plan). As above. */
int dp_tensor_to_host_f32(const dp_tensor *t, float *host, int64_t n);
/* Sets every element to value. */
int dp_tensor_fill(dp_tensor *t, double value);
/* Fills t from the Philox stream (seed, stream): uniform in [a, b) or normal with mean a and
 * standard deviation b; element i is element i of the stream on every device. */
int dp_tensor_rand(dp_tensor *t, dp_rand_dist dist, float a, float b, uint64_t seed, uint64_t stream);

#endif
