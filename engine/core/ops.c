/* ops.c: shape checks, ledger and dispatch of the basic ops. */
#include "ops.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"

static int same_device(const dp_tensor *a, const dp_tensor *b, const char *op) {
    if (a->dev == b->dev) return DP_OK;
    return dp_error_set(DP_EINVAL, "%s: operands live on different devices (%s and %s)", op,
                        dp_device_kind_name(a->dev->kind), dp_device_kind_name(b->dev->kind));
}

static int same_numel(const dp_tensor *a, const dp_tensor *b, const char *op) {
    if (a->numel == b->numel && a->dtype == b->dtype) return DP_OK;
    return dp_error_set(DP_EINVAL, "%s: operands differ (%lld %s and %lld %s elements)", op, (long long)a->numel,
                        dp_dtype_name(a->dtype), (long long)b->numel, dp_dtype_name(b->dtype));
}

/* Records op in the ledger and runs g on dev. */
static int gemm_ex(dp_device *dev, const char *op, const dp_gemm_args *g) {
    double ab = (double)dp_dtype_size(g->ab_type), cs = (double)dp_dtype_size(g->c_type);
    double batch = (double)g->batch, m = (double)g->m, n = (double)g->n, k = (double)g->k;
    double bytes = (g->stride_a ? batch : 1.0) * m * k * ab + (g->stride_b ? batch : 1.0) * k * n * ab +
                   batch * m * n * cs * (g->beta != 0.0f ? 2.0 : 1.0);
    dp_ledger_add(op, 2.0 * batch * m * n * k, bytes);
    return DP_DISPATCH(dev, gemm, g);
}

int dp_gemm_batched(dp_device *dev, const char *op, int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                    dp_dtype ab_type, dp_gemm_mat a, dp_gemm_mat b, float beta, dp_dtype c_type, void *c) {
    dp_gemm_args g = {.trans_a = a.trans, .trans_b = b.trans, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
                      .ab_type = ab_type, .c_type = c_type, .a = a.data, .lda = a.ld, .stride_a = a.stride,
                      .b = b.data, .ldb = b.ld, .stride_b = b.stride, .c = c, .ldc = n, .stride_c = m * n,
                      .batch = batch};
    return gemm_ex(dev, op, &g);
}

/* rows and columns of t's last two dims (a 2-D matrix or a batch of them) */
static void mat_dims(const dp_tensor *t, int64_t *rows, int64_t *cols, int64_t *batch) {
    *rows = t->shape[t->ndim - 2];
    *cols = t->shape[t->ndim - 1];
    *batch = t->ndim == 3 ? t->shape[0] : 1;
}

int dp_matmul(dp_tensor *C, const dp_tensor *A, int trans_a, const dp_tensor *B, int trans_b, float alpha, float beta) {
    DP_TRY(same_device(A, B, "matmul"));
    DP_TRY(same_device(A, C, "matmul"));
    const dp_tensor *ts[3] = {A, B, C};
    for (int i = 0; i < 3; i++)
        if (ts[i]->ndim != 2 && ts[i]->ndim != 3)
            return dp_error_set(DP_EINVAL, "matmul: operand %c has rank %d (expected 2 or 3)", "ABC"[i], ts[i] -> ndim);
    if (A->dtype != B->dtype || A->dtype == DP_I32 || C->dtype == DP_I32)
        return dp_error_set(DP_EINVAL, "matmul: A and B must share a float dtype (got %s and %s), C f32 or bf16",
                            dp_dtype_name(A->dtype), dp_dtype_name(B->dtype));
    int64_t ar, ac, ba, br, bc, bb, cr, cc, bc_;
    mat_dims(A, &ar, &ac, &ba);
    mat_dims(B, &br, &bc, &bb);
    mat_dims(C, &cr, &cc, &bc_);
    int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac;
    int64_t k2 = trans_b ? bc : br, n = trans_b ? br : bc;
    if (k != k2 || m != cr || n != cc)
        return dp_error_set(DP_EINVAL, "matmul: shapes do not agree: op(A) is %lldx%lld, op(B) %lldx%lld, C %lldx%lld",
                            (long long)m, (long long)k, (long long)k2, (long long)n, (long long)cr, (long long)cc);
    int64_t batch = bc_;
    if ((A->ndim == 3 && ba != batch) || (B->ndim == 3 && bb != batch) || (C->ndim == 2 && (ba > 1 || bb > 1)))
        return dp_error_set(DP_EINVAL, "matmul: batch sizes do not agree (A %lld, B %lld, C %lld)", (long long)ba,
                            (long long)bb, (long long)batch);
    return dp_gemm_batched(A->dev, batch > 1 ? "gemm_batched" : "gemm", batch, m, n, k, alpha, A->dtype,
                           (dp_gemm_mat){A->data, ac, A->ndim == 3 ? ar * ac : 0, trans_a},
                           (dp_gemm_mat){B->data, bc, B->ndim == 3 ? br * bc : 0, trans_b}, beta, C->dtype, C->data);
}

