/* dpsgd_shard.c: zero2's shards. Each trainable tensor of n elements is cut into world_size parts
 * of s = ceil(n / N) (the last ones shorter or empty); rank r owns elements [r s, min(n, (r+1) s)).
 * After the step's clipped sums: the full gradient is reduce-scattered into this rank's part (a
 * tensor of s floats under `gradients`) and released, so the noise, the optimizer and its states
 * (optim.c, dp_param.sharded) see the part alone; after the optimizer, every rank's updated part
 * (in the parameter's dtype: bf16 without masters) is all-gathered into the full parameter
 * (dpsgd_gather_parts, which fsdp's gathers share). Where N does not divide n, the collectives run
 * on a padded copy under `temp` (NCCL's and MPI's equal parts). */
#include "dpsgd_impl.h"

#include "error.h"
#include "ops.h"

#include <stdlib.h>

int dpsgd_shard_setup(dpsgd *dp) {
    for (int k = 0; k < dp->n_params; k++) {
        dp_param *p = dp->params[k];
        p->sharded = 1;
        dp_part_range(p->value.numel, dp->comm->world_size, dp->comm->rank, &p->shard_lo, &p->shard_n);
    }
    return DP_OK;
}

void dpsgd_shard_clear(dpsgd *dp) {
    for (int k = 0; k < dp->n_params; k++) {
        dp->params[k]->sharded = 0;
        dp->params[k]->shard_lo = dp->params[k]->shard_n = 0;
    }
}

/* s = ceil(n / N), the part every rank's collective moves */
static int64_t part_of(const dpsgd *dp, const dp_param *p) { return dp_part_len(p->value.numel, dp->comm->world_size); }

/* full (n elements) into a padded tensor of N s under `temp`, zeros after n; or full itself */
static int padded(dpsgd *dp, const dp_param *p, const dp_tensor *full, dp_tensor *pad, const dp_tensor **use) {
    int64_t n = p->value.numel, total = part_of(dp, p) * dp->comm->world_size;
    *use = full;
    if (total == n) return DP_OK;
    int64_t shape[1] = {total}, head[1] = {n}, tail[1] = {total - n};
    DP_TRY(dp_tensor_init_module(pad, dp->dev, DP_F32, 1, shape, DP_CAT_TEMP, p->module));
    dp_tensor dst, src, rest;
    int rc = dp_tensor_view(&dst, pad, 0, 1, head);
    if (rc == DP_OK) rc = dp_tensor_view(&src, full, 0, 1, head);
    if (rc == DP_OK) rc = dp_tensor_copy(&dst, &src);
    if (rc == DP_OK) rc = dp_tensor_view(&rest, pad, n, 1, tail);
    if (rc == DP_OK) rc = dp_tensor_fill(&rest, 0.0);
    if (rc != DP_OK) dp_tensor_release(pad);
    *use = pad;
    return rc;
}

int dpsgd_shard_reduce(dpsgd *dp, dp_param *p) {
    DP_TRY(dpsgd_ensure_grad(dp, p));
    int64_t shape[1] = {part_of(dp, p)};
    dp_tensor part, pad = {0};
    const dp_tensor *whole;
    DP_TRY(dp_tensor_init_module(&part, dp->dev, DP_F32, 1, shape, DP_CAT_GRADIENTS, p->module));
    int rc = padded(dp, p, &p->grad, &pad, &whole);
    if (rc == DP_OK) rc = dp_comm_reduce_scatter(dp->comm, whole, &part);
    dp_tensor_release(&pad);
    if (rc != DP_OK) {
        dp_tensor_release(&part);
        return rc;
    }
    dp_tensor_release(&p->grad); /* the full gradient is no longer this rank's to hold */
    p->grad = part;
    return DP_OK;
}

int dpsgd_gather_parts(dpsgd *dp, const dp_param *p, const dp_tensor *part, dp_tensor *into) {
    int64_t s = part_of(dp, p), n = p->value.numel, N = dp->comm->world_size;
    if (s * N == n) return dp_comm_all_gather(dp->comm, part, into);
    int64_t wshape[1] = {s * N}, head[1] = {n};
    dp_tensor whole, dst, src;
    DP_TRY(dp_tensor_init_module(&whole, dp->dev, part->dtype, 1, wshape, DP_CAT_TEMP, p->module));
    int rc = dp_comm_all_gather(dp->comm, part, &whole);
    if (rc == DP_OK) rc = dp_tensor_view(&dst, into, 0, 1, head);
    if (rc == DP_OK) rc = dp_tensor_view(&src, &whole, 0, 1, head);
    if (rc == DP_OK) rc = dp_tensor_copy(&dst, &src);
    dp_tensor_release(&whole);
    return rc;
}

int dpsgd_shard_gather(dpsgd *dp, dp_param *p) {
    int64_t pshape[1] = {part_of(dp, p)};
    dp_tensor part;
    DP_TRY(dp_tensor_init_module(&part, dp->dev, p->value.dtype, 1, pshape, DP_CAT_TEMP, p->module));
    int rc = dp_part_fill(&part, &p->value, dp->comm->world_size, dp->comm->rank);
    if (rc == DP_OK) rc = dpsgd_gather_parts(dp, p, &part, &p->value);
    dp_tensor_release(&part);
    if (rc == DP_OK) dp_tensor_release(&p->grad); /* the part was spent by the optimizer */
    return rc;
}
