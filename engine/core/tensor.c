/* tensor.c: tensor storage, views and transfers. */
#include "tensor.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dp_shape_check(int ndim, const int64_t *shape, dp_dtype dt, int64_t *numel) {
    if (ndim < 0 || ndim > DP_MAX_DIMS)
        return dp_error_set(DP_EINVAL, "tensor rank %d is out of range (0 to %d)", ndim, DP_MAX_DIMS);
    if ((unsigned)dt >= DP_DTYPE_COUNT)
        return dp_error_set(DP_EINVAL, "unknown dtype %d (valid: f32, bf16, i32)", (int)dt);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return dp_error_set(DP_EINVAL, "tensor dimension %d is negative (%lld)", i + 1, (long long)shape[i]);
        if (shape[i] && n > (INT64_MAX / 8) / shape[i])
            return dp_error_set(DP_EINVAL, "tensor of that shape is too large");
        n *= shape[i];
    }
    *numel = n;
    return DP_OK;
}

int dp_tensor_init_module(dp_tensor *t, dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape, dp_category cat,
                          uint32_t module) {
    memset(t, 0, sizeof *t);
    int64_t numel;
    DP_TRY(dp_shape_check(ndim, shape, dt, &numel));
    dp_alloc a;
    DP_TRY(dp_mem_alloc_module(dev->mem, (uint64_t)numel * dp_dtype_size(dt), cat, module, &a));
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->dev = dev;
    t->alloc = a;
    t->data = a.ptr;
    return DP_OK;
}

int dp_tensor_init(dp_tensor *t, dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape, dp_category cat) {
    return dp_tensor_init_module(t, dev, dt, ndim, shape, cat, dp_scope_current());
}

void dp_tensor_release(dp_tensor *t) {
    if (!t) return;
    if (t->alloc.live) dp_mem_release(t->dev->mem, &t->alloc);
    t->data = NULL;
    t->numel = 0;
    t->ndim = 0;
}

int dp_tensor_retag(dp_tensor *t, dp_category cat, uint32_t module) {
    if (!t || !t->alloc.live) return dp_error_set(DP_EINVAL, "tensor retag: the tensor owns no allocation");
    return dp_mem_retag(t->dev->mem, &t->alloc, cat, module);
}

dp_tensor *dp_tensor_new(dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape, dp_category cat) {
    dp_tensor *t = malloc(sizeof *t);
    if (!t) {
        dp_error_set(DP_EOOM, "out of host memory");
        return NULL;
    }
    if (dp_tensor_init(t, dev, dt, ndim, shape, cat) != DP_OK) {
        free(t);
        return NULL;
    }
    return t;
}

void dp_tensor_free(dp_tensor *t) {
    if (!t) return;
    dp_tensor_release(t);
    free(t);
}

int dp_tensor_view(dp_tensor *view, const dp_tensor *base, int64_t offset, int ndim, const int64_t *shape) {
    int64_t numel;
    DP_TRY(dp_shape_check(ndim, shape, base->dtype, &numel));
    if (offset < 0 || offset + numel > base->numel)
        return dp_error_set(DP_EINVAL, "view [%lld, %lld) is outside its base of %lld elements", (long long)offset,
                            (long long)(offset + numel), (long long)base->numel);
    memset(view, 0, sizeof *view);
    view->dtype = base->dtype;
    view->ndim = ndim;
    for (int i = 0; i < ndim; i++) view->shape[i] = shape[i];
    view->numel = numel;
    view->dev = base->dev;
    view->data = dp_tensor_at(base, offset);
    return DP_OK;
}

uint64_t dp_tensor_bytes(const dp_tensor *t) { return (uint64_t)t->numel * dp_dtype_size(t->dtype); }

void *dp_tensor_at(const dp_tensor *t, int64_t i) {
    return t->data ? (char *)t->data + (size_t)i * dp_dtype_size(t->dtype) : NULL;
}

const char *dp_tensor_describe(const dp_tensor *t, char *buf, size_t n) {
    char shape[96] = "";
    size_t off = 0;
    for (int i = 0; i < t->ndim && off < sizeof shape; i++) {
        int k = snprintf(shape + off, sizeof shape - off, "%s%lld", i ? "x" : "", (long long)t->shape[i]);
        if (k > 0) off += (size_t)k;
    }
    if (!t->dev) {
        snprintf(buf, n, "tensor(freed)");
        return buf;
    }
    snprintf(buf, n, "%s[%s] %s %s %s", dp_dtype_name(t->dtype), shape, dp_device_kind_name(t->dev->kind),
             t->alloc.live ? dp_category_name((dp_category)t->alloc.category) : "view",
             t->alloc.live ? dp_module_name(t->alloc.module) : "");
    return buf;
}

static int is_float(dp_dtype t) { return t == DP_F32 || t == DP_BF16; }

