/* layers.c: operand checks, ledger and dispatch of the layer ops (see layers.h). */
#include "layers.h"

#include "dispatch.h"
#include "error.h"
#include "layer_ops.h"
#include "ledger.h"

static double es(const dp_tensor *t) { return (double)dp_dtype_size(t->dtype); }

static int need(int ok, const char *op, const char *what) {
    return ok ? DP_OK : dp_error_set(DP_EINVAL, "%s: %s", op, what);
}

static int is_act(const dp_tensor *t) { return t->dtype == DP_F32 || t->dtype == DP_BF16; }

/* x holds rows of d elements of a float dtype */
static int rows_of(const dp_tensor *x, int64_t d, const char *op, int64_t *rows) {
    *rows = 0;
    if (!is_act(x))
        return dp_error_set(DP_EINVAL, "%s: activations must be f32 or bf16 (got %s)", op, dp_dtype_name(x->dtype));
    if (d <= 0 || x->numel % d)
        return dp_error_set(DP_EINVAL, "%s: %lld elements are not rows of %lld", op, (long long)x->numel, (long long)d);
    *rows = x->numel / d;
    return DP_OK;
}

static int f32_of(const dp_tensor *t, int64_t n, const char *op, const char *name) {
    if (t->dtype == DP_F32 && t->numel == n) return DP_OK;
    return dp_error_set(DP_EINVAL, "%s: %s must be f32 with %lld elements (got %s with %lld)", op, name, (long long)n,
                        dp_dtype_name(t->dtype), (long long)t->numel);
}

static int same(const dp_tensor *a, const dp_tensor *b, const char *op) {
    if (a->dtype == b->dtype && a->numel == b->numel && a->dev == b->dev) return DP_OK;
    return dp_error_set(DP_EINVAL, "%s: operands differ (%lld %s and %lld %s elements)", op, (long long)a->numel,
                        dp_dtype_name(a->dtype), (long long)b->numel, dp_dtype_name(b->dtype));
}

int dp_layer_embedding_forward(dp_tensor *out, const dp_tensor *ids, const dp_tensor *wte, const dp_tensor *wpe,
                               int64_t T) {
    const char *op = "embedding_fwd";
    int64_t d = wte->ndim == 2 ? wte->shape[1] : 0, N;
    DP_TRY(rows_of(out, d, op, &N));
    DP_TRY(need(ids->dtype == DP_I32 && ids->numel == N && T > 0 && N % T == 0, op, "ids must be N = B*T i32"));
    if (wpe) DP_TRY(need(wpe->ndim == 2 && wpe->shape[1] == d && wpe->shape[0] >= T, op, "wpe must be P x d, P >= T"));
    DP_TRY(need(is_act(wte) && (!wpe || wpe->dtype == wte->dtype), op, "the tables must be f32 or bf16, both alike"));
    double nd = (double)N * (double)d;
    dp_ledger_add(op, wpe ? nd : 0, 4.0 * N + es(wte) * nd + (wpe ? es(wpe) * nd : 0) + es(out) * nd);
    return DP_DISPATCH_LAYER(out->dev, embedding_forward, out->dtype, wte->dtype, out->data, ids->data, wte->data,
                             wpe ? wpe->data : NULL, N, T, d);
}

int dp_layer_embedding_backward(const dp_tensor *dout, const dp_tensor *ids, dp_tensor *dwte, dp_tensor *dwpe,
                                int64_t T) {
    const char *op = "embedding_bwd";
    if (!dwte && !dwpe) return DP_OK;
    const dp_tensor *ref = dwte ? dwte : dwpe;
    int64_t d = ref->shape[ref->ndim - 1], N;
    DP_TRY(rows_of(dout, d, op, &N));
    DP_TRY(need(ids->dtype == DP_I32 && ids->numel == N && T > 0 && N % T == 0, op, "ids must be N = B*T i32"));
    int64_t V = dwte ? dwte->shape[0] : 0;
    double nd = (double)N * (double)d;
    double flops = (dwte ? nd : 0) + (dwpe ? nd : 0);
    double bytes = es(dout) * nd + 4.0 * N + (dwte ? 8.0 * nd : 0) + (dwpe ? 8.0 * (double)T * d : 0);
    dp_ledger_add(op, flops, bytes);
    return DP_DISPATCH_LAYER(dout->dev, embedding_backward, dout->dtype, dout->data, ids->data,
                             dwte ? dwte->data : NULL, dwpe ? dwpe->data : NULL, N, T, d, V);
}

