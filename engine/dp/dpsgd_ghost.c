/* dpsgd_ghost.c: ghost norms through T x T Gram matrices (Goodfellow's trick, as Opacus's ghost
 * clipping): ||g_i^T a_i||^2 = <a_i a_i^T, g_i g_i^T>, 2 B T^2 (d + p) flops and 2 B T^2 floats.
 * An embedding's per-sample gradient scatters its output-gradient rows by token id, so its
 * squared norm is <g_i g_i^T, M_i> with M_i[s,t] = [ids_s == ids_t] (the mask is applied on the
 * fly, never stored). A tied head's cross term needs the rows of its per-sample gradient at the
 * sample's ids: the gathered T x T matrix h[s,u] = g_head[s, ids_u], then h^T a. Linears that
 * read one input (llama's q, k, v; gate and up), bracketed by the model (shared_input), share
 * that input's Gram: formed by the first, freed at the bracket's end, or before a Gram of another
 * input is formed within it (LoRA's B factors read their own), so that at most two are live, as
 * without the bracket. */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"

/* gram[i] = x[i] x[i]^T (B x T x T f32, `temp`) for x of B x T x k */
static int gram(dpsgd *dp, const dp_tensor *x, uint32_t module, dp_tensor *out) {
    int64_t B = x->shape[0], T = x->shape[1], k = x->shape[2];
    int64_t shape[3] = {B, T, T};
    DP_TRY(dp_tensor_init_module(out, dp->dev, DP_F32, 3, shape, DP_CAT_TEMP, module));
    int rc = dp_gemm_batched(dp->dev, "dp_ghost_gram", B, T, T, k, 1.0f, x->dtype, DP_MAT(x->data, k, T * k),
                             DP_MAT_T(x->data, k, T * k), 0.0f, DP_F32, out->data);
    if (rc != DP_OK) dp_tensor_release(out);
    return rc;
}

int dpsgd_ghost_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                       dp_tensor *row, int accumulate) {
    int64_t B = A->shape[0], T = A->shape[1];
    dp_tensor own = {0}, gg;
    const dp_tensor *ga = &own;
    if (A == dp->shared.src) { /* the model's bracket: A's Gram formed once for the linears that read A */
        if (!dp->shared.gram.alloc.live) DP_TRY(gram(dp, A, w->module, &dp->shared.gram));
        ga = &dp->shared.gram;
    } else { /* another input within the bracket (a LoRA B factor's): the shared Gram goes first, so
              * that no more than two T x T Grams are ever live (it is formed again at its next use) */
        dp_tensor_release(&dp->shared.gram);
        DP_TRY(gram(dp, A, w->module, &own));
    }
    int rc = gram(dp, G, w->module, &gg);
    if (rc == DP_OK) {
        double n = (double)(B * T * T);
        dp_ledger_add("dp_ghost_dot", 2.0 * n, 8.0 * n + 4.0 * (double)B * (accumulate ? 2.0 : 1.0));
        rc = DPSGD_DISPATCH(dp->dev, batched_dot, B, T * T, DP_F32, ga->data, DP_F32, gg.data, scale * scale, row->data,
                            accumulate);
        dp_tensor_release(&gg);
    }
    dp_tensor_release(&own);
    return rc;
}

int dpsgd_ghost_embedding(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *G, dp_tensor *row,
                          int accumulate) {
    int64_t B = G->shape[0], T = G->shape[1];
    dp_tensor gg;
    DP_TRY(gram(dp, G, wte->module, &gg));
    double n = (double)(B * T * T);
    dp_ledger_add("dp_ghost_mask_dot", 2.0 * n, 4.0 * n + 4.0 * (double)(B * T) + 4.0 * (double)B);
    int rc = DPSGD_DISPATCH(dp->dev, gram_dot_masked, B, T, gg.data, ids->data, 1.0f, row->data, accumulate);
    dp_tensor_release(&gg);
    return rc;
}

int dpsgd_ghost_tied_rows(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *A, const dp_tensor *G,
                          dp_tensor *rows) {
    int64_t B = A->shape[0], T = A->shape[1], d = A->shape[2], V = G->shape[2];
    int64_t hs[3] = {B, T, T}, rs[3] = {B, T, d};
    dp_tensor h;
    DP_TRY(dp_tensor_init_module(&h, dp->dev, G->dtype, 3, hs, DP_CAT_TEMP, wte->module));
    double es = (double)dp_dtype_size(G->dtype);
    dp_ledger_add("dp_gather_cols", 0.0, 2.0 * (double)(B * T * T) * es + 4.0 * (double)(B * T));
    int rc = DPSGD_DISPATCH(dp->dev, gather_cols, G->dtype, B, T, V, G->data, ids->data, h.data);
    if (rc == DP_OK) rc = dp_tensor_init_module(rows, dp->dev, DP_F32, 3, rs, DP_CAT_PER_SAMPLE_GRADS, wte->module);
    if (rc == DP_OK) {
        /* rows[i] (T x d) = h[i]^T (T x T) a[i] (T x d) */
        rc = dp_gemm_batched(dp->dev, "dp_tied_rows", B, T, d, T, 1.0f, A->dtype, DP_MAT_T(h.data, T, T * T),
                             DP_MAT(A->data, d, T * d), 0.0f, DP_F32, rows->data);
        if (rc != DP_OK) dp_tensor_release(rows);
    }
    dp_tensor_release(&h);
    return rc;
}
