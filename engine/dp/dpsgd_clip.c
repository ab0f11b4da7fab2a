/* dpsgd_clip.c: clip factors and the clipped sum.
 *
 * Per clipping group g (dpsgd_groups.c; flat: one group of every tensor), ||g_gi||^2 is the sum
 * over g's trainable tensors of their rows (added on the host in double, in parameter order) and
 * c_gi its factor (abadi: min(1, C_g / (||g_gi|| + 1e-6)); automatic: C_g / (||g_gi|| + gamma)).
 * twopass then runs the model's backward again, with the loss of sample i scaled by c_i for one
 * group, else forming each layer's part with its group's factors in the hooks (dpsgd_form.c);
 * bk forms the sum from its books, each with its tensor's group's factors:
 * per-sample gradients give c^T psg (B AXPYs for small B, else a 1 x B by B x n GEMM), a
 * linear's kept output gradient gives scale (c (.) G)^T A = scale G^T (c (.) A) (the rows of G,
 * or of a narrower input shared by linears of one group, scaled in place, then one GEMM over all
 * B T tokens), an embedding's scales G's rows in place, then scatters them by token id and sums
 * them over the samples for the positions (the positions first, from G unscaled, when their
 * group is another). Books whose input the backward recomputed (a checkpointed block's) are
 * formed last, block by block: the model recomputes the block, its books are formed, the block
 * is freed. */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "layer_ops.h"
#include "ledger.h"
#include "ops.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Appends B samples' norms, factors and group norms (B x n_groups) to the step's statistics. */
static int append_samples(dpsgd *dp, const float *norms, const float *factors, const float *group_norms, int64_t B) {
    size_t G = (size_t)dp->n_groups;
    if (dp->n_samples + (size_t)B > dp->cap_samples) {
        size_t cap = dp->cap_samples ? dp->cap_samples : 64;
        while (cap < dp->n_samples + (size_t)B) cap *= 2;
        float *n = realloc(dp->norms, cap * sizeof *n);
        if (!n) return dp_error_set(DP_EOOM, "dp: out of host memory for the norm statistics");
        dp->norms = n;
        float *f = realloc(dp->factors, cap * sizeof *f);
        if (!f) return dp_error_set(DP_EOOM, "dp: out of host memory for the norm statistics");
        dp->factors = f;
        float *g = realloc(dp->group_norms, cap * G * sizeof *g);
        if (!g) return dp_error_set(DP_EOOM, "dp: out of host memory for the norm statistics");
        dp->group_norms = g;
        dp->cap_samples = cap;
    }
    memcpy(dp->norms + dp->n_samples, norms, (size_t)B * sizeof *norms);
    memcpy(dp->factors + dp->n_samples, factors, (size_t)B * sizeof *factors);
    memcpy(dp->group_norms + dp->n_samples * G, group_norms, (size_t)B * G * sizeof *group_norms);
    dp->n_samples += (size_t)B;
    return DP_OK;
}

