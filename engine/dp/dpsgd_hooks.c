/* dpsgd_hooks.c: the backward hooks of a DP method. Each trainable tensor's per-sample squared norms
 * go to its B-float row; the per-layer formulation comes from the cost model; with bk the hook
 * also keeps what the clipped gradient will be formed from (dpsgd_clip.c), everything else it
 * allocated is freed before it returns. An output gradient that the backward allocated to be kept
 * (keeps_out_grad) is not copied: the book holds a view until the backward hands it over.
 *
 * A tied GPT head/embedding has one per-sample gradient, the sum of both uses, so its squared
 * norm is ||g_head||^2 + ||g_emb||^2 + 2 <g_emb, g_head>. The head's hook runs first (top of the
 * backward): materialized, it leaves the per-sample gradients for the embedding's hook to add its
 * rows to; otherwise it writes ||g_head||^2, and the embedding's hook adds ||g_emb||^2 and
 * 2 sum_u <G_emb[u], r[u]> with r[u] = g_head[ids_u], the rows of g_head at the sample's ids (g_emb
 * is the scatter of G_emb's rows by id): dpsgd_tied.c, which says when r is formed. */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"

static int is_trainable(const dp_param *p) { return p && p->trainable; }

static int bad_shape(const char *hook, const char *what) {
    return dp_error_set(DP_EINVAL, "dp %s hook: %s", hook, what);
}

/* sumsq of B rows of x into p's norm row */
static int row_sumsq(dpsgd *dp, const dp_param *p, const dp_tensor *x) {
    dp_tensor *row;
    int acc;
    DP_TRY(dpsgd_norm_row(dp, p, &row, &acc));
    return dp_sumsq_rows(row, x, acc);
}

/* Per-sample gradients psg of p (B x ...): their norms go to p's row; bk keeps them, else they
 * are freed. Takes psg over in every case. */
static int keep_or_free(dpsgd *dp, dp_param *p, dp_tensor *psg) {
    int rc = row_sumsq(dp, p, psg);
    if (rc == DP_OK && dpsgd_keeps_books(dp)) {
        dpsgd_book *bk = dpsgd_book_add(dp, DPSGD_BOOK_PER_SAMPLE);
        if (bk) {
            bk->param = p;
            bk->psg = *psg;
            return DP_OK;
        }
        rc = dp_error_code();
    }
    dp_tensor_release(psg);
    return rc;
}

/* A copy of x under `output_grads` with the given module. */
static int copy_kept(dpsgd *dp, const dp_tensor *x, uint32_t module, dp_tensor *out) {
    DP_TRY(dp_tensor_init_module(out, dp->dev, x->dtype, x->ndim, x->shape, DP_CAT_OUTPUT_GRADS, module));
    int rc = dp_tensor_copy(out, x);
    if (rc != DP_OK) dp_tensor_release(out);
    return rc;
}

/* Whether materialize's books keep the head's output gradient (the logits' buffer, adopted) and
 * input for its clipped sum instead of B per-sample V x d gradients, under a block-local style
 * (per_layer, per_block: the cheaper schedule, whose blocks hold no whole per-sample gradient).
 * Those gradients would be made while the logits live, at the backward's peak, the largest of the
 * model, where the logits cost nothing more; so when they are no larger (T <= d: B T V against
 * B V d) the norms come from one sample's gradient at a time (dpsgd_materialize_norms) and the
 * clipped sum from (c (.) G)^T A: one more GEMM the head's size, for B V d fewer bytes at the
 * peak. The flat style keeps materialize's per-sample gradients (Opacus's hooks), as do longer
 * sequences (the smaller book through the rest of the backward). A batch of one keeps its one
 * gradient, the size of the scratch. */
static int head_book(const dpsgd *dp, const dp_param *w, dpsgd_formulation f, int64_t T, int64_t d) {
    return f == DPSGD_FORM_MATERIALIZE && dp->early && T <= d &&
           (w->kind == DP_PARAM_HEAD || w->kind == DP_PARAM_EMBEDDING);
}

/* The formulation of a linear's weight under dp's method (flash's kernels as configured). */
static dpsgd_formulation linear_form(const dpsgd *dp, int64_t B, int64_t T, int64_t d, int64_t p, dp_dtype t) {
    if (dpsgd_flash_bk_materializes(dp->cfg.norms, dp->cfg.clip, B, T, d, t)) return DPSGD_FORM_MATERIALIZE;
    dpsgd_formulation f = dpsgd_choose_linear(dp->cfg.norms, B, T, d, p, t, NULL, NULL);
    if (dp->cfg.flash_impl != DPSGD_FLASH_STRIPS) return f;
    return f == DPSGD_FORM_GRAM_TILE ? DPSGD_FORM_GRAM_STRIP : f == DPSGD_FORM_GRAD_TILE ? DPSGD_FORM_GRAD_STRIP : f;
}

