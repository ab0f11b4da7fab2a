/* test_dp_update.c: every DP method gives the same parameter update as `flat` with the same
 * seeds, noise off and on: one logical batch of 5 samples in physical batches of 2, 2 and 1 (and
 * of 1, for flash's batch-of-one path), clipped with C between the samples' norms so that some
 * are clipped and some are not, noised once, divided by the expected batch size, then one SGD
 * step. Also: vanilla equals DP with no clipping and no noise (the mean gradient of the logical
 * batch), the phases refuse to run out of order or over a forward the model no longer holds (issue
 * 13 item 6: another forward in between), and the plan device allocates what the CPU does,
 * category by category, for every method.
 *
 * Tolerance: 1e-5 relative (L2 over all parameters) on the update; methods differ only in f32
 * summation order (ghost's Gram products against materialized gradients, bk's single GEMM
 * against a second backward). */
#include "check.h"
#include "test_util.h"
#include "device.h"
#include "dpprof_engine.h"
#include "dpsgd.h"
#include "error.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static dp_device *cpu;

typedef struct method {
    const char *name; /* a preset, or NULL for the pair below */
    dpsgd_norms_method norms;
    dpsgd_clip_method clip;
} method;

static const method methods[] = {
    {"flat", 0, 0},
    {"ghost", 0, 0},
    {"mixed_ghost", 0, 0},
    {"bk", 0, 0},
    {"flash_clip", 0, 0},
    {NULL, DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_TWOPASS},
    {NULL, DPSGD_NORMS_GHOST, DPSGD_CLIP_BK},
    {NULL, DPSGD_NORMS_FLASH, DPSGD_CLIP_TWOPASS},
};
#define N_METHODS (sizeof methods / sizeof *methods)

static dp_model *make_model(dp_arch arch, int tied, int lora) {
    dp_model_config cfg;
    dp_model_config_default(&cfg, arch);
    cfg.vocab = 19;
    cfg.hidden = 16;
    cfg.heads = 2;
    cfg.layers = 2;
    cfg.ffn = 24;
    cfg.seq_len = 9;
    cfg.batch = 2;
    cfg.tie_head = arch == DP_ARCH_GPT ? tied : 0;
    cfg.seed = 3;
    if (lora) {
        cfg.lora_rank = 2;
        cfg.lora_alpha = 2.0f;
        cfg.lora_targets = DP_LORA_QKV | DP_LORA_FC;
    }
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(cpu, &cfg, &m));
    for (int k = 0; m && k < dp_model_param_count(m); k++) {
        dp_param *p = dp_model_param(m, k);
        if (p->kind == DP_PARAM_LORA_B) CHECK_OK(dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0.0f, 0.3f, 5, 700 + k));
    }
    return m;
}

/* Runs one logical step of `physical`-sized batches with method mt; writes the concatenated
 * trainable parameters after one SGD step (lr 0.5) into out (n floats) and returns n. */