int dpsgd_compute_clip_factors(dpsgd *dp, float *factors) {
    int64_t B = dp->batch;
    int G = dp->n_groups;
    for (int k = 0; k < dp->n_params; k++)
        if (!dp->sq_written[k])
            return dp_error_set(DP_EINTERNAL,
                                "dp: trainable parameter '%s' got no per-sample norm (no hook "
                                "covered it in the backward)",
                                dp->params[k]->name);
    /* the plan's norms are all 0 (no values): no n_params x B host copy of them is made */
    int plan = dp->dev->kind == DP_DEV_PLAN;
    float *host = NULL;
    if (!plan) {
        host = realloc(dp->host_sq, (size_t)(dp->n_params > 0 && B > 0 ? dp->n_params * B : 1) * sizeof *host);
        if (!host) return dp_error_set(DP_EOOM, "dp: out of host memory for the norms");
        dp->host_sq = host;
    }
    dp->host_batch = B;
    if (dp->n_params > 0 && !plan) /* one copy of every row */
        DP_TRY(dp_tensor_to_host(&dp->sq_norms, host, (uint64_t)dp->n_params * (uint64_t)B * sizeof *host));
    size_t nb = (size_t)(B ? B : 1);
    float *norms = malloc(nb * sizeof *norms), *summary = malloc(nb * sizeof *summary);
    float *gnorms = malloc(nb * (size_t)G * sizeof *gnorms);
    double *sq = malloc((size_t)G * sizeof *sq);
    int rc = norms && summary && gnorms && sq ? DP_OK : dp_error_set(DP_EOOM, "dp: out of host memory for the norms");
    for (int64_t i = 0; i < B && rc == DP_OK; i++) {
        for (int g = 0; g < G; g++) sq[g] = 0.0;
        for (int k = 0; k < dp->n_params && host; k++) sq[dp->group_of[k]] += host[k * B + i];
        double total = 0.0, kept = 0.0;
        for (int g = 0; g < G; g++) {
            double n = sqrt(sq[g]), c = dpsgd_group_factor(dp, dp->group_bound[g], n);
            dpsgd_adaptive_observe(dp, dp->group_bound[g], n); /* adaptive: flat, one group */
            factors[(int64_t)g * B + i] = (float)c;
            gnorms[i * G + g] = (float)n;
            total += sq[g];
            kept += c * c * sq[g];
        }
        norms[i] = (float)sqrt(total);
        /* one group: its factor; several: the scale of the whole gradient (1 for a zero one) */
        summary[i] = G == 1 ? factors[i] : total > 0.0 ? (float)sqrt(kept / total) : 1.0f;
    }
    if (rc == DP_OK && !dp->padding) rc = append_samples(dp, norms, summary, gnorms, B); /* a padding sample is none */
    free(norms);
    free(summary);
    free(gnorms);
    free(sq);
    return rc;
}

/* Up to this many samples, c^T x is B in-order AXPYs with the host's weights (memory-bound, near
 * the bandwidth roofline, the same bits on CPU and CUDA); a GEMM with k = B this small and n in
 * the millions runs far below it (measured on an H100: 44 ms of clip per step for B = 1 over a
 * 1.07 B-parameter model, against ~4 ms for the AXPYs). */
#define CLIP_AXPY_MAX_B 8

static int sum_by_axpy(int64_t B, dp_dtype t) { return B <= CLIP_AXPY_MAX_B && t == DP_F32; }

/* grad (n floats) += c^T x, x of B x n: the clipped sum of per-sample gradients. c_host holds the
 * B weights on the host; c, the same on the device, is read only by the GEMM path (may be NULL when
 * sum_by_axpy holds). */
int dpsgd_weighted_sum(dpsgd *dp, dp_tensor *grad, const dp_tensor *c, const float *c_host, const dp_tensor *x,
                       int64_t B, int64_t n, const char *op) {
    if (sum_by_axpy(B, x->dtype)) {
        dp_ledger_add(op, 2.0 * (double)B * (double)n, 12.0 * (double)B * (double)n);
        for (int64_t b = 0; b < B; b++)
            DP_TRY(DP_DISPATCH(dp->dev, axpy, DP_F32, (size_t)n, c_host[b], dp_tensor_at(x, b * n), grad->data));
        return DP_OK;
    }
    /* grad (1 x n) += c^T (1 x B) x (B x n) */
    return dp_gemm_batched(dp->dev, op, 1, 1, n, B, 1.0f, x->dtype, DP_MAT(c->data, B, 0), DP_MAT(x->data, n, 0), 1.0f,
                           DP_F32, grad->data);
}

int dpsgd_scale_samples(dpsgd *dp, dp_tensor *x, const dp_tensor *c) {
    int64_t B = x->shape[0], n = x->numel / (B ? B : 1);
    dp_ledger_add("dp_scale_samples", (double)x->numel, 2.0 * (double)dp_tensor_bytes(x) + 4.0 * (double)B);
    return DPSGD_DISPATCH(dp->dev, scale_samples, x->dtype, B, n, x->data, c->data);
}

/* The factors of p's clipping group: c, a view of its row of dp->clip_dev, and host, its row of
 * the host factors (both of the batch's B). */
