/* dpsgd_dist.c: the `distributed` configuration checked, and the world chosen from the device
 * (dpsgd_dist.h). */
#include "dpsgd_dist.h"

#include "comm_nccl.h"
#include "dpsgd_impl.h"
#include "error.h"

void dpsgd_dist_config_default(dpsgd_dist_config *cfg) {
    cfg->strategy = DPSGD_STRATEGY_DDP;
    cfg->world_size = DPSGD_DIST_UNSET;
    cfg->rank = DPSGD_DIST_UNSET;
}

int dpsgd_dist_config_check(const dpsgd_dist_config *cfg, dp_device_kind kind) {
    if (cfg->strategy == DPSGD_STRATEGY_NONE || !dpsgd_strategy_supported(cfg->strategy))
        return dp_error_set(DP_ENOTSUP, "distributed.strategy: '%s' is not a strategy a run trains under (valid: %s)",
                            dpsgd_strategy_name(cfg->strategy), dpsgd_strategies_text());
    int64_t ws = cfg->world_size, rank = cfg->rank;
    if (ws != DPSGD_DIST_UNSET && ws < 1)
        return dp_error_set(DP_EINVAL, "distributed.world_size must be at least 1, got %lld", (long long)ws);
    if (ws > DPSGD_MAX_WORLD)
        return dp_error_set(DP_EINVAL, "distributed.world_size %lld is more ranks than dpprof models (at most %d)",
                            (long long)ws, DPSGD_MAX_WORLD);
    if (rank == DPSGD_DIST_UNSET) return DP_OK;
    if (kind != DP_DEV_PLAN)
        return dp_error_set(DP_EINVAL,
                            "distributed.rank is the launcher's on device '%s' (only a plan run names the rank it "
                            "plays)",
                            dp_device_kind_name(kind));
    int64_t world = ws == DPSGD_DIST_UNSET ? 1 : ws;
    if (rank < 0 || rank >= world)
        return dp_error_set(DP_EINVAL, "distributed.rank %lld is not a rank of a world of %lld", (long long)rank,
                            (long long)world);
    return DP_OK;
}

int dpsgd_dist_place(const dpsgd_dist_config *cfg, dp_device_kind kind, int64_t *world_size, int64_t *rank) {
    DP_TRY(dpsgd_dist_config_check(cfg, kind));
    if (kind == DP_DEV_PLAN) {
        *world_size = cfg->world_size == DPSGD_DIST_UNSET ? 1 : cfg->world_size;
        *rank = cfg->rank == DPSGD_DIST_UNSET ? 0 : cfg->rank;
        return DP_OK;
    }
    dp_comm *w;
    DP_TRY(dp_comm_world(&w));
    int64_t want = cfg->world_size;
    if (want != DPSGD_DIST_UNSET && want != w->world_size)
        return dp_error_set(DP_EINVAL,
                            "distributed.world_size is %lld but this run was launched with %d rank(s) (run it as "
                            "mpirun -np %lld dpprof run ..., or srun -n %lld)",
                            (long long)want, w->world_size, (long long)want, (long long)want);
    *world_size = w->world_size, *rank = w->rank;
    return DP_OK;
}

int dpsgd_distribute(dpsgd *dp, const dpsgd_dist_config *cfg) {
    dp_device_kind kind = dp_model_device(dp->model)->kind;
    int64_t ws, rank;
    DP_TRY(dpsgd_dist_place(cfg, kind, &ws, &rank));
    dp_comm *comm;
    if (kind == DP_DEV_PLAN) {
        dp_comm_plan(&dp->plan_comm, (int)rank, (int)ws);
        comm = &dp->plan_comm;
    } else {
        DP_TRY(dp_comm_world(&comm));
        if (kind == DP_DEV_CUDA) DP_TRY(dp_comm_nccl(comm, &comm));
    }
    return dpsgd_set_distributed(dp, comm, cfg->strategy);
}
