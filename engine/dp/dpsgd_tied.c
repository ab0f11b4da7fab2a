/* dpsgd_tied.c: the cross term of a tied GPT head/embedding, 2 sum_u <G_emb[i,u], r[i,u]> with
 * r[i,u,:] = (g_head,i)[ids[i,u], :], the rows of the head's per-sample gradient at sample i's ids.
 *
 * Twopass norms form r for the whole batch in the head's hook and hold it (B x T x d f32) until the
 * embedding's hook, the last of the backward. Book-keeping keeps the head's output gradient and
 * input until the clip anyway, so it forms r in the embedding's hook instead, one sample at a time:
 * nothing is held across the backward, and the transient is one sample's rows (T x d f32), not B. */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"

/* The bk book of the tied head wte, or NULL. */
static const dpsgd_book *head_book(const dpsgd *dp, const dp_param *wte) {
    for (int k = 0; k < dp->n_books; k++)
        if (dp->books[k].kind == DPSGD_BOOK_LINEAR && dp->books[k].param == wte) return &dp->books[k];
    return NULL;
}

int dpsgd_tied_rows(dpsgd *dp, dpsgd_formulation form, const dp_param *wte, const dp_tensor *ids, const dp_tensor *A,
                    const dp_tensor *G, float scale, dp_tensor *rows) {
    if (form == DPSGD_FORM_GHOST)
        DP_TRY(dpsgd_ghost_tied_rows(dp, wte, ids, A, G, rows));
    else
        DP_TRY(dpsgd_flash_tied_rows(dp, wte, ids, A, G, rows));
    if (scale == 1.0f) return DP_OK; /* a scaled head (not one we build) scales its rows too */
    int rc = dp_scale(rows, scale);
    if (rc != DP_OK) dp_tensor_release(rows);
    return rc;
}

/* row[i] += 2 <G[i], rows[i - i0]> for the nb samples from i0 (rows: nb x T x d f32) */
static int cross(dpsgd *dp, int64_t i0, int64_t nb, const dp_tensor *G, const dp_tensor *rows, dp_tensor *row) {
    int64_t T = G->shape[1], d = G->shape[2];
    double n = (double)(nb * T * d), es = (double)dp_dtype_size(G->dtype);
    dp_ledger_add("dp_tied_cross", 2.0 * n, n * (es + 4.0) + 8.0 * (double)nb);
    return DPSGD_DISPATCH(dp->dev, batched_dot, nb, T * d, G->dtype, dp_tensor_at(G, i0 * T * d), DP_F32, rows->data,
                          2.0f, dp_tensor_at(row, i0), 1);
}

int dpsgd_tied_cross(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *G, dp_tensor *row) {
    int64_t B = G->shape[0], T = G->shape[1], d = G->shape[2];
    if (!dpsgd_keeps_books(dp)) return cross(dp, 0, B, G, &dp->tied.rows, row); /* the head's hook left them */
    const dpsgd_book *bk = head_book(dp, wte);
    if (!bk)
        return dp_error_set(DP_EINTERNAL, "dp: the tied head '%s' kept no output gradient for its cross term",
                            wte->name);
    const dp_tensor *A = &bk->input, *Gh = &bk->out_grad;
    int64_t V = Gh->shape[2];
    if (A->shape[0] != B || A->shape[1] != T || Gh->shape[0] != B || Gh->shape[1] != T)
        return dp_error_set(DP_EINVAL, "dp: the tied head '%s' saw a batch of %lld x %lld, its embedding %lld x %lld",
                            wte->name, (long long)A->shape[0], (long long)A->shape[1], (long long)B, (long long)T);
    for (int64_t i = 0; i < B; i++) {
        int64_t sa[3] = {1, T, d}, sg[3] = {1, T, V}, si[2] = {1, T};
        dp_tensor ai, gi, idi, rows;
        DP_TRY(dp_tensor_view(&ai, A, i * T * d, 3, sa));
        DP_TRY(dp_tensor_view(&gi, Gh, i * T * V, 3, sg));
        DP_TRY(dp_tensor_view(&idi, ids, i * T, 2, si));
        DP_TRY(dpsgd_tied_rows(dp, dp->tied.form, wte, &idi, &ai, &gi, bk->scale, &rows));
        int rc = cross(dp, i, 1, G, &rows, row);
        dp_tensor_release(&rows);
        DP_TRY(rc);
    }
    return DP_OK;
}
