/* dp_step.c: a C program outside the tree, built against the installed libdpprof.so with
 * pkg-config (tests/install/test_install.sh): one DP-SGD step of a small GPT through the engine's
 * C API; prints the loss and the parameters' bytes, and exits 1 on any failure. */
#include <dpprof/dpprof_engine.h>

#include <math.h>
#include <stdio.h>

#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        if ((call) != DP_OK) {                                                                                         \
            fprintf(stderr, "dp_step: %s: %s\n", #call, dp_error_message());                                          \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

int main(void) {
    TRY(dp_engine_init());
    dp_device *dev;
    TRY(dp_device_get(DP_DEV_CPU, &dev));
    dp_model_config mc;
    dp_model_config_default(&mc, DP_ARCH_GPT);
    mc.vocab = 64, mc.hidden = 32, mc.layers = 2, mc.heads = 2, mc.seq_len = 8, mc.batch = 4, mc.seed = 7;
    dp_model *m;
    TRY(dp_model_new(dev, &mc, &m));
    dp_optim_opts oo;
    dp_optim_opts_default(&oo, DP_OPTIM_ADAMW);
    dp_optimizer *opt;
    TRY(dp_optim_new(m, DP_OPTIM_ADAMW, &oo, &opt));
    dpsgd_config dc;
    dpsgd_config_default(&dc);
    TRY(dpsgd_method_preset("ghost", &dc.norms, &dc.clip));
    dpsgd *dp;
    TRY(dpsgd_new(m, &dc, &dp));
    dp_batch b;
    TRY(dp_batch_init(&b, dev, mc.batch, mc.seq_len));
    dpsgd_step_plan sp;
    TRY(dpsgd_next_step(dp, &sp));
    float loss = 0.0f;
    for (int k = 0; k < sp.n_physical; k++) {
        TRY(dp_data_synthetic(&b.inputs, &b.targets, mc.vocab, 11, k));
        TRY(dpsgd_forward(dp, &b.inputs, &b.targets, &loss, NULL));
        TRY(dpsgd_backward(dp));
        TRY(dpsgd_clip(dp));
    }
    TRY(dpsgd_noise(dp));
    TRY(dp_optim_step(opt));
    dp_mem_stats st;
    dp_mem_get_stats(dev->mem, &st);
    printf("loss %.6f parameters %llu of %lld scalars\n", loss, (unsigned long long)st.current[DP_CAT_PARAMETERS],
           (long long)dp_model_num_params(m, 0));
    int ok = isfinite(loss) && loss > 0 && st.current[DP_CAT_PARAMETERS] == 4 * (uint64_t)dp_model_num_params(m, 0);
    dp_batch_release(&b);
    dpsgd_free(dp);
    dp_optim_free(opt);
    dp_model_free(m);
    dp_engine_shutdown();
    return ok ? 0 : 1;
}