int dpsgd_group_factors(dpsgd *dp, const dp_param *p, const float *factors, dp_tensor *c, const float **host) {
    int64_t B = dp->batch;
    int g = p ? dpsgd_param_clip_group(dp, p) : 0;
    if (g < 0) return dp_error_set(DP_EINTERNAL, "dp: '%s' has a book but no clipping group", p->name);
    *host = factors + (int64_t)g * B;
    return dp_tensor_view(c, &dp->clip_dev, (int64_t)g * B, 1, &B);
}

static int book_per_sample(dpsgd *dp, dpsgd_book *bk, const float *factors) {
    DP_TRY(dpsgd_ensure_grad(dp, bk->param));
    int64_t B = bk->psg.shape[0];
    dp_tensor c;
    const float *host = NULL;
    DP_TRY(dpsgd_group_factors(dp, bk->param, factors, &c, &host));
    return dpsgd_weighted_sum(dp, &bk->param->grad, &c, host, &bk->psg, B, bk->psg.numel / B, "dp_clip_sum");
}

#define ANY_BLOCK DPSGD_ANY_BLOCK /* clip_stage's pblock: the books of every parameter */

/* The fsdp block book bk's parameter lies in, -1 outside the blocks: an embedding's book (wte, wpe),
 * and the pseudo-blocks' tensors (the final norm, the head: DP_MODEL_HEAD, whose id is negative as
 * ANY_BLOCK's); without fsdp every parameter is outside. */
static int64_t block_of_book(const dpsgd *dp, const dpsgd_book *bk) {
    if (!dp->fsdp_block || !bk->param || bk->kind == DPSGD_BOOK_EMBEDDING) return -1;
    int k = dpsgd_param_index(dp, bk->param);
    return k >= 0 && dp->fsdp_block[k] >= 0 ? dp->fsdp_block[k] : -1;
}

/* Whether book bk's parameter lies in fsdp block pblock (-1: outside the blocks; ANY_BLOCK: any),
 * as clip_fsdp found it (dpsgd_book.pblock). */
static int in_block(const dpsgd_book *bk, int64_t pblock) { return pblock == ANY_BLOCK || bk->pblock == pblock; }

/* (c (.) G)^T A = G^T (c (.) A): where the linears that share an input (gpt's qkv, llama's q, k,
 * v and gate, up, a head) have more output columns in all than the input has, scale the input's
 * rows once instead of every G's (gpt: 2d instead of 7d per token and layer; the head: d instead
 * of V). The input is a retained (or recomputed) activation that nothing reads after the clip.
 * Only the books of one stage (block: -1 the retained inputs, else that recomputed block). */
typedef struct {
    uintptr_t src; /* the shared input tensor's address */
    int group;     /* the clipping group of the book's parameter: only one group's books share */
    int k;         /* the book's index */
} shared_input;

static int shared_input_cmp(const void *pa, const void *pb) {
    const shared_input *a = pa, *b = pb;
    if (a->src != b->src) return a->src < b->src ? -1 : 1;
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
    return (a->k > b->k) - (a->k < b->k);
}

static int same_share(const shared_input *a, const shared_input *b) { return a->src == b->src && a->group == b->group; }

/* A shared input is scaled once only when no book of another group reads it too. */
static int input_has_other_groups(const shared_input *by_src, int m, int g) {
    int lo = g, hi = g;
    while (lo > 0 && by_src[lo - 1].src == by_src[g].src) lo--;
    while (hi + 1 < m && by_src[hi + 1].src == by_src[g].src) hi++;
    return by_src[lo].group != by_src[hi].group;
}

