/* test_dp_dist.c: the `distributed` configuration checked in one place and the world chosen from
 * the device (engine/dp/dpsgd_dist.c): each refusal with its message; the plan device's simulated
 * world of the configuration's size, held by the wrapper, with its rank; a CPU run without a
 * launcher placed in the launched world of one, whose size a configuration must not contradict. */
#include "check.h"
#include "dpprof_engine.h"
#include "dpsgd_impl.h"
#include "test_util.h"

#include <string.h>

/* rc is code and the error message holds text */
static void refused(int rc, int code, const char *text) {
    CHECK(rc == code);
    if (!strstr(dp_error_message(), text)) fprintf(stderr, "message: %s (wanted: %s)\n", dp_error_message(), text);
    CHECK(strstr(dp_error_message(), text) != NULL);
}

static dpsgd_dist_config config(dpsgd_strategy s, int64_t world_size, int64_t rank) {
    dpsgd_dist_config c;
    dpsgd_dist_config_default(&c);
    CHECK(c.strategy == DPSGD_STRATEGY_DDP && c.world_size == DPSGD_DIST_UNSET && c.rank == DPSGD_DIST_UNSET);
    c.strategy = s, c.world_size = world_size, c.rank = rank;
    return c;
}

static void test_checks(void) {
    const int64_t U = DPSGD_DIST_UNSET;
    dpsgd_dist_config c = config(DPSGD_STRATEGY_DDP, U, U);
    CHECK_OK(dpsgd_dist_config_check(&c, DP_DEV_PLAN));
    CHECK_OK(dpsgd_dist_config_check(&c, DP_DEV_CPU));
    c = config(DPSGD_STRATEGY_NONE, U, U);
    refused(dpsgd_dist_config_check(&c, DP_DEV_PLAN), DP_ENOTSUP, "'none' is not a strategy a run trains under");
    c = config(DPSGD_STRATEGY_FSDP, 0, U);
    refused(dpsgd_dist_config_check(&c, DP_DEV_PLAN), DP_EINVAL, "distributed.world_size must be at least 1, got 0");
    c = config(DPSGD_STRATEGY_ZERO2, (1 << 20) + 1, U);
    refused(dpsgd_dist_config_check(&c, DP_DEV_PLAN), DP_EINVAL,
            "distributed.world_size 1048577 is more ranks than dpprof models (at most 1048576)");
    c = config(DPSGD_STRATEGY_DDP, 1 << 20, (1 << 20) - 1);
    CHECK_OK(dpsgd_dist_config_check(&c, DP_DEV_PLAN));
    c = config(DPSGD_STRATEGY_DDP, 2, 2);
    refused(dpsgd_dist_config_check(&c, DP_DEV_PLAN), DP_EINVAL, "distributed.rank 2 is not a rank of a world of 2");
    c = config(DPSGD_STRATEGY_DDP, U, 1); /* a plan world of one by default */
    refused(dpsgd_dist_config_check(&c, DP_DEV_PLAN), DP_EINVAL, "distributed.rank 1 is not a rank of a world of 1");
    c = config(DPSGD_STRATEGY_DDP, 4, -1);
    refused(dpsgd_dist_config_check(&c, DP_DEV_PLAN), DP_EINVAL, "distributed.rank -1 is not a rank of a world of 4");
    c = config(DPSGD_STRATEGY_DDP, U, 0);
    refused(dpsgd_dist_config_check(&c, DP_DEV_CPU), DP_EINVAL, "distributed.rank is the launcher's on device 'cpu'");
}

static void test_place(void) {
    const int64_t U = DPSGD_DIST_UNSET;
    int64_t ws = -7, rank = -7;
    dpsgd_dist_config c = config(DPSGD_STRATEGY_DDP, U, U);
    CHECK_OK(dpsgd_dist_place(&c, DP_DEV_PLAN, &ws, &rank));
    CHECK(ws == 1 && rank == 0);
    c = config(DPSGD_STRATEGY_FSDP, 8, 5);
    CHECK_OK(dpsgd_dist_place(&c, DP_DEV_PLAN, &ws, &rank));
    CHECK(ws == 8 && rank == 5);
    /* no launcher in the test's environment: the launched world is this process alone */
    c = config(DPSGD_STRATEGY_DDP, U, U);
    CHECK_OK(dpsgd_dist_place(&c, DP_DEV_CPU, &ws, &rank));
    CHECK(ws == 1 && rank == 0);
    c = config(DPSGD_STRATEGY_DDP, 2, U);
    refused(dpsgd_dist_place(&c, DP_DEV_CPU, &ws, &rank), DP_EINVAL,
            "distributed.world_size is 2 but this run was launched with 1 rank(s) (run it as mpirun -np 2");
    c = config(DPSGD_STRATEGY_DDP, 2, 1); /* checked before the world is looked at */
    refused(dpsgd_dist_place(&c, DP_DEV_CPU, &ws, &rank), DP_EINVAL, "distributed.rank is the launcher's");
}

/* dpsgd_distribute on a model of device kind: the world the wrapper trains in */
static void test_distribute(dp_device_kind kind) {
    dp_device *dev;
    CHECK_OK(dp_device_get(kind, &dev));
    dp_model_config mc;
    dp_model_config_default(&mc, DP_ARCH_GPT);
    mc.vocab = 19, mc.hidden = 16, mc.heads = 2, mc.layers = 1, mc.ffn = 24, mc.seq_len = 9, mc.batch = 8;
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(dev, &mc, &m));
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    dpsgd *dp = NULL;
    dp_optimizer *opt = NULL;
    CHECK_OK(test_dp_sgd(m, &cfg, 1.0, 0.5, 8, &dp, &opt));
    if (dp) {
        dpsgd_dist_config c = config(DPSGD_STRATEGY_DDP, kind == DP_DEV_PLAN ? 4 : DPSGD_DIST_UNSET,
                                     kind == DP_DEV_PLAN ? 3 : DPSGD_DIST_UNSET);
        CHECK_OK(dpsgd_distribute(dp, &c));
        CHECK(dp->comm && dp->strat == dpsgd_strategy_table(DPSGD_STRATEGY_DDP));
        if (kind == DP_DEV_PLAN) /* the simulated world, the wrapper's own */
            CHECK(dp->comm == &dp->plan_comm && dp->comm->world_size == 4 && dp->comm->rank == 3);
        else {
            dp_comm *w;
            CHECK_OK(dp_comm_world(&w));
            CHECK(dp->comm == w && w->world_size == 1 && w->rank == 0);
        }
        c = config(DPSGD_STRATEGY_DDP, 2, kind == DP_DEV_PLAN ? 2 : DPSGD_DIST_UNSET); /* refused: kept as it was */
        const dp_comm *before = dp->comm;
        CHECK(dpsgd_distribute(dp, &c) == DP_EINVAL);
        CHECK(dp->comm == before);
    }
    dp_optim_free(opt);
    dpsgd_free(dp);
    dp_model_free(m);
}

int main(void) {
    dp_engine_init();
    test_checks();
    test_place();
    test_distribute(DP_DEV_PLAN);
    test_distribute(DP_DEV_CPU);
    return check_report("test_dp_dist");
}
