/* test_model_memory.c: what a training step of the model holds in memory, exactly.
 *
 * 1. The `activations` peak of one forward + backward is linear in the sequence length: over
 *    T = 256, 512, 1024, 2048 (everything else fixed) the quadratic through the four points
 *    has a T^2 coefficient of exactly 0 bytes. Attention keeps only its output and one
 *    log-sum-exp per row; no B x H x T x T tensor exists anywhere (nor under `temp`).
 * 2. The peak equals, byte for byte, the sum of what the forward saves (listed per block in
 *    model_internal.h) plus the per-token losses that live until they reach the host.
 * 3. The plan device allocates exactly what the CPU allocates, per category and per module. */
#include "check.h"
#include "data.h"
#include "device.h"
#include "error.h"
#include "model.h"
#include "scope.h"

#include <string.h>

#define NT 4
static const int64_t seq[NT] = {256, 512, 1024, 2048};

typedef struct {
    uint64_t peak[DP_CAT_COUNT];   /* each category's peak over the step, above its level before */
    uint64_t after[DP_CAT_COUNT];  /* live after the step */
    uint32_t modules;              /* module ids interned so far */
    uint64_t module_peak[512];     /* per module: peak over the step */
} step_stats;

static dp_model_config tiny(dp_arch arch, int64_t T) {
    dp_model_config c;
    dp_model_config_default(&c, arch);
    c.vocab = 64, c.hidden = 32, c.layers = 2, c.heads = 2, c.seq_len = T, c.batch = 2;
    if (arch == DP_ARCH_LLAMA) c.ffn = 64;
    return c;
}

/* Builds the model on dev, then measures one forward + backward from a fresh peak. */
static void one_step(dp_device *dev, const dp_model_config *cfg, step_stats *out) {
    memset(out, 0, sizeof *out);
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(dev, cfg, &m));
    if (!m) return;
    dp_batch bt;
    CHECK_OK(dp_batch_init(&bt, dev, cfg->batch, cfg->seq_len));
    CHECK_OK(dp_data_synthetic(&bt.inputs, &bt.targets, cfg->vocab, 1, 0));
    dp_mem_stats before, st;
    dp_mem_get_stats(dev->mem, &before);
    dp_mem_reset_peak(dev->mem);
    float loss;
    CHECK_OK(dp_model_forward(m, &bt.inputs, &bt.targets, &loss, NULL));
    CHECK_OK(dp_model_backward(m, NULL));
    dp_mem_get_stats(dev->mem, &st);
    for (int c = 0; c < DP_CAT_COUNT; c++) {
        out->peak[c] = st.peak[c] - before.current[c];
        out->after[c] = st.current[c] - before.current[c];
    }
    out->modules = dp_module_count();
    for (uint32_t i = 0; i < out->modules && i < 512; i++) {
        uint64_t cur, live;
        dp_mem_module_stats(dev->mem, i, &cur, &out->module_peak[i], &live);
    }
    dp_batch_release(&bt);
    dp_model_free(m);
}

/* Bytes the forward saves, from model_internal.h's lists, at the moment of its peak (the
 * per-token losses included). */
static uint64_t expected_activations(const dp_model_config *c) {
    const uint64_t N = (uint64_t)(c->batch * c->seq_len), d = (uint64_t)c->hidden, H = (uint64_t)c->heads;
    const uint64_t F = (uint64_t)dp_model_config_ffn(c), V = (uint64_t)c->vocab, L = (uint64_t)c->layers;
    uint64_t values, stats; /* compute-dtype values (4 bytes in f32) and f32 statistics */
    if (c->arch == DP_ARCH_GPT) {
        /* block: ln_1, qkv (3d), att, res_mid, ln_2, res_out; fc and gelu (F); stats: 2 + 2 + H */
        values = N * d + L * N * (8 * d + 2 * F) + N * d + N * V;
        stats = L * N * (4 + H) + 2 * N + N + N;
    } else {
        /* block: xn, q, k, v, att, res_mid, xn2, res_out; gate, up, h (F); stats: 1 + 1 + H */
        values = N * d + L * N * (8 * d + 3 * F) + N * d + N * V;
        stats = L * N * (2 + H) + N + N + N;
    }
    return 4 * (values + stats);
}

static void check_arch(dp_arch arch, const char *name) {
    dp_device *cpu, *plan;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    uint64_t act[NT];
    printf("%s\n", name);
    for (int i = 0; i < NT; i++) {
        dp_model_config cfg = tiny(arch, seq[i]);
        step_stats s_cpu, s_plan;
        one_step(cpu, &cfg, &s_cpu);
        one_step(plan, &cfg, &s_plan);
        act[i] = s_cpu.peak[DP_CAT_ACTIVATIONS];
        printf("  T = %4lld: activations peak %10llu B, temp peak %9llu B, gradients %8llu B\n", (long long)seq[i],
               (unsigned long long)act[i], (unsigned long long)s_cpu.peak[DP_CAT_TEMP],
               (unsigned long long)s_cpu.peak[DP_CAT_GRADIENTS]);
        CHECK_EQ_U64(act[i], expected_activations(&cfg));
        /* nothing of the step is left but the gradients */
        CHECK_EQ_U64(s_cpu.after[DP_CAT_ACTIVATIONS], 0);
        CHECK_EQ_U64(s_cpu.after[DP_CAT_TEMP], 0);
        /* the plan allocates what the CPU allocates */
        for (int c = 0; c < DP_CAT_COUNT; c++) {
            CHECK_EQ_U64(s_plan.peak[c], s_cpu.peak[c]);
            CHECK_EQ_U64(s_plan.after[c], s_cpu.after[c]);
        }
        CHECK_EQ_U64(s_plan.modules, s_cpu.modules);
        for (uint32_t m = 0; m < s_cpu.modules && m < 512; m++) CHECK_EQ_U64(s_plan.module_peak[m], s_cpu.module_peak[m]);
    }
    /* the quadratic through (T_i, act_i): its T^2 coefficient is the second divided difference
     * ([T2,T3] - [T1,T2]) / (T3 - T1), zero exactly when the slopes agree; checked in integers */
    for (int i = 0; i + 2 < NT; i++) {
        int64_t s1 = (int64_t)(act[i + 1] - act[i]), s2 = (int64_t)(act[i + 2] - act[i + 1]);
        int64_t w1 = seq[i + 1] - seq[i], w2 = seq[i + 2] - seq[i + 1];
        CHECK(s1 * w2 == s2 * w1); /* s1 / w1 == s2 / w2 */
    }
    double slope = (double)(act[NT - 1] - act[0]) / (double)(seq[NT - 1] - seq[0]);
    double c2 = ((double)(act[3] - act[2]) / 1024.0 - (double)(act[2] - act[1]) / 512.0) / (2048.0 - 512.0);
    printf("  fit: %.1f bytes per token of seq_len, T^2 coefficient %g bytes\n", slope, c2);
    CHECK(c2 == 0.0);
}

int main(void) {
    check_arch(DP_ARCH_GPT, "gpt");
    check_arch(DP_ARCH_LLAMA, "llama");
    dp_engine_shutdown();
    return check_report("test_model_memory");
}
