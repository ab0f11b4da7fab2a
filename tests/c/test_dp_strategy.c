/* test_dp_strategy.c: the strategy table (dpsgd_strategy_ops.c) is chosen once, and one process
 * (and ddp) never enters fsdp's code (dpsgd_fsdp.c) nor zero2's (dpsgd_shard.c).
 *
 * The link wraps every function those two files export to the rest of dp (-Wl,--wrap, set in
 * tests/CMakeLists.txt): each __wrap_ counts its calls and calls the real one. A step of vanilla,
 * ghost (twopass) and bk on one process, then under ddp in a world of one, must count none; zero2
 * counts shard calls and no fsdp ones; fsdp counts fsdp calls (the wrapping works). The table of a
 * new wrapper is one process's; dpsgd_set_distributed picks the strategy's; 'none' refuses a world
 * of more than one. */
#include "check.h"
#include "device.h"
#include "comm.h"
#include "dpprof_engine.h"
#include "dpsgd_impl.h"
#include "error.h"
#include "model.h"
#include "optim.h"
#include "test_util.h"

#include <string.h>

static int fsdp_calls, shard_calls;

#define WRAP(counter, ret, name, params, args)                                                                         \
    ret __real_##name params;                                                                                          \
    ret __wrap_##name params;                                                                                          \
    ret __wrap_##name params {                                                                                         \
        counter++;                                                                                                     \
        return __real_##name args;                                                                                     \
    }

WRAP(fsdp_calls, int, dpsgd_fsdp_setup, (dpsgd * dp), (dp))
WRAP(fsdp_calls, void, dpsgd_fsdp_clear, (dpsgd * dp), (dp))
WRAP(fsdp_calls, int, dpsgd_fsdp_backward, (dpsgd * dp, const dp_backward_opts *o), (dp, o))
WRAP(fsdp_calls, int, dpsgd_fsdp_take_part, (dpsgd * dp, int k), (dp, k))
WRAP(fsdp_calls, int, dpsgd_fsdp_after_step, (dpsgd * dp), (dp))
WRAP(fsdp_calls, int, dpsgd_fsdp_unshard, (dpsgd * dp), (dp))
WRAP(fsdp_calls, int, dpsgd_fsdp_gather_only, (dpsgd * dp, int64_t layer), (dp, layer))
WRAP(fsdp_calls, int, dpsgd_fsdp_reduce_block, (dpsgd * dp, int64_t layer), (dp, layer))
WRAP(shard_calls, int, dpsgd_shard_setup, (dpsgd * dp), (dp))
WRAP(shard_calls, void, dpsgd_shard_clear, (dpsgd * dp), (dp))
WRAP(shard_calls, int, dpsgd_shard_reduce, (dpsgd * dp, dp_param *p), (dp, p))
WRAP(shard_calls, int, dpsgd_shard_gather, (dpsgd * dp, dp_param *p), (dp, p))

static dp_device *cpu;

static dp_model *make_model(void) {
    dp_model_config cfg;
    dp_model_config_default(&cfg, DP_ARCH_GPT);
    cfg.vocab = 19, cfg.hidden = 16, cfg.heads = 2, cfg.layers = 2, cfg.ffn = 24, cfg.seq_len = 9, cfg.batch = 5;
    cfg.checkpoint = 1; /* bk's clip recomputes the blocks: the path where fsdp gathers too */
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(cpu, &cfg, &m));
    return m;
}

