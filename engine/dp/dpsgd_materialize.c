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
    /* clang-format off */
    dp_gemm_args g = {
        .trans_a = 1,
        .trans_b = 0,
        .m = p,
        .n = d,
        .k = T,
        .alpha = scale,
        .beta = 0.0f,
        .ab_type = A->dtype,
        .c_type = DP_F32,
        .a = G->data,
        .lda = p,
        .stride_a = T * p,
        .b = A->data,
        .ldb = d,
        .stride_b = T * d,
        .c = psg->data,
        .ldc = d,
        .stride_c = p * d,
        .batch = B,
    };
    /* clang-format on */
    int rc = dp_gemm_ex(dp->dev, "dp_per_sample_grad", &g);
    if (rc != DP_OK) dp_tensor_release(psg);
    return rc;
}