/* bk keeps a linear's output gradient unless the weight's per-sample gradients are materialized
 * (then it keeps those). The head's (tied or not) is the logits' buffer, their gradient in place:
 * the book adopts it once the backward has used it, where a copy would double the largest
 * activation at the backward's peak. */
static int keeps_out_grad(void *ctx, const dp_param *w, int64_t B, int64_t T, int64_t d, int64_t p, dp_dtype t) {
    const dpsgd *dp = ctx;
    if (!dpsgd_keeps_books(dp) || !w->trainable) return 0;
    dpsgd_formulation f = linear_form(dp, B, T, d, p, t);
    return (f != DPSGD_FORM_MATERIALIZE && f != DPSGD_FORM_BATCH1) || head_book(dp, w, f, T, d);
}

static int linear_weight(dpsgd *dp, dp_model *m, dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale) {
    int64_t B = A->shape[0], T = A->shape[1], d = A->shape[2], p = G->shape[2];
    int tied = w->kind == DP_PARAM_EMBEDDING;
    dpsgd_formulation f = linear_form(dp, B, T, d, p, A->dtype);
    if (tied && dp->tied.wte)
        return dp_error_set(DP_EINTERNAL, "dp: tied head '%s' seen twice in one backward", w->name);
    if (tied && (!dp->inputs || dp->inputs->ndim != 2 || dp->inputs->shape[0] != B || dp->inputs->shape[1] != T))
        return dp_error_set(DP_EINVAL,
                            "dp: the tied head '%s' needs the batch's B x T token ids (run the "
                            "forward through the DP wrapper)",
                            w->name);
    DP_TRY(dpsgd_record_layer(dp, w->module, dpsgd_linear_kind(w), f));

    if ((f == DPSGD_FORM_MATERIALIZE || f == DPSGD_FORM_BATCH1) && !head_book(dp, w, f, T, d)) {
        dp_tensor psg;
        DP_TRY(dpsgd_materialize_linear(dp, w, A, G, scale, &psg));
        if (tied) { /* the embedding's hook adds its rows, then takes the norm */
            dp->tied.wte = w;
            dp->tied.psg = psg;
            return DP_OK;
        }
        return keep_or_free(dp, w, &psg);
    }

    dp_tensor *row;
    int acc;
    DP_TRY(dpsgd_norm_row(dp, w, &row, &acc));
    if (f == DPSGD_FORM_MATERIALIZE)
        DP_TRY(dpsgd_materialize_norms(dp, w, A, G, scale, row, acc));
    else if (f == DPSGD_FORM_GHOST)
        DP_TRY(dpsgd_ghost_linear(dp, w, A, G, scale, row, acc));
    else if (f == DPSGD_FORM_GRAM_STRIP)
        DP_TRY(dpsgd_strip_linear(dp, w, A, G, scale, row, acc));
    else if (f == DPSGD_FORM_GRAD_STRIP)
        DP_TRY(dpsgd_grad_strip_linear(dp, w, A, G, scale, row, acc));
    else
        DP_TRY(dpsgd_flash_linear(dp, f, A, G, scale, row, acc));
    if (tied) { /* bk keeps A and G: the embedding's hook forms the rows from its book (dpsgd_tied.c) */
        dp->tied.form = f == DPSGD_FORM_MATERIALIZE ? DPSGD_FORM_GHOST : f; /* the rows from A and G */
        if (!dpsgd_keeps_books(dp)) DP_TRY(dpsgd_tied_rows(dp, f, w, dp->inputs, A, G, scale, &dp->tied.rows));
        dp->tied.wte = w;
    }
    if (!dpsgd_keeps_books(dp)) return DP_OK;
    dpsgd_book *bk = dpsgd_book_add(dp, DPSGD_BOOK_LINEAR);
    if (!bk) return dp_error_code();
    bk->param = w;
    bk->scale = scale;
    bk->input_src = A;
    if (dp->early) { /* formed at its block's end (A held till then), or outside the blocks, at the clip */
        bk->block = -1;
        if (dp->group_block[dpsgd_param_clip_group(dp, w)] >= 0) { /* held until its block's end */
            DP_TRY(dp_tensor_view(&bk->input, A, 0, A->ndim, A->shape));
        } else { /* the head's input is not retained: the book keeps a copy of it */
            bk->input_src = NULL;
            bk->owns_input = 1;
            DP_TRY(copy_kept(dp, A, w->module, &bk->input));
        }
    } else {
        bk->block = dp_model_recomputed_block(m, A); /* freed after its use: the clip recomputes it */
        if (bk->block < 0) DP_TRY(dp_tensor_view(&bk->input, A, 0, A->ndim, A->shape)); /* retained */
    }
    if (G->alloc.live && G->alloc.category == DP_CAT_OUTPUT_GRADS && G->alloc.module == w->module) {
        bk->adopting = 1; /* the backward allocated G to be kept: hook_adopt takes it over */
        return dp_tensor_view(&bk->out_grad, G, 0, G->ndim, G->shape);
    }
    return copy_kept(dp, G, w->module, &bk->out_grad);
}

