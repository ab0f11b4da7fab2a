/* test_dp_padding.c: a physical batch of samples of different lengths, right-padded to its
 * longest sample (or further, as pad_to does), against the same samples run one at a time
 * unpadded (B = 1, T = the sample's own length).
 *
 * Pads carry input id 0 and target DP_IGNORE_INDEX (-100): no loss, no gradient; each sample's
 * loss is the mean over its own targets (Hugging Face's causal-LM loss with -100 labels, which
 * Opacus's per-sample loss_reduction="mean" then takes per sample). Right padding under causal
 * attention means no real token attends to a pad, so every per-sample quantity of the padded
 * batch must be the unpadded sample's: for every preset dpsgd_list_name lists (vanilla
 * included; flash_clip with its strips too), gpt (tied head, learned positions) and llama
 * (RoPE, grouped-query attention, LoRA), the per-sample losses, norms ||g_i||, clip factors c_i,
 * and the clipped sum sum_i c_i g_i the clip leaves in every trainable gradient (vanilla:
 * sum_i g_i / B). Tolerance 1e-4 relative
 * (float sums in another order: the padded batch's GEMMs run over other shapes, and flash takes
 * B = 1 norms from the ordinary gradient).
 *
 * Plan backend: the memory of a padded batch is that of its padded T, whatever the model's
 * seq_len: a step of B x 7 on a model of seq_len 9 peaks where one on a model of seq_len 7 does. */
#include "check.h"
#include "test_util.h"
#include "device.h"
#include "dpprof_engine.h"
#include "dpsgd_impl.h"
#include "error.h"
#include "layer_ops.h"
#include "memory.h"
#include "model.h"
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-4
#define NS 3  /* samples */
#define SEQ 9 /* the model's seq_len */
#define VOCAB 23

static dp_device *cpu;
static dpsgd_flash_impl flash_impl = DPSGD_FLASH_TILES; /* flash's kernels: main runs both */
static const int64_t LEN[NS] = {4, 7, 2};               /* the longest (7) is shorter than seq_len */

/* token j (0 <= j <= LEN[i]) of sample i: inputs are tokens 0..len-1, targets 1..len */
static int32_t token(int i, int64_t j) { return (int32_t)((i * 131 + j * 17 + (i + 3) * j * j) % VOCAB); }

typedef struct model_case {
    dp_arch arch;
    int tied, lora, kv_heads;
    const char *name;
    double C; /* between the samples' norms: some are clipped, some not */
} model_case;

static dp_model *make_model(dp_device *dev, const model_case *mc, int64_t seq_len, int64_t max_positions) {
    dp_model_config cfg;
    dp_model_config_default(&cfg, mc->arch);
    cfg.vocab = VOCAB;
    cfg.hidden = 16;
    cfg.heads = 4;
    cfg.kv_heads = mc->kv_heads;
    cfg.layers = 2;
    cfg.ffn = 24;
    cfg.seq_len = seq_len;
    cfg.max_positions = mc->arch == DP_ARCH_GPT ? max_positions : 0;
    cfg.batch = NS;
    cfg.tie_head = mc->tied;
    cfg.seed = 5;
    if (mc->lora) {
        cfg.lora_rank = 2;
        cfg.lora_alpha = 4.0f;
        cfg.lora_targets = DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_FC | DP_LORA_DOWN;
    }
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(dev, &cfg, &m));
    if (!m || dev->kind == DP_DEV_PLAN) return m;
    for (int k = 0; k < dp_model_param_count(m); k++) { /* adapters start at B = 0: give A a gradient */
        dp_param *p = dp_model_param(m, k);
        if (p->kind == DP_PARAM_LORA_B) CHECK_OK(dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0.0f, 0.3f, 5, 700 + k));
    }
    return m;
}

/* inputs and targets of samples [first, first + n) padded to T */
static void make_batch(int first, int n, int64_t T, dp_tensor **inputs, dp_tensor **targets) {
    int64_t shape[2] = {n, T};
    *inputs = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
    *targets = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
    int32_t *in = (*inputs)->data, *tg = (*targets)->data;
    for (int b = 0; b < n; b++)
        for (int64_t j = 0; j < T; j++) {
            int real = j < LEN[first + b];
            in[b * T + j] = real ? token(first + b, j) : 0;
            tg[b * T + j] = real ? token(first + b, j + 1) : DP_IGNORE_INDEX;
        }
}