int dp_layer_norm_forward(dp_tensor *out, dp_tensor *mean, dp_tensor *rstd, const dp_tensor *x, const dp_tensor *w,
                          const dp_tensor *b, float eps) {
    const char *op = b ? "layernorm_fwd" : "rmsnorm_fwd";
    int64_t d = w->numel, N;
    DP_TRY(rows_of(x, d, op, &N));
    DP_TRY(same(out, x, op));
    DP_TRY(f32_of(rstd, N, op, "rstd"));
    if (b) DP_TRY(f32_of(mean, N, op, "mean"));
    double nd = (double)N * (double)d;
    /* LayerNorm: sum, centred squares (3), normalise, gain, shift (4); RMSNorm: squares (2), 2 */
    dp_ledger_add(op, (b ? 8.0 : 4.0) * nd, 2.0 * es(x) * nd + (b ? 2.0 : 1.0) * (4.0 * d + 4.0 * N));
    if (b)
        return DP_DISPATCH_LAYER(x->dev, layernorm_forward, x->dtype, out->data, mean->data, rstd->data, x->data,
                                 w->data, b->data, N, d, eps);
    return DP_DISPATCH_LAYER(x->dev, rmsnorm_forward, x->dtype, out->data, rstd->data, x->data, w->data, N, d, eps);
}

int dp_layer_norm_backward(dp_tensor *dx, dp_tensor *dw, dp_tensor *db, const dp_tensor *dout, const dp_tensor *x,
                           const dp_tensor *w, const dp_tensor *mean, const dp_tensor *rstd, int accumulate) {
    const int layer = mean != NULL;
    const char *op = layer ? "layernorm_bwd" : "rmsnorm_bwd";
    int64_t d = w->numel, N;
    DP_TRY(rows_of(x, d, op, &N));
    DP_TRY(same(dx, x, op));
    DP_TRY(same(dout, x, op));
    DP_TRY(f32_of(rstd, N, op, "rstd"));
    if (dw) DP_TRY(f32_of(dw, d, op, "dw"));
    if (db) DP_TRY(need(layer && db->dtype == DP_F32 && db->numel == d, op, "db must be d f32 (LayerNorm only)"));
    double nd = (double)N * (double)d;
    /* xhat (2) and g = dout w (1) twice, the two row sums (3), dx (5); dw and db 2 each */
    double flops = (layer ? 14.0 : 12.0) * nd + (dw ? 2.0 * nd : 0) + (db ? 2.0 * nd : 0);
    double bytes = es(x) * nd * (accumulate ? 4.0 : 3.0) + 4.0 * ((layer ? 2.0 : 1.0) * N + d) + (dw ? 8.0 * d : 0) +
                   (db ? 8.0 * d : 0);
    dp_ledger_add(op, flops, bytes);
    if (layer)
        return DP_DISPATCH_LAYER(x->dev, layernorm_backward, x->dtype, dx->data, dw ? dw->data : NULL,
                                 db ? db->data : NULL, dout->data, x->data, w->data, mean->data, rstd->data, N, d,
                                 accumulate);
    return DP_DISPATCH_LAYER(x->dev, rmsnorm_backward, x->dtype, dx->data, dw ? dw->data : NULL, dout->data, x->data,
                             w->data, rstd->data, N, d, accumulate);
}

int dp_layer_bias_add(dp_tensor *out, const dp_tensor *bias) {
    int64_t rows;
    DP_TRY(rows_of(out, bias->numel, "bias_add", &rows));
    double n = (double)out->numel;
    dp_ledger_add("bias_add", n, 2.0 * es(out) * n + 4.0 * (double)bias->numel);
    return DP_DISPATCH_LAYER(out->dev, bias_add, out->dtype, out->data, bias->data, rows, bias->numel);
}

