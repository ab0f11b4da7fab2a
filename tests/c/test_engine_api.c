/* test_engine_api.c: the engine embedded in C alone, through dpprof_engine.h (the only engine
 * header included here; the test links dpprof_engine and no Lua). It builds a small GPT, runs a
 * DP-SGD step with two methods and an AdamW step, and reads the allocator's breakdown:
 * - the per-sample norms of ghost + twopass and flat (materialize + bk) agree, and each clip
 *   factor is min(1, C / (norm + 1e-6));
 * - the bytes per category are exact: parameters 4 per scalar, gradients 4 per trainable scalar
 *   after the noise, AdamW's two states 8 per trainable scalar, the norm rows B floats per
 *   trainable tensor at their peak (plus bk's B clip factors), and nothing left once everything
 *   is freed;
 * - the accountants answer by name: RDP over a one-segment history is dp_acct_rdp_sampled_epsilon, PRV
 *   (Opacus's default) lies below it;
 * - the per-op profile of a few steps read op by op (dp_engine_op_at): every op called and timed,
 *   its flops and bytes the ledger's, the known ops present in their categories, and the ops'
 *   time within the wall time measured around the steps (on a clock of the test's own). */
#include "check.h"
#include "dpprof_engine.h"

#include <math.h>
#include <string.h>
#include <time.h>

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

/* Seconds on the system's monotonic clock: not the engine clock the profile times calls with. */
static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The op named name in the profile, or NULL. */
static const dp_engine_op *find_op(const dp_engine_op *ops, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(ops[i].op, name) == 0) return &ops[i];
    return NULL;
}

