/* dpsgd_dist.h: a run's `distributed` configuration (strategy, world size, rank), checked in one
 * place, and the world DP-SGD trains over, chosen once from the model's device: the plan device a
 * simulated world (comm_plan.c), a CPU the launched world (MPI when launched with more than one
 * rank), CUDA NCCL over it. The Lua bindings (priv:distribute, dpprof.model's `distributed`,
 * dpprof.dist.check, which dp.experiment's configuration checks call) read the table and call these. */
#ifndef DPSGD_DIST_H
#define DPSGD_DIST_H

#include "device.h"
#include "dpsgd.h"
#include "dpsgd_strategy.h"

#include <stdint.h>

/* The most ranks a world may have (a plan's simulated one included): 2^20. */
#define DPSGD_MAX_WORLD (1 << 20)
/* A world size or rank the configuration does not give. */
#define DPSGD_DIST_UNSET INT64_MIN

/* strategy; world_size: DPSGD_DIST_UNSET for the launched world's (a plan world: 1); rank:
 * DPSGD_DIST_UNSET for the launcher's (a plan world: 0). */
typedef struct dpsgd_dist_config {
    dpsgd_strategy strategy;
    int64_t world_size, rank;
} dpsgd_dist_config;

/* ddp (data parallel unless said), the launched world's size, the launcher's rank. */
void dpsgd_dist_config_default(dpsgd_dist_config *cfg);
/* Checks cfg as a run on a device of `kind` takes it, without looking at the launched world:
 * DP_EINVAL "distributed.world_size must be at least 1, got N", "... N is more ranks than dpprof
 * models (at most 2^20)", on plan "distributed.rank R is not a rank of a world of N", elsewhere
 * "distributed.rank is the launcher's on device 'cpu' (...)"; DP_ENOTSUP for a strategy not
 * implemented. */
int dpsgd_dist_config_check(const dpsgd_dist_config *cfg, dp_device_kind kind);
/* The world size and rank a run of cfg on a device of `kind` is (cfg checked first): on plan cfg's,
 * 1 and 0 when not given; elsewhere the launched world's (started at the first call), whose size
 * cfg's must be when given: DP_EINVAL "distributed.world_size is N but this run was launched with
 * M rank(s) (...)". */
int dpsgd_dist_place(const dpsgd_dist_config *cfg, dp_device_kind kind, int64_t *world_size, int64_t *rank);
/* Trains dp as one rank of cfg's world (dpsgd_set_distributed) on its model's device: the plan
 * device's simulated world of that size, held by dp; elsewhere the launched world, through NCCL
 * for CUDA tensors (libnccl.so.2 loaded at the first call). Errors as dpsgd_dist_place and
 * dpsgd_set_distributed report them, and NCCL's. */
int dpsgd_distribute(dpsgd *dp, const dpsgd_dist_config *cfg);

#endif