/* every trainable gradient of m, concatenated (missing ones as zeros) */
static double *grads(dp_model *m, int64_t *n_out) {
    int64_t n = 0;
    for (int k = 0; k < dp_model_param_count(m); k++)
        if (dp_model_param(m, k)->trainable) n += dp_model_param(m, k)->value.numel;
    double *g = calloc((size_t)n, sizeof *g);
    int64_t at = 0;
    for (int k = 0; k < dp_model_param_count(m); k++) {
        const dp_param *p = dp_model_param(m, k);
        if (!p->trainable) continue;
        if (p->grad.data)
            for (int64_t e = 0; e < p->value.numel; e++) g[at + e] = ((const float *)p->grad.data)[e];
        at += p->value.numel;
    }
    *n_out = n;
    return g;
}

static void close_rel(double got, double want, double scale, const char *what, int i) {
    if (fabs(got - want) <= REL_TOL * fmax(fabs(scale), 1e-12)) return;
    fprintf(stderr, "  %s sample %d: padded %.9g, alone %.9g\n", what, i, got, want);
    check_failures++;
}

/* One preset: the padded batch of all NS samples at T = Tpad against NS single runs. */
static void run_preset(const model_case *mc, const char *preset, int64_t Tpad) {
    dp_model *m = make_model(cpu, mc, SEQ, SEQ);
    if (!m) return;
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    CHECK_OK(dpsgd_method_preset(preset, &cfg.norms, &cfg.clip));
    cfg.max_grad_norm = mc->C;
    cfg.flash_impl = flash_impl;
    char what[200];
    snprintf(what, sizeof what, "%s %s%s T=%lld", mc->name, preset, flash_impl == DPSGD_FLASH_STRIPS ? " (strips)" : "",
             (long long)Tpad);

    /* the padded batch */
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    if (!dp) {
        dp_model_free(m);
        return;
    }
    dpsgd_step_plan step; /* one logical step of NS samples (vanilla's mean is over it) */
    CHECK_OK(dpsgd_next_step(dp, &step));
    CHECK_EQ_U64(step.logical_size, NS);
    dp_tensor *inputs, *targets;
    make_batch(0, NS, Tpad, &inputs, &targets);
    float loss, padded_loss[NS], padded_norm[NS] = {0}, padded_c[NS] = {0};
    CHECK_OK(dpsgd_forward(dp, inputs, targets, &loss, padded_loss));
    CHECK_OK(dpsgd_backward(dp));
    CHECK_OK(dpsgd_clip(dp));
    size_t nn = 0, nc = 0;
    const float *norms = dpsgd_norms(dp, &nn), *cs = dpsgd_clip_factors(dp, &nc);
    int dp_method = cfg.norms != DPSGD_NORMS_NONE;
    if (dp_method) {
        CHECK_EQ_U64(nn, NS);
        CHECK_EQ_U64(nc, NS);
        for (size_t i = 0; i < nn && i < NS; i++) padded_norm[i] = norms[i], padded_c[i] = cs[i];
    }
    int64_t ng;
    double *padded_g = grads(m, &ng);
    dp_tensor_free(inputs);
    dp_tensor_free(targets);
    dpsgd_free(dp);
    CHECK_OK(dp_model_zero_grad(m, 1));

    /* one at a time, unpadded: physical batches of one logical step, so the clipped sums add */
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    if (!dp) {
        free(padded_g);
        dp_model_free(m);
        return;
    }
    CHECK_OK(dpsgd_next_step(dp, &step));
    float alone_loss[NS];
    for (int i = 0; i < NS; i++) {
        make_batch(i, 1, LEN[i], &inputs, &targets);
        CHECK_OK(dpsgd_forward(dp, inputs, targets, &loss, &alone_loss[i]));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        dp_tensor_free(inputs);
        dp_tensor_free(targets);
    }
    norms = dpsgd_norms(dp, &nn);
    cs = dpsgd_clip_factors(dp, &nc);
    int64_t ng1;
    double *alone_g = grads(m, &ng1);
    CHECK_EQ_U64(ng1, ng);

    int clipped = 0, unclipped = 0;
    for (int i = 0; i < NS; i++) {
        char w[260];
        snprintf(w, sizeof w, "%s loss", what);
        close_rel(padded_loss[i], alone_loss[i], alone_loss[i], w, i);
        if (!dp_method || nn != NS || nc != NS) continue;
        snprintf(w, sizeof w, "%s norm", what);
        close_rel(padded_norm[i], norms[i], norms[i], w, i);
        snprintf(w, sizeof w, "%s clip factor", what);
        close_rel(padded_c[i], cs[i], cs[i], w, i);
        clipped += cs[i] < 1.0f;
        unclipped += cs[i] == 1.0f;
        if (getenv("DP_TEST_VERBOSE")) printf("%s sample %d: norm %.6g c %.6g\n", what, i, norms[i], cs[i]);
    }
    if (dp_method) CHECK(clipped > 0 && unclipped > 0); /* C between the norms: both cases are tested */
    double gmax = 0, emax = 0;
    for (int64_t e = 0; e < ng && ng1 == ng; e++) {
        gmax = fmax(gmax, fabs(alone_g[e]));
        emax = fmax(emax, fabs(padded_g[e] - alone_g[e]));
    }
    CHECK(gmax > 0);
    if (!(emax <= REL_TOL * gmax)) {
        fprintf(stderr, "  %s clipped sum: max difference %.3g of max %.3g\n", what, emax, gmax);
        check_failures++;
    }
    free(padded_g);
    free(alone_g);
    dpsgd_free(dp);
    dp_model_free(m);
}

