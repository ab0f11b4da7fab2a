/* dpsgd_strategy_ops.c: each strategy's hooks, one table per strategy. One process (none) and ddp
 * run the model's own backward and touch no part: neither enters zero2's (dpsgd_shard.c) nor
 * fsdp's (dpsgd_fsdp.c) code. ddp sums a gradient with an all-reduce in place; zero2
 * reduce-scatters it into this rank's slice and all-gathers the updated slices after the
 * optimizer; fsdp keeps every tensor in parts (dpsgd_fsdp.c). */
#include "dpsgd_impl.h"

#include "error.h"

/* ---- one process, ddp ---- */

static int whole_backward(dpsgd *dp, const dp_backward_opts *o) { return dp_model_backward(dp->model, o); }

static int ddp_reduce(dpsgd *dp, int k) {
    DP_TRY(dpsgd_ensure_grad(dp, dp->params[k]));
    return dp_comm_all_reduce(dp->comm, &dp->params[k]->grad);
}

/* ---- zero2 ---- */

static int zero2_reduce(dpsgd *dp, int k) { return dpsgd_shard_reduce(dp, dp->params[k]); }

static int zero2_after_step(dpsgd *dp) {
    for (int k = 0; k < dp->n_params; k++) DP_TRY(dpsgd_shard_gather(dp, dp->params[k]));
    return dp->model ? dp_model_sync_compute_weights(dp->model) : DP_OK;
}

/* ---- fsdp ---- */

static void fsdp_plan(dpsgd *dp, dpsgd_step_plan *plan) {
    /* each physical batch gathers every block, so every rank runs as many as the rank with the
     * most, padding ones after its own (each rank's slice follows from the logical size: no
     * collective) */
    dpsgd_sampling_pad(plan, dp->comm->world_size, dp->cfg.max_physical_batch_size);
}

static int fsdp_reduce(dpsgd *dp, int k) {
    if (dpsgd_fsdp_take_part(dp, k)) return DP_OK; /* per block, in the backward */
    return dpsgd_shard_reduce(dp, dp->params[k]);
}

/* ---- the tables ---- */

static const dpsgd_strategy_ops tables[DPSGD_N_STRATEGIES] = {
    [DPSGD_STRATEGY_NONE] = {.kind = DPSGD_STRATEGY_NONE, .backward = whole_backward},
    [DPSGD_STRATEGY_DDP] = {.kind = DPSGD_STRATEGY_DDP, .backward = whole_backward, .reduce = ddp_reduce},
    [DPSGD_STRATEGY_ZERO2] = {.kind = DPSGD_STRATEGY_ZERO2,
                              .setup = dpsgd_shard_setup,
                              .clear = dpsgd_shard_clear,
                              .backward = whole_backward,
                              .reduce = zero2_reduce,
                              .after_step = zero2_after_step},
    [DPSGD_STRATEGY_FSDP] = {.kind = DPSGD_STRATEGY_FSDP,
                             .setup = dpsgd_fsdp_setup,
                             .clear = dpsgd_fsdp_clear,
                             .backward = dpsgd_fsdp_backward,
                             .plan = fsdp_plan,
                             .reduce = fsdp_reduce,
                             .after_step = dpsgd_fsdp_after_step,
                             .unshard = dpsgd_fsdp_unshard},
};

const dpsgd_strategy_ops *dpsgd_strategy_table(dpsgd_strategy s) {
    return (unsigned)s < DPSGD_N_STRATEGIES ? &tables[s] : NULL;
}