int dp_layer_bias_backward(dp_tensor *db, const dp_tensor *g) {
    int64_t rows;
    DP_TRY(rows_of(g, db->numel, "bias_bwd", &rows));
    double n = (double)g->numel;
    dp_ledger_add("bias_bwd", n, es(g) * n + 8.0 * (double)db->numel);
    return DP_DISPATCH_LAYER(g->dev, bias_backward, g->dtype, db->data, g->data, rows, db->numel);
}

int dp_layer_gelu_forward(dp_tensor *out, const dp_tensor *x) {
    DP_TRY(same(out, x, "gelu_fwd"));
    double n = (double)x->numel;
    dp_ledger_add("gelu_fwd", 9.0 * n, 2.0 * es(x) * n);
    return DP_DISPATCH_LAYER(x->dev, gelu_forward, x->dtype, out->data, x->data, x->numel);
}

int dp_layer_gelu_backward(dp_tensor *dx, const dp_tensor *dout, const dp_tensor *x, int accumulate) {
    DP_TRY(same(dx, x, "gelu_bwd"));
    DP_TRY(same(dout, x, "gelu_bwd"));
    double n = (double)x->numel;
    dp_ledger_add("gelu_bwd", (accumulate ? 19.0 : 18.0) * n, (accumulate ? 4.0 : 3.0) * es(x) * n);
    return DP_DISPATCH_LAYER(x->dev, gelu_backward, x->dtype, dx->data, dout->data, x->data, x->numel, accumulate);
}

int dp_layer_swiglu_forward(dp_tensor *out, const dp_tensor *gate, const dp_tensor *up) {
    DP_TRY(same(out, gate, "swiglu_fwd"));
    DP_TRY(same(up, gate, "swiglu_fwd"));
    double n = (double)gate->numel;
    dp_ledger_add("swiglu_fwd", 5.0 * n, 3.0 * es(gate) * n);
    return DP_DISPATCH_LAYER(gate->dev, swiglu_forward, gate->dtype, out->data, gate->data, up->data, gate->numel);
}

int dp_layer_swiglu_backward(dp_tensor *dgate, dp_tensor *dup, const dp_tensor *dout, const dp_tensor *gate,
                             const dp_tensor *up) {
    DP_TRY(same(dgate, gate, "swiglu_bwd"));
    DP_TRY(same(dup, gate, "swiglu_bwd"));
    DP_TRY(same(dout, gate, "swiglu_bwd"));
    DP_TRY(same(up, gate, "swiglu_bwd"));
    double n = (double)gate->numel;
    dp_ledger_add("swiglu_bwd", 11.0 * n, 5.0 * es(gate) * n);
    return DP_DISPATCH_LAYER(gate->dev, swiglu_backward, gate->dtype, dgate->data, dup->data, dout->data, gate->data,
                             up->data, gate->numel);
}

int dp_layer_rope(dp_tensor *x, int64_t T, int64_t H, const float *inv_freq, float scale, int inverse) {
    const char *op = inverse ? "rope_bwd" : "rope_fwd";
    int64_t d = x->shape[x->ndim - 1], N;
    DP_TRY(rows_of(x, d, op, &N));
    DP_TRY(need(H > 0 && d % H == 0 && (d / H) % 2 == 0 && T > 0 && N % T == 0, op,
                "rows must hold H heads of an even head dimension, N a multiple of T"));
    double nd = (double)N * (double)d;
    DP_TRY(need(inv_freq != NULL, op, "the inverse frequencies are missing"));
    /* 3 flops per element (a rotation of a pair is 6), and the angle, cos, sin and the two
     * scales per (row, pair) */
    dp_ledger_add(op, 3.0 * nd + 2.5 * (double)N * (double)(d / H), 2.0 * es(x) * nd);
    return DP_DISPATCH_LAYER(x->dev, rope, x->dtype, x->data, d, N, T, H, d / H, inv_freq, scale, inverse);
}

/* causal (query, key) pairs of B*H heads of T rows */
static double causal_pairs(int64_t B, int64_t T, int64_t H) {
    return (double)B * (double)H * (double)T * (double)(T + 1) / 2.0;
}