static int64_t run_step(dp_arch arch, int tied, int lora, const method *mt, double C, double sigma, int64_t physical,
                        float *out, int64_t cap, float *norms_out) {
    dp_model *m = make_model(arch, tied, lora);
    if (!m) return 0;
    int64_t physical_cfg = physical;
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    if (mt->name)
        CHECK_OK(dpsgd_method_preset(mt->name, &cfg.norms, &cfg.clip));
    else
        cfg.norms = mt->norms, cfg.clip = mt->clip;
    cfg.max_grad_norm = C;
    cfg.noise_multiplier = sigma;
    cfg.expected_batch_size = 5;
    cfg.max_physical_batch_size = physical_cfg;
    cfg.dataset_size = 1000;
    cfg.seed = 42;
    dpsgd *dp = NULL;
    dp_optimizer *opt = NULL;
    dp_optim_opts oo;
    dp_optim_opts_default(&oo, DP_OPTIM_SGD);
    oo.lr = 0.5;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    CHECK_OK(dp_optim_new(m, DP_OPTIM_SGD, &oo, &opt));
    int64_t n = 0;
    if (dp && opt) {
        dpsgd_step_plan plan;
        CHECK_OK(dpsgd_next_step(dp, &plan));
        CHECK_EQ_U64(plan.logical_size, 5);
        for (int64_t k = 0, first = 0; k < plan.n_physical; k++) {
            int64_t nb = dpsgd_step_plan_batch(&plan, k);
            /* sample j of the logical batch has the same tokens whatever the split */
            dp_tensor *all_in = test_ids(cpu, 5, 9, 19, 17), *all_tg = test_ids(cpu, 5, 9, 19, 23);
            int64_t shape[2] = {nb, 9};
            dp_tensor in, tg;
            CHECK_OK(dp_tensor_view(&in, all_in, first * 9, 2, shape));
            CHECK_OK(dp_tensor_view(&tg, all_tg, first * 9, 2, shape));
            float loss;
            CHECK_OK(dpsgd_forward(dp, &in, &tg, &loss, NULL));
            CHECK_OK(dpsgd_backward(dp));
            CHECK_OK(dpsgd_clip(dp));
            dp_tensor_free(all_in);
            dp_tensor_free(all_tg);
            first += nb;
        }
        CHECK_OK(dpsgd_noise(dp));
        if (norms_out && cfg.norms != DPSGD_NORMS_NONE) {
            size_t ns;
            const float *nv = dpsgd_norms(dp, &ns);
            CHECK_EQ_U64(ns, 5);
            memcpy(norms_out, nv, (ns < 5 ? ns : 5) * sizeof *nv);
        }
        CHECK_OK(dp_optim_step(opt));
        for (int k = 0; k < dp_model_param_count(m); k++) {
            dp_param *p = dp_model_param(m, k);
            if (!p->trainable) continue;
            if (n + p->value.numel <= cap) memcpy(out + n, p->value.data, (size_t)p->value.numel * sizeof *out);
            n += p->value.numel;
        }
    }
    dp_optim_free(opt);
    dpsgd_free(dp);
    dp_model_free(m);
    return n;
}

/* ||a - b|| / ||b - base||: the difference of two updates relative to the update */
static double update_diff(const float *a, const float *b, const float *base, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t k = 0; k < n; k++) {
        double e = (double)a[k] - b[k], u = (double)b[k] - base[k];
        num += e * e;
        den += u * u;
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

static void test_presets_agree(dp_arch arch, int tied, int lora) {
    const int64_t cap = 1 << 16;
    float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got), *base = malloc(cap * sizeof *base);
    float norms[5];
    /* the parameters before the step: an SGD step with lr 0 would do, a zero noise update too */
    method vanilla = {"vanilla", 0, 0};
    dp_model *m0 = make_model(arch, tied, lora);
    int64_t n0 = 0;
    for (int k = 0; m0 && k < dp_model_param_count(m0); k++) {
        dp_param *p = dp_model_param(m0, k);
        if (!p->trainable) continue;
        memcpy(base + n0, p->value.data, (size_t)p->value.numel * sizeof *base);
        n0 += p->value.numel;
    }
    dp_model_free(m0);
    /* C between the smallest and the largest norm: some samples clipped, some not */
    run_step(arch, tied, lora, &methods[0], 1e6, 0.0, 2, ref, cap, norms);
    float lo = norms[0], hi = norms[0];
    for (int i = 1; i < 5; i++) lo = fminf(lo, norms[i]), hi = fmaxf(hi, norms[i]);
    double C = 0.5 * (lo + hi);
    CHECK(lo < hi);
    /* vanilla = DP without clipping or noise: the mean gradient of the logical batch */
    int64_t n = run_step(arch, tied, lora, &vanilla, 1.0, 0.0, 2, got, cap, NULL);
    CHECK_EQ_U64(n, n0);
    CHECK(update_diff(got, ref, base, n) < 1e-5);
    for (int noise = 0; noise < 2; noise++) {
        double sigma = noise ? 0.7 : 0.0;
        run_step(arch, tied, lora, &methods[0], C, sigma, 2, ref, cap, NULL);
        for (size_t k = 0; k < N_METHODS; k++)
            for (int64_t phys = 1; phys <= 2; phys++) {
                if (k == 0 && phys == 2) continue;
                int64_t nk = run_step(arch, tied, lora, &methods[k], C, sigma, phys, got, cap, NULL);
                CHECK_EQ_U64(nk, n0);
                double diff = update_diff(got, ref, base, n0);
                if (!(diff < 1e-5)) {
                    fprintf(stderr,
                            "  %s%s%s: %s (%s+%s), physical %lld, sigma %g: update differs from flat's by "
                            "%.3g relative\n",
                            arch == DP_ARCH_GPT ? "gpt" : "llama", tied ? " tied" : "", lora ? " lora" : "",
                            methods[k].name ? methods[k].name : "-", dpsgd_norms_name(methods[k].norms),
                            dpsgd_clip_name(methods[k].clip), (long long)phys, sigma, diff);
                    check_failures++;
                }
            }
    }
    free(ref);
    free(got);
    free(base);
}