/* The backward is done with w's output gradient G: the book that holds a view of it takes the
 * allocation over. */
static int hook_adopt(void *ctx, dp_param *w, dp_tensor *G) {
    dpsgd *dp = ctx;
    for (int k = 0; k < dp->n_books; k++) {
        dpsgd_book *bk = &dp->books[k];
        if (bk->kind != DPSGD_BOOK_LINEAR || bk->param != w || !bk->adopting) continue;
        if (bk->out_grad.numel != G->numel || bk->out_grad.data != G->data)
            return dp_error_set(DP_EINTERNAL, "dp: '%s' hands over an output gradient its hook did not see", w->name);
        bk->out_grad = *G;
        *G = (dp_tensor){0};
        bk->adopting = 0;
        return DP_OK;
    }
    return DP_OK;
}

static int linear_bias(dpsgd *dp, dp_param *b, const dp_tensor *G) {
    dp_tensor psb;
    DP_TRY(dpsgd_bias_grads(dp, b, G, DP_CAT_PER_SAMPLE_GRADS, &psb));
    return keep_or_free(dp, b, &psb);
}

static int hook_linear(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *A, const dp_tensor *G,
                       float scale) {
    dpsgd *dp = ctx;
    if (!is_trainable(w) && !is_trainable(b)) return DP_OK;
    if (A->ndim != 3 || G->ndim != 3 || A->shape[0] != G->shape[0] || A->shape[1] != G->shape[1])
        return bad_shape("linear", "A must be B x T x d and G B x T x p");
    if (A->dtype != G->dtype) return bad_shape("linear", "A and G must share the compute dtype");
    if (is_trainable(w)) DP_TRY(linear_weight(dp, m, w, A, G, scale));
    if (is_trainable(b)) {
        if (!is_trainable(w)) DP_TRY(dpsgd_record_layer(dp, b->module, "linear", DPSGD_FORM_DIRECT));
        DP_TRY(linear_bias(dp, b, G));
    }
    return DP_OK;
}

static int hook_norm(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *x, const dp_tensor *mean,
                     const dp_tensor *rstd, const dp_tensor *G) {
    dpsgd *dp = ctx;
    (void)m;
    int wt = is_trainable(w), bt = is_trainable(b);
    if (!wt && !bt) return DP_OK;
    if (x->ndim != 3 || G->ndim != 3 || x->numel != G->numel || x->dtype != G->dtype)
        return bad_shape("norm", "x and G must both be B x T x d in the compute dtype");
    dp_param *owner = wt ? w : b;
    DP_TRY(dpsgd_record_layer(dp, owner->module, mean ? "layernorm" : "rmsnorm", DPSGD_FORM_DIRECT));
    dp_tensor dw, db;
    DP_TRY(dpsgd_norm_layer_grads(dp, owner, bt ? b : NULL, x, mean, rstd, G,
                                  wt ? DP_CAT_PER_SAMPLE_GRADS : DP_CAT_TEMP, DP_CAT_PER_SAMPLE_GRADS, &dw, &db));
    int rc = wt ? keep_or_free(dp, w, &dw) : DP_OK;
    if (!wt) dp_tensor_release(&dw);
    if (rc == DP_OK && bt)
        rc = keep_or_free(dp, b, &db);
    else
        dp_tensor_release(&db);
    return rc;
}

/* bk's book for an embedding sum: one copy of G shared by the token and position tables when
 * their hooks see the same output-gradient tensor. */
static int embedding_book(dpsgd *dp, dp_param *wte, dp_param *wpe, const dp_tensor *ids, const dp_tensor *G) {
    dpsgd_book *bk = NULL;
    for (int k = 0; k < dp->n_books; k++) {
        dpsgd_book *c = &dp->books[k];
        if (c->kind == DPSGD_BOOK_EMBEDDING && c->source == (const void *)G && c->out_grad.numel == G->numel &&
            ((wte && !c->param) || (wpe && !c->wpe)))
            bk = c;
    }
    if (!bk) {
        bk = dpsgd_book_add(dp, DPSGD_BOOK_EMBEDDING);
        if (!bk) return dp_error_code();
        bk->source = G;
        DP_TRY(copy_kept(dp, G, (wte ? wte : wpe)->module, &bk->out_grad));
    }
    if (wpe) bk->wpe = wpe;
    if (wte) {
        bk->param = wte;
        DP_TRY(
            dp_tensor_init_module(&bk->ids, dp->dev, DP_I32, ids->ndim, ids->shape, DP_CAT_OUTPUT_GRADS, wte->module));
        DP_TRY(dp_tensor_copy(&bk->ids, ids));
    }
    return DP_OK;
}