/* The q, k, v pointers and their row strides: three tensors (q N x H*hd, k and v N x Hkv*hd),
 * or one fused N x 3d tensor (H == Hkv). */
static int qkv_layout(const dp_tensor *q, const dp_tensor *k, const dp_tensor *v, int64_t H, int64_t Hkv, int64_t hd,
                      int64_t N, const char *op, const void **pq, const void **pk, const void **pv, int64_t *ld_q,
                      int64_t *ld_kv) {
    const int64_t d = H * hd, dkv = Hkv * hd;
    if (!k) {
        DP_TRY(need(H == Hkv, op, "a fused qkv tensor has as many key/value heads as query heads"));
        DP_TRY(need(is_act(q) && q->numel == 3 * N * d, op, "fused qkv must be N x 3d"));
        *pq = q->data, *pk = dp_tensor_at(q, d), *pv = dp_tensor_at(q, 2 * d), *ld_q = *ld_kv = 3 * d;
        return DP_OK;
    }
    DP_TRY(need(is_act(q) && q->numel == N * d, op, "q must be N x H*hd"));
    DP_TRY(need(k->dtype == q->dtype && k->dev == q->dev && k->numel == N * dkv, op, "k must be N x Hkv*hd"));
    DP_TRY(same(v, k, op));
    *pq = q->data, *pk = k->data, *pv = v->data, *ld_q = d, *ld_kv = dkv;
    return DP_OK;
}

/* out is B*T x H*hd, H a multiple of Hkv; sets *hd */
static int attention_shape(const dp_tensor *out, int64_t B, int64_t T, int64_t H, int64_t Hkv, const char *op,
                           int64_t *hd) {
    int64_t N = B * T, d = N > 0 ? out->numel / N : 0;
    DP_TRY(need(B > 0 && T > 0 && H > 0 && d > 0 && d % H == 0 && out->numel == N * d, op, "out must be B*T x H*hd"));
    DP_TRY(need(Hkv > 0 && H % Hkv == 0, op, "the query heads must be groups of the key/value heads (H % Hkv == 0)"));
    *hd = d / H;
    return DP_OK;
}

int dp_layer_attention_forward(dp_tensor *out, dp_tensor *lse, const dp_tensor *q, const dp_tensor *k,
                               const dp_tensor *v, int64_t B, int64_t T, int64_t H, int64_t Hkv, float scale) {
    const char *op = "attention_fwd";
    int64_t hd, N = B * T;
    DP_TRY(attention_shape(out, B, T, H, Hkv, op, &hd));
    DP_TRY(f32_of(lse, B * H * T, op, "lse"));
    const void *pq, *pk, *pv;
    int64_t ld_q, ld_kv;
    DP_TRY(qkv_layout(q, k, v, H, Hkv, hd, N, op, &pq, &pk, &pv, &ld_q, &ld_kv));
    DP_TRY(need(q->dtype == out->dtype, op, "q, k, v and out must share a dtype"));
    const double pairs = causal_pairs(B, T, H), nhd = (double)N * (double)hd;
    /* q.k and p v (2 hd each) plus scale, max, exp, sum and correction (5) per pair; bytes: q and
     * out (H heads), k and v (Hkv heads), lse */
    dp_ledger_add(op, (4.0 * hd + 5.0) * pairs,
                  es(out) * nhd * (2.0 * (double)H + 2.0 * (double)Hkv) + 4.0 * (double)lse->numel);
    return DP_DISPATCH_LAYER(out->dev, attention_forward, out->dtype, out->data, lse->data, pq, pk, pv, ld_q, ld_kv, B,
                             T, H, Hkv, hd, scale);
}