/* The plan device allocates what the CPU allocates, category by category, for every method:
 * allocation decisions are device independent (norm values, which plan cannot compute, decide
 * no size). Runs one logical step on each device from a fresh peak. */
static void peaks_of(dp_device *dev, const method *mt, uint64_t *peak) {
    dp_mem_reset_peak(dev->mem);
    dp_mem_stats before;
    dp_mem_get_stats(dev->mem, &before);
    dp_model_config cfg;
    dp_model_config_default(&cfg, DP_ARCH_GPT);
    cfg.vocab = 19, cfg.hidden = 16, cfg.heads = 2, cfg.layers = 2, cfg.ffn = 24, cfg.seq_len = 9, cfg.batch = 2;
    cfg.seed = 3;
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(dev, &cfg, &m));
    dpsgd_config dc;
    dpsgd_config_default(&dc);
    if (mt->name)
        CHECK_OK(dpsgd_method_preset(mt->name, &dc.norms, &dc.clip));
    else
        dc.norms = mt->norms, dc.clip = mt->clip;
    dc.expected_batch_size = 3;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &dc, &dp));
    int64_t shape[2] = {2, 9};
    dp_tensor in, tg;
    CHECK_OK(dp_tensor_init(&in, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_init(&tg, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_fill(&in, 3.0));
    CHECK_OK(dp_tensor_fill(&tg, 5.0));
    dpsgd_step_plan plan;
    CHECK_OK(dpsgd_next_step(dp, &plan));
    for (int64_t k = 0; k < plan.n_physical; k++) {
        dp_tensor inv, tgv;
        int64_t sh[2] = {dpsgd_step_plan_batch(&plan, k), 9};
        CHECK_OK(dp_tensor_view(&inv, &in, 0, 2, sh));
        CHECK_OK(dp_tensor_view(&tgv, &tg, 0, 2, sh));
        float loss;
        CHECK_OK(dpsgd_forward(dp, &inv, &tgv, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
    }
    CHECK_OK(dpsgd_noise(dp));
    dp_mem_stats after;
    dp_mem_get_stats(dev->mem, &after);
    for (int c = 0; c < DP_CAT_COUNT; c++) peak[c] = after.peak[c] - before.current[c];
    dpsgd_free(dp);
    dp_tensor_release(&in);
    dp_tensor_release(&tg);
    dp_model_free(m);
}

static void test_plan_matches_cpu(void) {
    dp_device *plan;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    /* one allocation first: dp_mem_reset_peak on an allocator that never allocated passes NULL to
     * memcpy (memory.c; reported) */
    dp_tensor warm;
    int64_t one = 1;
    CHECK_OK(dp_tensor_init(&warm, plan, DP_F32, 1, &one, DP_CAT_TEMP));
    dp_tensor_release(&warm);
    for (size_t k = 0; k < N_METHODS; k++) {
        uint64_t pc[DP_CAT_COUNT], pp[DP_CAT_COUNT];
        peaks_of(cpu, &methods[k], pc);
        peaks_of(plan, &methods[k], pp);
        for (int c = 0; c < DP_CAT_COUNT; c++)
            if (pc[c] != pp[c]) {
                fprintf(stderr, "  %s: %s peaked at %llu bytes on the cpu, %llu on plan\n",
                        methods[k].name ? methods[k].name : dpsgd_norms_name(methods[k].norms),
                        dp_category_name((dp_category)c), (unsigned long long)pc[c], (unsigned long long)pp[c]);
                check_failures++;
            }
        CHECK(pc[DP_CAT_NORM_SAMPLES] > 0); /* the DP pass did allocate */
    }
}

static void test_phase_order(void) {
    dp_model *m = make_model(DP_ARCH_GPT, 1, 0);
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    CHECK_OK(dpsgd_method_preset("bk", &cfg.norms, &cfg.clip));
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    CHECK(dpsgd_backward(dp) == DP_EINVAL); /* no forward yet */
    CHECK(dpsgd_clip(dp) == DP_EINVAL);
    dp_tensor *in = test_ids(cpu, 2, 9, 19, 1), *tg = test_ids(cpu, 2, 9, 19, 2);
    float loss;
    CHECK_OK(dpsgd_forward(dp, in, tg, &loss, NULL));
    CHECK_OK(dpsgd_backward(dp));
    CHECK(dpsgd_noise(dp) == DP_EINVAL); /* the batch was not clipped */
    CHECK(dpsgd_forward(dp, in, tg, &loss, NULL) == DP_EINVAL);
    CHECK_OK(dpsgd_clip(dp));
    CHECK_OK(dpsgd_noise(dp));
    CHECK_EQ_U64(dpsgd_steps(dp), 1);
    /* nothing of the DP pass outlives the step: only parameters and gradients are left */
    dp_mem_stats st;
    dp_mem_get_stats(cpu->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_PER_SAMPLE_GRADS], 0);
    CHECK_EQ_U64(st.current[DP_CAT_NORM_SAMPLES], 0);
    CHECK_EQ_U64(st.current[DP_CAT_OUTPUT_GRADS], 0);
    CHECK_EQ_U64(st.current[DP_CAT_ACTIVATIONS], 0);
    dpsgd_free(dp);
    dp_tensor_free(in);
    dp_tensor_free(tg);
    /* bad configurations name what is wrong */
    dpsgd_config bad = cfg;
    bad.clip = DPSGD_CLIP_NONE;
    CHECK(dpsgd_new(m, &bad, &dp) == DP_EINVAL);
    bad = cfg;
    bad.max_grad_norm = 0;
    CHECK(dpsgd_new(m, &bad, &dp) == DP_EINVAL && strstr(dp_error_message(), "max_grad_norm"));
    bad = cfg;
    bad.max_physical_batch_size = 3;
    CHECK(dpsgd_new(m, &bad, &dp) == DP_EINVAL && strstr(dp_error_message(), "max_physical_batch_size"));
    bad = cfg;
    bad.poisson = 1;
    CHECK(dpsgd_new(m, &bad, &dp) == DP_EINVAL && strstr(dp_error_message(), "dataset_size"));
    dpsgd_norms_method nm;
    dpsgd_clip_method cm;
    CHECK(dpsgd_method_preset("fast", &nm, &cm) == DP_EINVAL && strstr(dp_error_message(), "flash_clip"));
    CHECK(dpsgd_norms_parse("gram", &nm) == DP_EINVAL &&
          strstr(dp_error_message(), "materialize, ghost, mixed, flash"));
    CHECK(dpsgd_clip_parse("once", &cm) == DP_EINVAL && strstr(dp_error_message(), "twopass, bk"));
    dp_model_free(m);
}

/* A forward on the model between the wrapper's forward and its backward (or, for a clip that
 * goes back through the retained state, between backward and clip) replaces the state the
 * wrapper would go back through: with another batch size, and ids the caller may have freed.
 * Backward and clip refuse it, for every method, and the wrapper then runs again. */
static void test_stale_forward(void) {
    dp_model *m = make_model(DP_ARCH_GPT, 1, 0);
    dp_tensor *in = test_ids(cpu, 2, 9, 19, 1), *tg = test_ids(cpu, 2, 9, 19, 2);
    dp_tensor *in1 = test_ids(cpu, 1, 9, 19, 3), *tg1 = test_ids(cpu, 1, 9, 19, 4);
    float loss;
    CHECK(dp_model_forward_id(m) == 0);
    CHECK_OK(dp_model_forward(m, in, tg, &loss, NULL));
    uint64_t first = dp_model_forward_id(m);
    CHECK(first != 0);
    CHECK_OK(dp_model_forward(m, in, tg, &loss, NULL));
    CHECK(dp_model_forward_id(m) != first && dp_model_forward_id(m) != 0); /* never reused */
    dp_model_release_activations(m);
    CHECK(dp_model_forward_id(m) == 0);
    for (size_t k = 0; k < N_METHODS; k++) {
        dpsgd_config cfg;
        dpsgd_config_default(&cfg);
        if (methods[k].name)
            CHECK_OK(dpsgd_method_preset(methods[k].name, &cfg.norms, &cfg.clip));
        else
            cfg.norms = methods[k].norms, cfg.clip = methods[k].clip;
        dpsgd *dp = NULL;
        CHECK_OK(dpsgd_new(m, &cfg, &dp));
        CHECK_OK(dpsgd_forward(dp, in, tg, &loss, NULL));
        CHECK_OK(dp_model_forward(m, in1, tg1, &loss, NULL)); /* B = 1 replaces B = 2 */
        CHECK(dpsgd_backward(dp) == DP_EINVAL && strstr(dp_error_message(), "no longer holds"));
        CHECK(dpsgd_clip(dp) == DP_EINVAL);   /* the phase was ended */
        CHECK_OK(dp_model_backward(m, NULL)); /* the model's own forward is intact */
        CHECK_OK(dpsgd_forward(dp, in, tg, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        int retained = dp_model_forward_id(m) != 0; /* twopass, and bk over retained inputs */
        if (retained) {
            CHECK_OK(dp_model_forward(m, in1, tg1, &loss, NULL));
            CHECK(dpsgd_clip(dp) == DP_EINVAL && strstr(dp_error_message(), "no longer holds"));
            dp_model_release_activations(m);
            CHECK_OK(dpsgd_forward(dp, in, tg, &loss, NULL));
            CHECK_OK(dpsgd_backward(dp));
        }
        CHECK_OK(dpsgd_clip(dp));
        CHECK_OK(dpsgd_noise(dp));
        CHECK(dp_model_forward_id(m) == 0);
        dpsgd_free(dp);
        dp_model_zero_grad(m, 1);
    }
    dp_tensor_free(in);
    dp_tensor_free(tg);
    dp_tensor_free(in1);
    dp_tensor_free(tg1);
    dp_model_free(m);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_phase_order();
    test_stale_forward();
    test_plan_matches_cpu();
    test_presets_agree(DP_ARCH_GPT, 1, 0);
    test_presets_agree(DP_ARCH_GPT, 0, 0);
    test_presets_agree(DP_ARCH_GPT, 1, 1);
    test_presets_agree(DP_ARCH_LLAMA, 0, 0);
    test_presets_agree(DP_ARCH_LLAMA, 0, 1);
    dp_engine_shutdown();
    return check_report("test_dp_update");
}
