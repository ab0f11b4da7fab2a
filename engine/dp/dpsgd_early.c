/* dpsgd_early.c: bk's cheaper schedule under clipping groups. A group whose tensors all lie in one
 * transformer block is complete once that block's backward ends: its norms are known, so its
 * factors are, and its books (output gradients, per-sample gradients) are formed into the clipped
 * gradient there and freed (the model keeps the block's activations until then: the block_end
 * hook), instead of every book of the model waiting for the last backward. With every group
 * block-local or outside the blocks (per_layer, per_block, groups that do not cross blocks) the
 * backward retains no activations either: the books outside the blocks (the head's, a tied head's,
 * the embeddings') own what they keep, and are formed at the clip as before. The factors are those
 * the clip computes (the same rows, the same sums in the same order), so the gradient is the same;
 * only when memory is freed changes. Under fsdp each block's gradient is reduce-scattered there
 * too, so no block's gradient, books or activations outlive its backward. */
#include "dpsgd_impl.h"

#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The factors of the groups block `layer` completes into factors (n_groups x B; the other rows
 * left as they are), from their tensors' rows: the sums compute_clip_factors makes, in its order.
 * One copy of the norm rows to the host a block (rows of other blocks not read). */
static int block_factors(dpsgd *dp, int64_t layer, float *factors) {
    int64_t B = dp->batch;
    int G = dp->n_groups, plan = dp->dev->kind == DP_DEV_PLAN;
    double *sq = calloc((size_t)G * (size_t)(B ? B : 1), sizeof *sq);
    float *host = plan ? NULL : malloc((size_t)(dp->n_params * B > 0 ? dp->n_params * B : 1) * sizeof *host);
    int rc = sq && (plan || host) ? DP_OK : dp_error_set(DP_EOOM, "dp: out of host memory for the norms");
    int any = 0; /* a tensor whose group this block completes (none: no copy; the rows may not exist yet) */
    for (int k = 0; k < dp->n_params && rc == DP_OK; k++) {
        if (dp->group_block[dp->group_of[k]] != layer) continue;
        any = 1;
        if (!dp->sq_written[k])
            rc = dp_error_set(DP_EINTERNAL, "dp: trainable parameter '%s' got no per-sample norm by its block's end",
                              dp->params[k]->name);
    }
    if (rc == DP_OK && host && any) /* the plan's norms are all 0: no copy */
        rc = dp_tensor_to_host(&dp->sq_norms, host, (uint64_t)dp->n_params * (uint64_t)B * sizeof *host);
    for (int k = 0; k < dp->n_params && rc == DP_OK && host; k++) {
        int g = dp->group_of[k];
        if (dp->group_block[g] != layer) continue;
        for (int64_t i = 0; i < B; i++) sq[(int64_t)g * B + i] += host[(int64_t)k * B + i];
    }
    for (int g = 0; g < G && rc == DP_OK; g++) {
        if (dp->group_block[g] != layer) continue;
        for (int64_t i = 0; i < B; i++)
            factors[(int64_t)g * B + i] =
                (float)dpsgd_group_factor(dp, dp->group_bound[g], sqrt(sq[(int64_t)g * B + i]));
    }
    free(sq);
    free(host);
    return rc;
}

int dpsgd_early_block_end(void *ctx, dp_model *m, int64_t layer) {
    dpsgd *dp = ctx;
    (void)m;
    if (!dp->early) return DP_OK; /* a padding batch's too: its zero gradients, and fsdp's collectives pair */
    int64_t B = dp->batch, n = B * (int64_t)dp->n_groups;
    float *factors = calloc((size_t)(n ? n : 1), sizeof *factors);
    if (!factors) return dp_error_set(DP_EOOM, "dp: out of host memory");
    int rc = block_factors(dp, layer, factors);
    for (int k = 0; k < dp->n_books && rc == DP_OK; k++) { /* the books of the groups this block completes */
        dpsgd_book *bk = &dp->books[k];
        dp_param *p = bk->param ? bk->param : bk->wpe;
        int g = p ? dpsgd_param_clip_group(dp, p) : -1;
        bk->pblock = g >= 0 && dp->group_block[g] == layer ? layer : -1;
    }
    if (rc == DP_OK)
        rc = dp_tensor_init_module(&dp->clip_dev, dp->dev, DP_F32, 1, &n, DP_CAT_NORM_SAMPLES, DP_MODULE_NONE);
    if (rc == DP_OK) rc = dp_tensor_from_host(&dp->clip_dev, factors, (uint64_t)n * sizeof *factors);
    if (rc == DP_OK) rc = dpsgd_clip_stage(dp, factors, -1, layer);
    dp_tensor_release(&dp->clip_dev);
    for (int k = 0; k < dp->n_books; k++) dp->books[k].pblock = -1;
    free(factors);
    /* fsdp: the block's gradient is complete: reduce-scattered into the step's part at once, on
     * every rank (the collectives pair whatever each rank's batch) */
    if (rc == DP_OK && dp->fsdp_block) rc = dpsgd_fsdp_reduce_block(dp, layer);
    return rc;
}
