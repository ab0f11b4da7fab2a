/* dpsgd_materialize.c: per-sample gradients of a linear layer, instantiated (Opacus's hooks mode):
 * psg[i] = scale g_i^T a_i, one batched GEMM of 2 B T p d flops into B x p x d floats. The norm is
 * then a row-wise sum of squares; bk may keep psg as the book of the clipped sum. Where bk keeps
 * the output gradient instead (the head's: dpsgd_hooks.c), the norms come from one sample's
 * gradient at a time, each the same GEMM. */
#include "dpsgd_impl.h"

#include "error.h"
#include "ops.h"

int dpsgd_materialize_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                             dp_tensor *psg) {
    int64_t B = A->shape[0], T = A->shape[1], d = A->shape[2], p = G->shape[2];
    int64_t shape[3] = {B, p, d};
    DP_TRY(dp_tensor_init_module(psg, dp->dev, DP_F32, 3, shape, DP_CAT_PER_SAMPLE_GRADS, w->module));
    /* psg[i] (p x d) = scale * G[i]^T (p x T) A[i] (T x d) */
    int rc = dp_gemm_batched(dp->dev, "dp_per_sample_grad", B, p, d, T, scale, A->dtype, DP_MAT_T(G->data, p, T * p),
                             DP_MAT(A->data, d, T * d), 0.0f, DP_F32, psg->data);
    if (rc != DP_OK) dp_tensor_release(psg);
    return rc;
}

int dpsgd_materialize_norms(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                            dp_tensor *row, int accumulate) {
    int64_t B = A->shape[0], T = A->shape[1], d = A->shape[2], p = G->shape[2];
    int64_t shape[3] = {1, p, d}, one = 1;
    dp_tensor psg;
    DP_TRY(dp_tensor_init_module(&psg, dp->dev, DP_F32, 3, shape, DP_CAT_PER_SAMPLE_GRADS, w->module));
    int rc = DP_OK;
    for (int64_t i = 0; i < B && rc == DP_OK; i++) {
        dp_tensor ri;
        rc = dp_gemm_batched(dp->dev, "dp_per_sample_grad", 1, p, d, T, scale, A->dtype,
                             DP_MAT_T(dp_tensor_at(G, i * T * p), p, T * p),
                             DP_MAT(dp_tensor_at(A, i * T * d), d, T * d), 0.0f, DP_F32, psg.data);
        if (rc == DP_OK) rc = dp_tensor_view(&ri, row, i, 1, &one);
        if (rc == DP_OK) rc = dp_sumsq_rows(&ri, &psg, accumulate);
    }
    dp_tensor_release(&psg);
    return rc;
}