/* STEPS ghost steps with noise and AdamW, profiled: the per-op table read through the facade. */
static void profiled_steps(dp_device *dev) {
    enum { STEPS = 3, MAX_OPS = 256 };
    dp_model_config mc;
    small_gpt(&mc);
    dp_model *m = NULL;
    dp_optimizer *opt = NULL;
    dpsgd *dp = NULL;
    dp_batch b;
    memset(&b, 0, sizeof b);
    CHECK_OK(dp_model_new(dev, &mc, &m));
    if (!m) return;
    dp_optim_opts oo;
    dp_optim_opts_default(&oo, DP_OPTIM_ADAMW);
    CHECK_OK(dp_optim_new(m, DP_OPTIM_ADAMW, &oo, &opt));
    dpsgd_config dc;
    dpsgd_config_default(&dc);
    CHECK_OK(dpsgd_method_preset("ghost", &dc.norms, &dc.clip));
    dc.noise_multiplier = 1.0;
    CHECK_OK(dpsgd_new(m, &dc, &dp));
    CHECK_OK(dp_batch_init(&b, dev, B, T));

    dp_ledger_reset();
    CHECK(dp_engine_op_count() == 0);
    dp_profile_enable(dev, 1);
    CHECK(dp_profile_active);
    double t0 = wall_s();
    for (int s = 0; s < STEPS; s++) {
        dpsgd_step_plan sp;
        float loss = 0.0f;
        CHECK_OK(dpsgd_next_step(dp, &sp));
        for (int k = 0; k < sp.n_physical; k++) {
            CHECK_OK(dp_data_synthetic(&b.inputs, &b.targets, mc.vocab, 11, (uint64_t)(s * 8 + k)));
            CHECK_OK(dpsgd_forward(dp, &b.inputs, &b.targets, &loss, NULL));
            CHECK_OK(dpsgd_backward(dp));
            CHECK_OK(dpsgd_clip(dp));
        }
        CHECK_OK(dpsgd_noise(dp));
        CHECK_OK(dp_optim_step(opt));
        CHECK_OK(dp_optim_zero_grad(opt, 1));
    }
    CHECK_OK(dp_device_sync(dev));
    CHECK_OK(dp_profile_collect(dev));
    double wall_ms = (wall_s() - t0) * 1e3, total_ms = dp_profile_total_ns() * 1e-6;
    dp_profile_enable(dev, 0); /* off: the timing stops, the table stays */

    size_t n = dp_engine_op_count();
    CHECK(n >= 10 && n <= MAX_OPS);
    dp_engine_op ops[MAX_OPS];
    double ops_ms = 0, flops = 0, bytes = 0;
    for (size_t i = 0; i < n && i < MAX_OPS; i++) {
        CHECK_OK(dp_engine_op_at(i, &ops[i]));
        const dp_engine_op *o = &ops[i];
        const dp_ledger_entry *e = dp_ledger_at(i);
        CHECK(e && strcmp(o->op, e->op) == 0 && o->flops == e->flops && o->bytes == e->bytes);
        CHECK(o->calls > 0 && o->timed_calls > 0); /* one call may dispatch several: no order */
        CHECK(o->ms >= 0 && o->bytes >= 0 && o->flops >= 0);
        CHECK(strcmp(o->category, dp_engine_op_category(o->op)) == 0);
        ops_ms += o->ms;
        flops += o->flops;
        bytes += o->bytes;
    }
    /* the ops ran inside the steps, so their time is part of the wall time around them */
    CHECK(ops_ms > 0 && ops_ms <= wall_ms);
    CHECK_CLOSE(ops_ms, total_ms, 1e-9 * ops_ms);
    double ledger_flops = 0, ledger_bytes = 0;
    dp_ledger_totals(&ledger_flops, &ledger_bytes);
    CHECK(flops == ledger_flops && bytes == ledger_bytes && flops > 0);

    /* the ops a GPT's ghost step makes, in their categories; each call of a step counted */
    static const char *const known[][2] = {
        {"gemm", "matmul"},          {"attention_fwd", "attention"}, {"attention_bwd", "attention"},
        {"layernorm_fwd", "norm"},   {"layernorm_bwd", "norm"},      {"dp_noise", "noise"},
        {"adamw_step", "optimizer"}, {"gelu_fwd", "other"}};
    for (size_t k = 0; k < sizeof known / sizeof *known; k++) {
        const dp_engine_op *o = find_op(ops, n < MAX_OPS ? n : MAX_OPS, known[k][0]);
        CHECK(o != NULL);
        if (!o) continue;
        CHECK(strcmp(o->category, known[k][1]) == 0);
        CHECK(o->calls % STEPS == 0 && o->ms > 0);
    }
    const dp_engine_op *g = find_op(ops, n < MAX_OPS ? n : MAX_OPS, "gemm");
    CHECK(g && g->flops > 0 && g->bytes > 0);

    dp_engine_op none;
    CHECK(dp_engine_op_at(n, &none) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "out of range") != NULL);
    /* a ledger section's op is in its op's category; names outside the table are "other" */
    CHECK(strcmp(dp_engine_op_category("recompute:gemm"), "matmul") == 0);
    CHECK(strcmp(dp_engine_op_category("dp_clip_embedding"), "clip") == 0);
    CHECK(strcmp(dp_engine_op_category("dp_ghost_dot"), "per_sample_norms") == 0);
    CHECK(strcmp(dp_engine_op_category("sumsq"), "per_sample_norms") == 0);
    CHECK(strcmp(dp_engine_op_category("recompute:"), "other") == 0);

    dp_batch_release(&b);
    dpsgd_free(dp);
    dp_optim_free(opt);
    dp_model_free(m);
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
    CHECK(dp_acct_parse("prv", &kind, err, sizeof err) == DP_ACCT_OK && kind == DP_ACCT_PRV);
    dp_acct_segment h = {1.0, 0.01, 1000};
    double rdp = 0, prv = 0, direct = 0, order = 0;
    CHECK(dp_acct_epsilon(DP_ACCT_RDP, &h, 1, 1e-5, NULL, &rdp, NULL, err, sizeof err) == DP_ACCT_OK);
    CHECK(dp_acct_epsilon(kind, &h, 1, 1e-5, NULL, &prv, NULL, err, sizeof err) == DP_ACCT_OK);
    CHECK(dp_acct_rdp_sampled_epsilon(0.01, 1.0, 1000, 1e-5, &direct, &order, NULL, 0) == DP_ACCT_OK);
    CHECK(rdp == direct && prv > 1.8 && prv < rdp);
    profiled_steps(dev);
    dp_engine_shutdown();
    return check_report("test_engine_api");
}
