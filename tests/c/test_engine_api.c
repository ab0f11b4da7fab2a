/* test_engine_api.c: the engine embedded in C alone, through dpprof_engine.h (the only engine
 * header included here; the test links dpprof_engine and no Lua). It builds a small GPT, runs a
 * DP-SGD step with two methods and an AdamW step, and reads the allocator's breakdown:
 * - the per-sample norms of ghost + twopass and flat (materialize + bk) agree, and each clip
 *   factor is min(1, C / (norm + 1e-6));
 * - the bytes per category are exact: parameters 4 per scalar, gradients 4 per trainable scalar
 *   after the noise, AdamW's two states 8 per trainable scalar, the norm rows B floats per
 *   trainable tensor at their peak (plus bk's B clip factors), and nothing left once everything
 *   is freed;
 * - the accountants answer by name: RDP over a one-segment history is dp_privacy_epsilon, PRV
 *   (Opacus's default) lies below it. */
#include "check.h"
#include "dpprof_engine.h"

#include <math.h>
#include <string.h>

enum { B = 4, T = 8 };

static void small_gpt(dp_model_config *mc) {
    dp_model_config_default(mc, DP_ARCH_GPT);
    mc->vocab = 64;
    mc->hidden = 32;
    mc->layers = 2;
    mc->heads = 2;
    mc->seq_len = T;
    mc->batch = B;
    mc->seed = 7;
}

/* One logical DP step of preset `method` on a fresh model; copies the per-sample norms and the
 * peak of per-sample gradient bytes out, and checks the breakdown as it goes. */
static void dp_step(dp_device *dev, const char *method, float *norms, uint64_t *per_sample_peak) {
    dp_model_config mc;
    small_gpt(&mc);
    dp_model *m = NULL;
    dp_optimizer *opt = NULL;
    dpsgd *dp = NULL;
    dp_batch b;
    memset(&b, 0, sizeof b);
    CHECK_OK(dp_model_new(dev, &mc, &m));
    if (!m) return;
    int64_t scalars = dp_model_num_params(m, 0), trainable = dp_model_num_params(m, 1);
    int tensors = 0;
    for (int i = 0; i < dp_model_param_count(m); i++) tensors += dp_model_param(m, i)->trainable;

    dp_optim_opts oo;
    dp_optim_opts_default(&oo, DP_OPTIM_ADAMW);
    CHECK_OK(dp_optim_new(m, DP_OPTIM_ADAMW, &oo, &opt));
    dpsgd_config dc;
    dpsgd_config_default(&dc);
    CHECK_OK(dpsgd_method_preset(method, &dc.norms, &dc.clip));
    dc.max_grad_norm = 0.5;
    dc.noise_multiplier = 0.0; /* the update is the clipped mean: deterministic */
    CHECK_OK(dpsgd_new(m, &dc, &dp));
    CHECK_OK(dp_batch_init(&b, dev, B, T));
    CHECK_OK(dp_data_synthetic(&b.inputs, &b.targets, mc.vocab, 11, 0));

    dp_mem_stats st;
    dp_mem_reset_peak(dev->mem);
    dp_mem_get_stats(dev->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_PARAMETERS], 4 * scalars);
    CHECK_EQ_U64(st.current[DP_CAT_GRADIENTS], 0);

    dpsgd_step_plan sp;
    float loss = 0.0f;
    CHECK_OK(dpsgd_next_step(dp, &sp));
    CHECK(sp.logical_size == B && sp.n_physical == 1);
    CHECK_OK(dpsgd_forward(dp, &b.inputs, &b.targets, &loss, NULL));
    CHECK(isfinite(loss) && loss > 0.0f);
    CHECK_OK(dpsgd_backward(dp));
    CHECK_OK(dpsgd_clip(dp));
    CHECK_OK(dpsgd_noise(dp));

    size_t n = 0, nf = 0;
    const float *got = dpsgd_norms(dp, &n), *factors = dpsgd_clip_factors(dp, &nf);
    CHECK(n == B && nf == B);
    for (size_t i = 0; i < n && i < B; i++) {
        norms[i] = got[i];
        CHECK(isfinite(got[i]) && got[i] > 0.0f);
        CHECK_CLOSE(factors[i], fmin(1.0, 0.5 / (got[i] + 1e-6)), 1e-6);
    }

    dp_mem_get_stats(dev->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_GRADIENTS], 4 * trainable);
    /* one B-float row per trainable tensor; bk also keeps the B clip factors on the device */
    int bk = dc.clip == DPSGD_CLIP_BK;
    CHECK_EQ_U64(st.peak[DP_CAT_NORM_SAMPLES], 4 * B * (tensors + bk));
    *per_sample_peak = st.peak[DP_CAT_PER_SAMPLE_GRADS];
    CHECK_EQ_U64(st.current[DP_CAT_NORM_SAMPLES], 0);
    CHECK_EQ_U64(st.current[DP_CAT_PER_SAMPLE_GRADS], 0);
    CHECK_EQ_U64(st.current[DP_CAT_ACTIVATIONS], 0);

    CHECK_OK(dp_optim_step(opt));
    dp_mem_get_stats(dev->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_OPTIMIZER_STATES], 8 * trainable);
    CHECK_EQ_U64(dp_optim_state_bytes(opt), 8 * trainable);
    CHECK_OK(dp_optim_zero_grad(opt, 1));

    dp_batch_release(&b);
    dpsgd_free(dp);
    dp_optim_free(opt);
    dp_model_free(m);
    dp_mem_get_stats(dev->mem, &st);
    CHECK_EQ_U64(st.total_current, 0);
    CHECK_EQ_U64(st.n_live, 0);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    dp_device *dev = NULL;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &dev));
    if (!dev) return check_report("test_engine_api");
    float ghost[B], flat[B];
    uint64_t ghost_psg = 0, flat_psg = 0;
    dp_step(dev, "ghost", ghost, &ghost_psg);
    dp_step(dev, "flat", flat, &flat_psg);
    for (int i = 0; i < B; i++) CHECK_CLOSE(ghost[i], flat[i], 1e-4);
    /* materialize forms every weight's per-sample gradients; ghost only biases' and gains' */
    CHECK(ghost_psg > 0 && flat_psg > 10 * ghost_psg);
    dp_acct_kind kind = DP_ACCT_RDP;
    char err[256];
    CHECK(dp_acct_parse("prv", &kind, err, sizeof err) == DP_PRIVACY_OK && kind == DP_ACCT_PRV);
    dp_acct_segment h = {1.0, 0.01, 1000};
    double rdp = 0, prv = 0, direct = 0, order = 0;
    CHECK(dp_acct_epsilon(DP_ACCT_RDP, &h, 1, 1e-5, NULL, &rdp, NULL, err, sizeof err) == DP_PRIVACY_OK);
    CHECK(dp_acct_epsilon(kind, &h, 1, 1e-5, NULL, &prv, NULL, err, sizeof err) == DP_PRIVACY_OK);
    CHECK(dp_privacy_epsilon(0.01, 1.0, 1000, 1e-5, &direct, &order, NULL, 0) == DP_PRIVACY_OK);
    CHECK(rdp == direct && prv > 1.8 && prv < rdp);
    dp_engine_shutdown();
    return check_report("test_engine_api");
}