/* One logical step of preset `method` under strategy s in a plan world of one (s NONE: no world). */
static void run_step(const char *method, dpsgd_strategy s) {
    dp_model *m = make_model();
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    CHECK_OK(dpsgd_method_preset(method, &cfg.norms, &cfg.clip));
    dpsgd *dp = NULL;
    dp_optimizer *opt = NULL;
    CHECK_OK(test_dp_sgd(m, &cfg, 1.0, 0.5, 5, &dp, &opt));
    dp_comm comm;
    if (dp && opt) {
        CHECK(dp->strat == dpsgd_strategy_table(DPSGD_STRATEGY_NONE)); /* a new wrapper is one process */
        if (s != DPSGD_STRATEGY_NONE) {
            dp_comm_plan(&comm, 0, 1);
            CHECK_OK(dpsgd_set_distributed(dp, &comm, s));
        }
        CHECK(dp->strat == dpsgd_strategy_table(s) && dp->strat->kind == s);
        dpsgd_step_plan plan;
        CHECK_OK(dpsgd_next_step(dp, &plan));
        dp_tensor *in = test_ids(cpu, 5, 9, 19, 17), *tg = test_ids(cpu, 5, 9, 19, 23);
        float loss;
        CHECK_OK(dpsgd_forward(dp, in, tg, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        CHECK_OK(dpsgd_noise(dp));
        CHECK_OK(dp_optim_step(opt));
        CHECK_OK(dpsgd_gather_params(dp));
        CHECK_OK(dpsgd_unshard(dp));
        dp_tensor_free(in);
        dp_tensor_free(tg);
    }
    dp_optim_free(opt);
    dpsgd_free(dp);
    dp_model_free(m);
}

static void test_tables(void) {
    for (int s = 0; s < DPSGD_N_STRATEGIES; s++) {
        const dpsgd_strategy_ops *t = dpsgd_strategy_table((dpsgd_strategy)s);
        CHECK(t && (int)t->kind == s && t->backward);
        /* only fsdp's backward is fsdp's; only zero2 and fsdp cut anything */
        CHECK((t->backward == __wrap_dpsgd_fsdp_backward) == (s == DPSGD_STRATEGY_FSDP));
        CHECK((t->setup != NULL) == (s == DPSGD_STRATEGY_ZERO2 || s == DPSGD_STRATEGY_FSDP));
        CHECK((t->reduce != NULL) == (s != DPSGD_STRATEGY_NONE));
    }
    CHECK(dpsgd_strategy_table((dpsgd_strategy)DPSGD_N_STRATEGIES) == NULL);
}

static void test_none_refuses_a_world(void) {
    dp_model *m = make_model();
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    dpsgd *dp = NULL;
    dp_optimizer *opt = NULL;
    CHECK_OK(test_dp_sgd(m, &cfg, 1.0, 0.5, 5, &dp, &opt));
    dp_comm comm;
    dp_comm_plan(&comm, 1, 4);
    CHECK(dp && dpsgd_set_distributed(dp, &comm, DPSGD_STRATEGY_NONE) == DP_EINVAL);
    CHECK(dp && dp->strat == dpsgd_strategy_table(DPSGD_STRATEGY_NONE) && dp->comm == NULL);
    dp_optim_free(opt);
    dpsgd_free(dp);
    dp_model_free(m);
}

int main(void) {
    dp_engine_init();
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_tables();
    const char *methods[] = {"vanilla", "ghost", "bk"};
    const dpsgd_strategy whole[] = {DPSGD_STRATEGY_NONE, DPSGD_STRATEGY_DDP};
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        for (size_t j = 0; j < 2; j++) {
            run_step(methods[i], whole[j]);
            if (fsdp_calls || shard_calls)
                fprintf(stderr, "%s under %s: %d fsdp and %d zero2 calls\n", methods[i], dpsgd_strategy_name(whole[j]),
                        fsdp_calls, shard_calls);
            CHECK(fsdp_calls == 0 && shard_calls == 0);
        }
    run_step("bk", DPSGD_STRATEGY_ZERO2);
    CHECK(shard_calls > 0 && fsdp_calls == 0);
    run_step("vanilla", DPSGD_STRATEGY_FSDP);
    CHECK(fsdp_calls > 0);
    test_none_refuses_a_world();
    return check_report("test_dp_strategy");
}
