/* dpsgd_form.c: twopass's second backward under several clipping groups. A second backward whose
 * loss is scaled per sample (flat twopass) gives every tensor of a sample one factor; with
 * groups, each tensor needs its own group's. So this backward runs with unscaled per-sample losses
 * (s_i = 1) and no weight gradients of the model's own, and each hook forms its layer's clipped
 * gradient as the backward reaches it, from the layer's input A and output gradient G with the
 * factors c of its tensor's group (dp->clip_dev, n_groups x B):
 *   linear weight  grad += scale G^T (c (.) A), through a scaled copy of A or of G, whichever is
 *                  smaller (`temp`, freed at once; the backward goes on reading A and G);
 *   bias           grad += c^T (sum_t G_it), norm gains and biases grad += c^T (per-sample grads);
 *   embedding      grad[ids] += (c (.) G) rows, positions grad[t] += sum_i c_i G_it.
 * A tied head is the token table's first use (its G^T A is V x d) and the embedding its second,
 * both by the table's one group. Nothing is kept between the hooks: the memory is twopass's. */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "layer_ops.h"
#include "ledger.h"
#include "ops.h"

static int is_trainable(const dp_param *p) { return p && p->trainable; }

/* A copy of x under `temp` with p's module, its rows scaled by p's group's factors. */
static int scaled_copy(dpsgd *dp, const dp_param *p, const dp_tensor *x, dp_tensor *out) {
    dp_tensor c;
    const float *host = NULL;
    DP_TRY(dpsgd_group_factors(dp, p, dp->form_factors, &c, &host));
    DP_TRY(dp_tensor_init_module(out, dp->dev, x->dtype, x->ndim, x->shape, DP_CAT_TEMP, p->module));
    int rc = dp_tensor_copy(out, x);
    if (rc == DP_OK) rc = dpsgd_scale_samples(dp, out, &c);
    if (rc != DP_OK) dp_tensor_release(out);
    return rc;
}

/* grad += c^T rows, rows B x n per-sample gradients of p (freed after). */
static int form_per_sample(dpsgd *dp, dp_param *p, dp_tensor *rows) {
    dp_tensor c;
    const float *host = NULL;
    int64_t B = rows->shape[0];
    int rc = dpsgd_group_factors(dp, p, dp->form_factors, &c, &host);
    if (rc == DP_OK) rc = dpsgd_ensure_grad(dp, p);
    if (rc == DP_OK) rc = dpsgd_weighted_sum(dp, &p->grad, &c, host, rows, B, rows->numel / B, "dp_clip_sum");
    dp_tensor_release(rows);
    return rc;
}

static int form_weight(dpsgd *dp, dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale) {
    int64_t N = A->shape[0] * A->shape[1], d = A->shape[2], p = G->shape[2];
    dp_tensor x;
    int scale_input = d <= p; /* scale the narrower of the two */
    DP_TRY(scaled_copy(dp, w, scale_input ? A : G, &x));
    int rc = dpsgd_ensure_grad(dp, w);
    /* grad (p x d) += scale * G^T (p x N) A (N x d), one of them scaled by c */
    if (rc == DP_OK)
        rc = dp_gemm_batched(dp->dev, "dp_clip_gemm", 1, p, d, N, scale, G->dtype,
                             DP_MAT_T(scale_input ? G->data : x.data, p, 0),
                             DP_MAT(scale_input ? x.data : A->data, d, 0), 1.0f, DP_F32, w->grad.data);
    dp_tensor_release(&x);
    return rc;
}

static int form_bias(dpsgd *dp, dp_param *b, const dp_tensor *G) {
    dp_tensor psb;
    DP_TRY(dpsgd_bias_grads(dp, b, G, DP_CAT_TEMP, &psb));
    return form_per_sample(dp, b, &psb);
}

static int hook_linear(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *A, const dp_tensor *G,
                       float scale) {
    dpsgd *dp = ctx;
    (void)m;
    if (is_trainable(w)) DP_TRY(form_weight(dp, w, A, G, scale));
    if (is_trainable(b)) DP_TRY(form_bias(dp, b, G));
    return DP_OK;
}

static int hook_norm(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *x, const dp_tensor *mean,
                     const dp_tensor *rstd, const dp_tensor *G) {
    dpsgd *dp = ctx;
    (void)m;
    int wt = is_trainable(w), bt = is_trainable(b);
    if (!wt && !bt) return DP_OK;
    dp_tensor dw, db;
    DP_TRY(dpsgd_norm_layer_grads(dp, wt ? w : b, bt ? b : NULL, x, mean, rstd, G, DP_CAT_TEMP, DP_CAT_TEMP, &dw, &db));
    int rc = wt ? form_per_sample(dp, w, &dw) : DP_OK; /* form_per_sample frees what it is given */
    if (!wt) dp_tensor_release(&dw);
    if (rc == DP_OK && bt)
        rc = form_per_sample(dp, b, &db);
    else
        dp_tensor_release(&db);
    return rc;
}

static int hook_embedding(void *ctx, dp_model *m, dp_param *wte, const dp_tensor *ids, const dp_tensor *G) {
    dpsgd *dp = ctx;
    (void)m;
    if (!is_trainable(wte)) return DP_OK;
    int64_t B = G->shape[0], T = G->shape[1], d = G->shape[2];
    dp_tensor x;
    DP_TRY(scaled_copy(dp, wte, G, &x));
    int rc = dpsgd_ensure_grad(dp, wte);
    double n = (double)(B * T * d);
    dp_ledger_add("dp_clip_embedding", n, n * ((double)dp_dtype_size(G->dtype) + 8.0) + 4.0 * (double)(B * T));
    if (rc == DP_OK)
        rc = DP_DISPATCH_LAYER(dp->dev, embedding_backward, G->dtype, x.data, ids->data, wte->grad.data, NULL, B * T, T,
                               d, wte->value.shape[0]);
    dp_tensor_release(&x);
    return rc;
}

static int hook_position(void *ctx, dp_model *m, dp_param *wpe, const dp_tensor *G) {
    dpsgd *dp = ctx;
    (void)m;
    if (!is_trainable(wpe)) return DP_OK;
    int64_t B = G->shape[0], T = G->shape[1], d = G->shape[2];
    dp_tensor c;
    const float *host = NULL;
    DP_TRY(dpsgd_group_factors(dp, wpe, dp->form_factors, &c, &host));
    DP_TRY(dpsgd_ensure_grad(dp, wpe));
    /* rows 0..T-1 of the table: sample i's gradient is G_i there */
    return dpsgd_weighted_sum(dp, &wpe->grad, &c, host, G, B, T * d, "dp_clip_sum");
}

dp_layer_hooks dpsgd_form_hooks(dpsgd *dp) {
    dp_layer_hooks h = {
        .ctx = dp,
        .linear = hook_linear,
        .norm = hook_norm,
        .embedding = hook_embedding,
        .position = hook_position,
    };
    return h;
}
