/* dpsgd_sample_grads.c: the per-sample gradients DP takes directly, being small: a bias's (its
 * output gradient summed over the tokens) and a norm layer's gain and bias (B x d each). The norm
 * pass's hooks keep or free them (dpsgd_hooks.c), twopass's forming hooks sum them by the clip
 * factors (dpsgd_form.c). */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"

int dpsgd_bias_grads(dpsgd *dp, const dp_param *b, const dp_tensor *G, dp_category cat, dp_tensor *out) {
    int64_t B = G->shape[0], T = G->shape[1], p = G->shape[2];
    int64_t shape[2] = {B, p};
    DP_TRY(dp_tensor_init_module(out, dp->dev, DP_F32, 2, shape, cat, b->module));
    dp_ledger_add("dp_token_sum", (double)(B * T * p),
                  (double)(B * T * p) * (double)dp_dtype_size(G->dtype) + 4.0 * (double)(B * p));
    int rc = DPSGD_DISPATCH(dp->dev, token_sum, G->dtype, B, T, p, G->data, out->data);
    if (rc != DP_OK) dp_tensor_release(out);
    return rc;
}

int dpsgd_norm_layer_grads(dpsgd *dp, const dp_param *owner, const dp_param *b, const dp_tensor *x,
                           const dp_tensor *mean, const dp_tensor *rstd, const dp_tensor *G, dp_category cat_w,
                           dp_category cat_b, dp_tensor *dw, dp_tensor *db) {
    int64_t B = x->shape[0], T = x->shape[1], d = x->shape[2];
    int64_t shape[2] = {B, d};
    *db = (dp_tensor){0};
    DP_TRY(dp_tensor_init_module(dw, dp->dev, DP_F32, 2, shape, cat_w, owner->module));
    int rc = b ? dp_tensor_init_module(db, dp->dev, DP_F32, 2, shape, cat_b, b->module) : DP_OK;
    if (rc == DP_OK) {
        double n = (double)(B * T * d), es = (double)dp_dtype_size(x->dtype);
        dp_ledger_add("dp_norm_grads", (mean ? 5.0 : 4.0) * n,
                      2.0 * n * es + 8.0 * (double)(B * T) + 4.0 * (double)(B * d) * (b ? 2.0 : 1.0));
        rc = DPSGD_DISPATCH(dp->dev, norm_grads, x->dtype, B, T, d, x->data, mean ? mean->data : NULL, rstd->data,
                            G->data, dw->data, b ? db->data : NULL);
    }
    if (rc != DP_OK) {
        dp_tensor_release(dw);
        dp_tensor_release(db);
    }
    return rc;
}