int dp_add(dp_tensor *out, const dp_tensor *x, const dp_tensor *y) {
    DP_TRY(same_device(x, y, "add"));
    DP_TRY(same_device(x, out, "add"));
    DP_TRY(same_numel(x, y, "add"));
    DP_TRY(same_numel(x, out, "add"));
    dp_ledger_add("add", (double)x->numel, 3.0 * (double)dp_tensor_bytes(x));
    return DP_DISPATCH(x->dev, add, x->dtype, (size_t)x->numel, x->data, y->data, out->data);
}

int dp_scale(dp_tensor *x, float alpha) {
    dp_ledger_add("scale", (double)x->numel, 2.0 * (double)dp_tensor_bytes(x));
    return DP_DISPATCH(x->dev, scale, x->dtype, (size_t)x->numel, x->data, alpha);
}

int dp_axpy(dp_tensor *y, float alpha, const dp_tensor *x) {
    DP_TRY(same_device(x, y, "axpy"));
    DP_TRY(same_numel(x, y, "axpy"));
    dp_ledger_add("axpy", 2.0 * (double)x->numel, 3.0 * (double)dp_tensor_bytes(x));
    return DP_DISPATCH(x->dev, axpy, x->dtype, (size_t)x->numel, alpha, x->data, y->data);
}

int dp_sumsq_rows(dp_tensor *out, const dp_tensor *x, int accumulate) {
    DP_TRY(same_device(x, out, "sumsq_rows"));
    if (out->dtype != DP_F32) return dp_error_set(DP_EINVAL, "sumsq_rows: out must be f32");
    if (out->numel == 0 || x->numel % out->numel)
        return dp_error_set(DP_EINVAL, "sumsq_rows: %lld elements do not split into %lld rows", (long long)x->numel,
                            (long long)out->numel);
    dp_ledger_add("sumsq", 2.0 * (double)x->numel,
                  (double)dp_tensor_bytes(x) + (accumulate ? 2.0 : 1.0) * (double)dp_tensor_bytes(out));
    return DP_DISPATCH(x->dev, sumsq_rows, x->dtype, (size_t)out->numel, (size_t)(x->numel / out->numel), x->data,
                       out->data, accumulate);
}

int dp_sumsq(const dp_tensor *x, double *out) {
    *out = 0.0;
    dp_tensor r;
    int64_t one = 1;
    DP_TRY(dp_tensor_init(&r, x->dev, DP_F32, 1, &one, DP_CAT_TEMP));
    int rc = x->numel ? dp_sumsq_rows(&r, x, 0) : dp_tensor_fill(&r, 0.0);
    float v = 0.0f;
    if (rc == DP_OK) rc = dp_tensor_to_host(&r, &v, sizeof v);
    dp_tensor_release(&r);
    *out = v;
    return rc;
}