/* A target outside the vocabulary is refused with its place; -100 is a pad, any other negative
 * is not; a sample whose targets are all pads has loss 0. */
static void test_refusals(void) {
    static const model_case mc = {DP_ARCH_LLAMA, 0, 0, 0, "llama", 1.0};
    dp_model *m = make_model(cpu, &mc, SEQ, SEQ);
    if (!m) return;
    dp_tensor *inputs, *targets;
    make_batch(0, NS, 7, &inputs, &targets);
    int32_t *tg = targets->data;
    tg[1 * 7 + 3] = -1;
    float loss, sl[NS];
    CHECK(dp_model_forward(m, inputs, targets, &loss, sl) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "token -1 at sample 1 position 3") != NULL);
    CHECK(strstr(dp_error_message(), "-100") != NULL);
    for (int64_t j = 0; j < 7; j++) tg[1 * 7 + j] = DP_IGNORE_INDEX; /* sample 1 all pads */
    CHECK_OK(dp_model_forward(m, inputs, targets, &loss, sl));
    CHECK(sl[1] == 0.0f && sl[0] > 0.0f && sl[2] > 0.0f);
    CHECK_CLOSE(loss, (sl[0] + sl[2]) / 3.0, 1e-6);
    dp_tensor_free(inputs);
    dp_tensor_free(targets);
    /* longer than seq_len */
    int64_t shape[2] = {1, SEQ + 1};
    dp_tensor *x = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
    memset(x->data, 0, (size_t)(SEQ + 1) * sizeof(int32_t));
    CHECK(dp_model_forward(m, x, x, &loss, NULL) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "1 <= T <= 9 (seq_len)") != NULL);
    dp_tensor_free(x);
    dp_model_free(m);
}

/* The plan's peak of a DP step on B x Tpad is that of a model whose seq_len is Tpad. */
static void test_plan_memory(void) {
    dp_device *plan = NULL;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    if (!plan) return;
    static const model_case mc = {DP_ARCH_GPT, 1, 0, 0, "gpt", 1.0};
    uint64_t peak[2];
    const int64_t seq[2] = {SEQ, 7};
    for (int k = 0; k < 2; k++) {
        dp_model *m = make_model(plan, &mc, seq[k], SEQ);
        if (!m) return;
        dpsgd_config cfg;
        dpsgd_config_default(&cfg);
        CHECK_OK(dpsgd_method_preset("ghost", &cfg.norms, &cfg.clip));
        dpsgd *dp = NULL;
        CHECK_OK(dpsgd_new(m, &cfg, &dp));
        dp_batch b;
        CHECK_OK(dp_batch_init(&b, plan, NS, 7));
        dp_mem_reset_peak(plan->mem);
        float loss;
        CHECK_OK(dpsgd_forward(dp, &b.inputs, &b.targets, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        dp_mem_stats st;
        dp_mem_get_stats(plan->mem, &st);
        peak[k] = st.total_peak;
        dp_batch_release(&b);
        dpsgd_free(dp);
        dp_model_free(m);
    }
    CHECK_EQ_U64(peak[0], peak[1]);
    CHECK(peak[0] > 0);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    static const model_case cases[] = {{DP_ARCH_GPT, 1, 0, 0, "gpt tied", 4.0},
                                       {DP_ARCH_LLAMA, 0, 1, 2, "llama lora gqa", 0.6}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t k = 0; dpsgd_list_name(DPSGD_LIST_PRESETS, k); k++) {
            run_preset(&cases[c], dpsgd_list_name(DPSGD_LIST_PRESETS, k), 7);   /* to the longest */
            run_preset(&cases[c], dpsgd_list_name(DPSGD_LIST_PRESETS, k), SEQ); /* and further (pad_to) */
        }
    flash_impl = DPSGD_FLASH_STRIPS; /* flash's Gram and gradient strips too */
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) run_preset(&cases[c], "flash_clip", 7);
    flash_impl = DPSGD_FLASH_TILES;
    test_refusals();
    test_plan_memory();
    return check_report("test_dp_padding");
}