static int scale_shared_inputs(dpsgd *dp, const float *factors, int block, int64_t pblock) {
    /* the linear books grouped by their input (sorted: n log n, where a scan of every pair was
     * quadratic in the books, 450 of them for an 8B model with LoRA): for each group its first
     * book and the output columns of all of them */
    int n = dp->n_books;
    if (n <= 0) return DP_OK;
    shared_input *by_src = malloc((size_t)n * sizeof *by_src);
    int64_t *cols = malloc((size_t)n * sizeof *cols);
    int *group = malloc((size_t)n * sizeof *group); /* a first book's group: its start in by_src */
    if (!by_src || !cols || !group) {
        free(by_src);
        free(cols);
        free(group);
        return dp_error_set(DP_EOOM, "dp: out of host memory");
    }
    int m = 0;
    for (int k = 0; k < n; k++) {
        cols[k] = -1; /* not the first of a group */
        if (dp->books[k].kind == DPSGD_BOOK_LINEAR && dp->books[k].input_src && !dp->books[k].formed)
            by_src[m++] =
                (shared_input){(uintptr_t)dp->books[k].input_src, dpsgd_param_clip_group(dp, dp->books[k].param), k};
    }
    qsort(by_src, (size_t)m, sizeof *by_src, shared_input_cmp);
    for (int g = 0; g < m;) {
        int e = g;
        int64_t sum = 0;
        for (; e < m && same_share(&by_src[e], &by_src[g]); e++) sum += dp->books[by_src[e].k].out_grad.shape[2];
        if (!input_has_other_groups(by_src, m, g)) {
            cols[by_src[g].k] = sum;
            group[by_src[g].k] = g;
        }
        g = e;
    }
    int rc = DP_OK;
    for (int k = 0; k < n && rc == DP_OK; k++) { /* in the books' order, as they were registered */
        dpsgd_book *bk = &dp->books[k];
        if (cols[k] < 0 || bk->block != block || !in_block(bk, pblock) || bk->input.shape[2] >= cols[k]) continue;
        dp_tensor c;
        const float *host = NULL;
        rc = dpsgd_group_factors(dp, bk->param, factors, &c, &host);
        if (rc == DP_OK) rc = dpsgd_scale_samples(dp, &bk->input, &c);
        for (int j = group[k]; rc == DP_OK && j < m && by_src[j].src == (uintptr_t)bk->input_src; j++)
            dp->books[by_src[j].k].input_scaled = 1;
    }
    free(by_src);
    free(cols);
    free(group);
    return rc;
}

static int book_linear(dpsgd *dp, dpsgd_book *bk, const float *factors) {
    dp_tensor *G = &bk->out_grad, *A = &bk->input;
    int64_t N = G->shape[0] * G->shape[1], p = G->shape[2], d = A->shape[2];
    dp_tensor c;
    const float *host = NULL;
    DP_TRY(dpsgd_group_factors(dp, bk->param, factors, &c, &host));
    if (!bk->input_scaled) DP_TRY(dpsgd_scale_samples(dp, G, &c));
    DP_TRY(dpsgd_ensure_grad(dp, bk->param));
    /* grad (p x d) += scale * G^T (p x N) A (N x d): one GEMM over every token of the batch */
    return dp_gemm_batched(dp->dev, "dp_clip_gemm", 1, p, d, N, bk->scale, G->dtype, DP_MAT_T(G->data, p, 0),
                           DP_MAT(A->data, d, 0), 1.0f, DP_F32, bk->param->grad.data);
}

/* The positions' clipped gradient from G: dwpe[t] += sum_i w_i G[i, t] (rows 0..T-1 of the table),
 * w on the device and w_host on the host. */
static int positions_sum(dpsgd *dp, dpsgd_book *bk, const dp_tensor *w, const float *w_host) {
    dp_tensor *G = &bk->out_grad;
    int64_t B = G->shape[0], T = G->shape[1], d = G->shape[2];
    DP_TRY(dpsgd_ensure_grad(dp, bk->wpe));
    return dpsgd_weighted_sum(dp, &bk->wpe->grad, w, w_host, G, B, T * d, "dp_clip_sum");
}