static int hook_embedding(void *ctx, dp_model *m, dp_param *wte, const dp_tensor *ids, const dp_tensor *G) {
    dpsgd *dp = ctx;
    (void)m;
    int tied = dp->tied.wte && dp->tied.wte == wte;
    if (!is_trainable(wte)) return DP_OK;
    if (G->ndim != 3 || ids->ndim != 2 || ids->shape[0] != G->shape[0] || ids->shape[1] != G->shape[1])
        return bad_shape("embedding", "ids must be B x T and G B x T x d");
    int64_t B = G->shape[0], T = G->shape[1], d = G->shape[2], V = wte->value.shape[0];
    double n = (double)(B * T * d), es = (double)dp_dtype_size(G->dtype);

    if (tied && dp->tied.psg.numel) { /* materialized head: add the embedding's rows, then the norm */
        DP_TRY(dpsgd_record_layer(dp, wte->module, "embedding", DPSGD_FORM_MATERIALIZE));
        dp_ledger_add("dp_scatter_rows", n, n * (es + 8.0) + 4.0 * (double)(B * T));
        DP_TRY(
            DPSGD_DISPATCH(dp->dev, scatter_rows, G->dtype, B, T, d, V, G->data, ids->data, 1.0f, dp->tied.psg.data));
        dp_tensor psg = dp->tied.psg;
        dp->tied.psg = (dp_tensor){0};
        dp->tied.wte = NULL;
        return keep_or_free(dp, wte, &psg);
    }

    dpsgd_formulation f = dpsgd_choose_embedding(dp->cfg.norms);
    DP_TRY(dpsgd_record_layer(dp, wte->module, "embedding", f));
    dp_tensor *row;
    int acc;
    DP_TRY(dpsgd_norm_row(dp, wte, &row, &acc));
    if (f == DPSGD_FORM_GHOST)
        DP_TRY(dpsgd_ghost_embedding(dp, wte, ids, G, row, acc));
    else
        DP_TRY(dpsgd_grouped_embedding(dp, wte, ids, G, row, acc));
    if (tied) { /* + 2 sum_u <G[i,u,:], r[i,u,:]> */
        int rc = dpsgd_tied_cross(dp, wte, ids, G, row);
        dp_tensor_release(&dp->tied.rows);
        dp->tied.wte = NULL;
        DP_TRY(rc);
    }
    if (dpsgd_keeps_books(dp)) DP_TRY(embedding_book(dp, wte, NULL, ids, G));
    return DP_OK;
}

static int hook_position(void *ctx, dp_model *m, dp_param *wpe, const dp_tensor *G) {
    dpsgd *dp = ctx;
    (void)m;
    if (!is_trainable(wpe)) return DP_OK;
    if (G->ndim != 3 || G->shape[1] > wpe->value.shape[0])
        return bad_shape("position", "G must be B x T x d with T at most the table's rows");
    DP_TRY(dpsgd_record_layer(dp, wpe->module, "position", DPSGD_FORM_DIRECT));
    /* sample i's gradient of the table is G_i in rows 0..T-1 (position t for token t) */
    DP_TRY(row_sumsq(dp, wpe, G));
    if (dpsgd_keeps_books(dp)) DP_TRY(embedding_book(dp, NULL, wpe, NULL, G));
    return DP_OK;
}

/* The model's bracket of linears reading one input: ghost norms form its Gram once for all of
 * them (dpsgd_ghost.c); closed (A NULL), the Gram is freed. */
static int hook_shared_input(void *ctx, const dp_tensor *A) {
    dpsgd *dp = ctx;
    dp_tensor_release(&dp->shared.gram);
    dp->shared.src = A;
    return DP_OK;
}

dp_layer_hooks dpsgd_norm_hooks(dpsgd *dp) {
    dp_layer_hooks h = {
        .ctx = dp,
        .linear = hook_linear,
        .norm = hook_norm,
        .embedding = hook_embedding,
        .position = hook_position,
        .keeps_out_grad = keeps_out_grad,
        .adopt = hook_adopt,
        .shared_input = hook_shared_input,
        .block_end = dp->early ? dpsgd_early_block_end : NULL, /* block-local groups formed as they complete */
    };
    return h;
}
