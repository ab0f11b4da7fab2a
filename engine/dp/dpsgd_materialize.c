/* dpsgd_materialize.c: per-sample gradients of a linear layer, instantiated (Opacus's hooks mode):
 * psg[i] = scale g_i^T a_i, one batched GEMM of 2 B T p d flops into B x p x d floats. The norm is
 * then a row-wise sum of squares; bk may keep psg as the book of the clipped sum. */
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