/* The positions' sum from G already scaled by their group's factors: weights of ones. */
static int positions_sum_scaled(dpsgd *dp, dpsgd_book *bk) {
    int64_t B = bk->out_grad.shape[0];
    float *ones_host = malloc((size_t)B * sizeof *ones_host);
    if (!ones_host) return dp_error_set(DP_EOOM, "dp: out of host memory");
    for (int64_t i = 0; i < B; i++) ones_host[i] = 1.0f;
    dp_tensor ones = {0};
    int rc = DP_OK;
    if (!sum_by_axpy(B, bk->out_grad.dtype)) { /* the GEMM path reads the weights on the device */
        rc = dp_tensor_init_module(&ones, dp->dev, bk->out_grad.dtype, 1, &B, DP_CAT_TEMP, bk->wpe->module);
        if (rc == DP_OK) rc = dp_tensor_fill(&ones, 1.0);
    }
    if (rc == DP_OK) rc = positions_sum(dp, bk, &ones, ones_host);
    dp_tensor_release(&ones);
    free(ones_host);
    return rc;
}

static int book_embedding(dpsgd *dp, dpsgd_book *bk, const float *factors) {
    dp_tensor *G = &bk->out_grad;
    int64_t B = G->shape[0], T = G->shape[1], d = G->shape[2];
    dp_tensor c, cp;
    const float *host = NULL, *host_p = NULL;
    DP_TRY(dpsgd_group_factors(dp, bk->param ? bk->param : bk->wpe, factors, &c, &host));
    int apart = bk->param && bk->wpe && dpsgd_param_clip_group(dp, bk->param) != dpsgd_param_clip_group(dp, bk->wpe);
    if (apart) { /* the positions' group is another: their sum from G as it is, by their factors */
        DP_TRY(dpsgd_group_factors(dp, bk->wpe, factors, &cp, &host_p));
        DP_TRY(positions_sum(dp, bk, &cp, host_p));
    }
    DP_TRY(dpsgd_scale_samples(dp, G, &c));
    if (bk->wpe && !apart) DP_TRY(positions_sum_scaled(dp, bk));
    if (!bk->param) return DP_OK;
    DP_TRY(dpsgd_ensure_grad(dp, bk->param));
    double n = (double)(B * T * d);
    dp_ledger_add("dp_clip_embedding", n, n * ((double)dp_dtype_size(G->dtype) + 8.0) + 4.0 * (double)(B * T));
    return DP_DISPATCH_LAYER(dp->dev, embedding_backward, G->dtype, G->data, bk->ids.data, bk->param->grad.data, NULL,
                             B * T, T, d, bk->param->value.shape[0]);
}

/* Whether bk is of the head or the token embedding (tied or not): their books, the head's kept
 * logits gradient (B x T x V) the largest, are formed after the blocks' have been formed and freed,
 * so that their gradients are not made beside every other book. Each parameter's books keep their
 * order (a tied table's head book before its embedding book), so every sum is the same. */
static int formed_last(const dpsgd_book *bk) {
    return bk->param && (bk->param->kind == DP_PARAM_HEAD || bk->param->kind == DP_PARAM_EMBEDDING);
}

/* dpsgd_clip_stage: the clipped sums of the books of one stage (block: -1 those whose inputs the backward retained,
 * else those of that recomputed block, whose inputs are live again) whose parameters lie in fsdp
 * block pblock (ANY_BLOCK: all of them), each freed once formed; the head's and the embedding's last. */
int dpsgd_clip_stage(dpsgd *dp, const float *factors, int block, int64_t pblock) {
    for (int k = 0; k < dp->n_books; k++) {
        dpsgd_book *bk = &dp->books[k];
        if (bk->formed) continue;
        if (bk->kind == DPSGD_BOOK_LINEAR && bk->block == block && block >= 0 && in_block(bk, pblock))
            DP_TRY(dp_tensor_view(&bk->input, bk->input_src, 0, bk->input_src->ndim, bk->input_src->shape));
    }
    DP_TRY(scale_shared_inputs(dp, factors, block, pblock));
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < dp->n_books; k++) {
            dpsgd_book *bk = &dp->books[k];
            if (bk->formed || bk->block != block || !in_block(bk, pblock) || formed_last(bk) != pass) continue;
            switch (bk->kind) {
            case DPSGD_BOOK_PER_SAMPLE: DP_TRY(book_per_sample(dp, bk, factors)); break;
            case DPSGD_BOOK_LINEAR: DP_TRY(book_linear(dp, bk, factors)); break;
            case DPSGD_BOOK_EMBEDDING: DP_TRY(book_embedding(dp, bk, factors)); break;
            }
            /* free each book as soon as its gradient is formed */
            dp_tensor_release(&bk->psg);
            dp_tensor_release(&bk->out_grad);
            dp_tensor_release(&bk->ids);
            if (bk->owns_input) dp_tensor_release(&bk->input);
            bk->input = (dp_tensor){0};
            bk->formed = 1;
        }
    return DP_OK;
}