int dp_tensor_copy(dp_tensor *dst, const dp_tensor *src) {
    if (dst->numel != src->numel)
        return dp_error_set(DP_EINVAL, "copy: sizes differ (%lld and %lld elements)", (long long)dst->numel,
                            (long long)src->numel);
    if (dst->dtype != src->dtype && !(is_float(dst->dtype) && is_float(src->dtype)))
        return dp_error_set(DP_EINVAL, "copy: cannot convert %s to %s", dp_dtype_name(src->dtype),
                            dp_dtype_name(dst->dtype));
    uint64_t bytes = dp_tensor_bytes(src);
    dp_device *sd = src->dev, *dd = dst->dev;
    if (sd == dd) {
        if (dst->dtype != src->dtype) {
            dp_ledger_add("cast", 0, (double)(bytes + dp_tensor_bytes(dst)));
            return DP_DISPATCH(dd, cast, dst->dtype, dst->data, src->dtype, src->data, (size_t)src->numel);
        }
        dp_ledger_add("copy", 0, 2.0 * (double)bytes);
        return DP_DISPATCH(dd, memcpy, dst->data, src->data, (size_t)bytes, DP_COPY_D2D);
    }
    if (dst->dtype != src->dtype)
        return dp_error_set(DP_ENOTSUP,
                            "copy: converting %s to %s across devices is not supported; "
                            "convert on one device first",
                            dp_dtype_name(src->dtype), dp_dtype_name(dst->dtype));
    if (sd->kind == DP_DEV_PLAN || dd->kind == DP_DEV_PLAN) return DP_OK; /* nothing to move */
    if (sd->kind == DP_DEV_CPU) {
        dp_ledger_add("copy_h2d", 0, (double)bytes);
        return DP_DISPATCH(dd, memcpy, dst->data, src->data, (size_t)bytes, DP_COPY_H2D);
    }
    if (dd->kind == DP_DEV_CPU) {
        dp_ledger_add("copy_d2h", 0, (double)bytes);
        return DP_DISPATCH(sd, memcpy, dst->data, src->data, (size_t)bytes, DP_COPY_D2H);
    }
    return dp_error_set(DP_ENOTSUP, "copy between %s and %s", dp_device_kind_name(sd->kind),
                        dp_device_kind_name(dd->kind));
}

int dp_tensor_to_host(const dp_tensor *t, void *host, uint64_t bytes) {
    if (bytes != dp_tensor_bytes(t))
        return dp_error_set(DP_EINVAL, "to_host: %llu bytes asked, tensor has %llu", (unsigned long long)bytes,
                            (unsigned long long)dp_tensor_bytes(t));
    if (t->dev->kind == DP_DEV_PLAN) {
        memset(host, 0, (size_t)bytes); /* a plan tensor reads as zeros */
        return DP_OK;
    }
    return DP_DISPATCH(t->dev, memcpy, host, t->data, (size_t)bytes, DP_COPY_D2H);
}

int dp_tensor_from_host(dp_tensor *t, const void *host, uint64_t bytes) {
    if (bytes != dp_tensor_bytes(t))
        return dp_error_set(DP_EINVAL, "from_host: %llu bytes given, tensor has %llu", (unsigned long long)bytes,
                            (unsigned long long)dp_tensor_bytes(t));
    return DP_DISPATCH(t->dev, memcpy, t->data, host, (size_t)bytes, DP_COPY_H2D);
}

static int f32_host_check(const dp_tensor *t, int64_t n, const char *op) {
    if (n == t->numel && (t->dtype == DP_F32 || t->dtype == DP_BF16)) return DP_OK;
    return dp_error_set(DP_EINVAL, "%s: %lld f32 values for a %s tensor of %lld elements", op, (long long)n,
                        dp_dtype_name(t->dtype), (long long)t->numel);
}

int dp_tensor_from_host_f32(dp_tensor *t, const float *host, int64_t n) {
    DP_TRY(f32_host_check(t, n, "from_host_f32"));
    if (t->dtype == DP_F32) return dp_tensor_from_host(t, host, (uint64_t)n * sizeof(float));
    uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    if (!h) return dp_error_set(DP_EOOM, "from_host_f32: out of host memory for %lld values", (long long)n);
    for (int64_t i = 0; i < n; i++) h[i] = dp_f32_to_bf16(host[i]);
    int rc = dp_tensor_from_host(t, h, (uint64_t)n * sizeof *h);
    free(h);
    return rc;
}

int dp_tensor_to_host_f32(const dp_tensor *t, float *host, int64_t n) {
    DP_TRY(f32_host_check(t, n, "to_host_f32"));
    if (t->dtype == DP_F32) return dp_tensor_to_host(t, host, (uint64_t)n * sizeof(float));
    uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    if (!h) return dp_error_set(DP_EOOM, "to_host_f32: out of host memory for %lld values", (long long)n);
    int rc = dp_tensor_to_host(t, h, (uint64_t)n * sizeof *h);
    for (int64_t i = 0; rc == DP_OK && i < n; i++) host[i] = dp_bf16_to_f32(h[i]);
    free(h);
    return rc;
}

int dp_tensor_fill(dp_tensor *t, double value) {
    dp_ledger_add("fill", 0, (double)dp_tensor_bytes(t));
    return DP_DISPATCH(t->dev, fill, t->dtype, t->data, (size_t)t->numel, value);
}

int dp_tensor_rand(dp_tensor *t, dp_rand_dist dist, float a, float b, uint64_t seed, uint64_t stream) {
    if (!is_float(t->dtype))
        return dp_error_set(DP_EINVAL, "rand: dtype %s is not a float type (f32 or bf16)", dp_dtype_name(t->dtype));
    dp_ledger_add("rand", 0, (double)dp_tensor_bytes(t));
    return DP_DISPATCH(t->dev, rand, t->dtype, t->data, (size_t)t->numel, dist, a, b, seed, stream, 0, 0, 1.0f);
}