int dp_layer_attention_backward(dp_tensor *dq, dp_tensor *dk, dp_tensor *dv, const dp_tensor *dout,
                                const dp_tensor *out, const dp_tensor *lse, const dp_tensor *q, const dp_tensor *k,
                                const dp_tensor *v, dp_tensor *delta, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                float scale) {
    const char *op = "attention_bwd";
    int64_t hd, N = B * T;
    DP_TRY(attention_shape(out, B, T, H, Hkv, op, &hd));
    DP_TRY(same(dout, out, op));
    DP_TRY(f32_of(lse, B * H * T, op, "lse"));
    DP_TRY(f32_of(delta, B * H * T, op, "delta"));
    const void *pq, *pk, *pv, *gq, *gk, *gv;
    int64_t ld_q, ld_kv, ld_dq, ld_dkv;
    DP_TRY(qkv_layout(q, k, v, H, Hkv, hd, N, op, &pq, &pk, &pv, &ld_q, &ld_kv));
    DP_TRY(qkv_layout(dq, dk, dv, H, Hkv, hd, N, op, &gq, &gk, &gv, &ld_dq, &ld_dkv));
    DP_TRY(need(q->dtype == out->dtype && dq->dtype == out->dtype, op, "all operands must share a dtype"));
    const double pairs = causal_pairs(B, T, H), nhd = (double)N * (double)hd;
    /* pass 1 (dk, dv): s, p, dv, dp, ds, dk = 8 hd + 6; pass 2 (dq): s, p, dp, ds, dq = 6 hd + 5;
     * delta = rowsum(dout * out): 2 per element. Bytes: q, out, dout, dq (H heads), k, v, dk, dv
     * (Hkv heads), lse and delta */
    dp_ledger_add(op, (14.0 * hd + 11.0) * pairs + 2.0 * nhd * (double)H,
                  es(out) * nhd * (4.0 * (double)H + 4.0 * (double)Hkv) + 4.0 * (double)lse->numel +
                      8.0 * (double)delta->numel);
    return DP_DISPATCH_LAYER(out->dev, attention_backward, out->dtype, (void *)gq, (void *)gk, (void *)gv, ld_dq,
                             ld_dkv, dout->data, out->data, lse->data, pq, pk, pv, ld_q, ld_kv, delta->data, B, T, H,
                             Hkv, hd, scale);
}

int dp_layer_cross_entropy_forward(dp_tensor *losses, dp_tensor *lse, const dp_tensor *logits,
                                   const dp_tensor *targets) {
    const char *op = "cross_entropy_fwd";
    int64_t N = targets->numel, V = logits->shape[logits->ndim - 1], rows;
    DP_TRY(rows_of(logits, V, op, &rows));
    DP_TRY(need(targets->dtype == DP_I32 && rows == N, op, "targets must be one i32 per row of logits"));
    DP_TRY(f32_of(losses, N, op, "losses"));
    DP_TRY(f32_of(lse, N, op, "lse"));
    double nv = (double)N * (double)V;
    /* max, subtract, exp, sum per element */
    dp_ledger_add(op, 4.0 * nv, es(logits) * nv + 12.0 * N);
    return DP_DISPATCH_LAYER(logits->dev, cross_entropy_forward, logits->dtype, losses->data, lse->data, logits->data,
                             targets->data, N, V);
}

int dp_layer_cross_entropy_backward(dp_tensor *logits, const dp_tensor *lse, const dp_tensor *targets,
                                    const dp_tensor *sample_scale, int64_t T) {
    const char *op = "cross_entropy_bwd";
    int64_t N = targets->numel, V = logits->shape[logits->ndim - 1], rows;
    DP_TRY(rows_of(logits, V, op, &rows));
    DP_TRY(need(targets->dtype == DP_I32 && rows == N && T > 0 && N % T == 0, op,
                "targets must be one i32 per row of logits, B*T rows"));
    DP_TRY(f32_of(lse, N, op, "lse"));
    DP_TRY(f32_of(sample_scale, N / T, op, "sample_scale"));
    double nv = (double)N * (double)V;
    /* subtract, exp, one-hot, scale per element */
    dp_ledger_add(op, 4.0 * nv, 2.0 * es(logits) * nv + 8.0 * N + 4.0 * (double)(N / T));
    return DP_DISPATCH_LAYER(logits->dev, cross_entropy_backward, logits->dtype, logits->data, lse->data, targets->data,
                             sample_scale->data, N, T, V);
}