/* The books of checkpointed block `block` (none when block < 0 or its stage is done): the model
 * recomputes the block, its books are formed, the block is freed. fsdp (`paired`): a block this
 * rank has no book of is gathered and freed all the same, since the other ranks' physical batches
 * (another size, other lengths, or padding) may need it and their gathers must pair with this
 * rank's. */
static int clip_block(dpsgd *dp, const float *factors, int block, int paired) {
    if (block < 0) return DP_OK;
    int live = 0;
    for (int k = 0; k < dp->n_books && !live; k++)
        live = dp->books[k].block == block && dp->books[k].out_grad.alloc.live;
    if (!live) return paired ? dpsgd_fsdp_gather_only(dp, block) : DP_OK;
    if (!dp->model) return dp_error_set(DP_EINTERNAL, "dp: a book of a recomputed block without a model");
    DP_TRY(dp_model_recompute_block(dp->model, block));
    int rc = dpsgd_clip_stage(dp, factors, block, ANY_BLOCK);
    dp_model_release_block(dp->model, block);
    return rc;
}

/* fsdp: block by block from the last, its books formed (those whose inputs were retained, then
 * the recomputed block's), its gradient reduce-scattered into the step's part at once
 * (dpsgd_fsdp_reduce_block), so at most one block's gradient is whole; then the books of the
 * tensors outside the blocks, reduce-scattered after the last clip. Every rank gathers every
 * checkpointed block, in this order, where any rank's books may need a recomputation
 * (materialize's never do: its books are per-sample gradients), and reduce-scatters every block:
 * the ranks' collectives pair whatever their batches (another size, other lengths, padding). */
static int clip_fsdp(dpsgd *dp, const float *factors) {
    int paired = dp->cfg.norms != DPSGD_NORMS_MATERIALIZE;
    for (int k = 0; k < dp->n_books; k++) dp->books[k].pblock = block_of_book(dp, &dp->books[k]);
    if (dp->early) return dpsgd_clip_stage(dp, factors, -1, -1); /* every block formed and reduced at its end */
    for (int64_t l = dp_model_config_of(dp->model)->layers - 1; l >= 0; l--) {
        DP_TRY(dpsgd_clip_stage(dp, factors, -1, l));
        if (dp_model_checkpointed(dp->model, l)) DP_TRY(clip_block(dp, factors, (int)l, paired));
        DP_TRY(dpsgd_fsdp_reduce_block(dp, l));
    }
    return dpsgd_clip_stage(dp, factors, -1, -1);
}

int dpsgd_clip_books(dpsgd *dp, const float *factors) {
    int64_t n = dp->batch * (int64_t)dp->n_groups;
    DP_TRY(dp_tensor_init_module(&dp->clip_dev, dp->dev, DP_F32, 1, &n, DP_CAT_NORM_SAMPLES, DP_MODULE_NONE));
    DP_TRY(dp_tensor_from_host(&dp->clip_dev, factors, (uint64_t)n * sizeof *factors));
    if (dp->fsdp_block && dp->model) {
        DP_TRY(clip_fsdp(dp, factors));
    } else {
        DP_TRY(dpsgd_clip_stage(dp, factors, -1, ANY_BLOCK));
        /* the books of checkpointed blocks, one block at a time: recompute its inputs, form, free */
        for (int k = 0; k < dp->n_books; k++) DP_TRY(clip_block(dp, factors, dp->books[k].block, 0));
    }
    dp_tensor_release(&dp->clip_dev);
    return DP_OK;
}
