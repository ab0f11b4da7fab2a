/* test_model_memory.c: what a training step of the model holds in memory, exactly.
 *
 * 1. The `activations` peak of one forward + backward is linear in the sequence length: over
 *    T = 1024, 4096, 16384, 65536 (everything else fixed) the quadratic through the four points
 *    has a T^2 coefficient of exactly 0 bytes. Attention keeps only its output and one
 *    log-sum-exp per row; no B x H x T x T tensor exists anywhere (nor under `temp`). These
 *    long sequences run on the plan device, whose figures are the CPU's (3); the CPU runs the
 *    step once, at T = 256, where nothing it computes is looked at but its allocations.
 * 2. The peak equals, byte for byte, the sum of what the forward saves (listed per block in
 *    model_internal.h) plus the per-token losses that live until they reach the host: values in
 *    the compute dtype (4 bytes in f32, 2 in bf16), statistics in f32.
 * 3. The plan device allocates exactly what the CPU allocates, per category and per module, in
 *    f32 and in bf16, and records the same ledger (ops, calls, flops, bytes).
 * 4. The plan allocates nothing real on the host either (issue 13 item 11): a step at B = T =
 *    2^20 (a 4 TiB B x T host buffer of losses, which the plan once made and zero-filled, could
 *    not be allocated), and a DP step whose n_params x B norms the plan once copied to the host,
 *    grows the process's resident set by less than that copy.
 * 5. Weight precision (check_weight_precision): bf16 LoRA keeps the frozen base in bf16 only. */
#include "check.h"
#include "data.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "model.h"
#include "scope.h"

#include "dpsgd.h"

#include <string.h>
#include <sys/resource.h>

#define NT 4
static const int64_t seq[NT] = {1024, 4096, 16384, 65536}; /* on the plan */
#define CPU_T 256                                          /* the CPU's one step */

typedef struct {
    uint64_t peak[DP_CAT_COUNT];  /* each category's peak over the step, above its level before */
    uint64_t after[DP_CAT_COUNT]; /* live after the step */
    uint32_t modules;             /* module ids interned so far */
    uint64_t module_peak[512];    /* per module: peak over the step */
    size_t n_ops;                 /* the ledger of building the model and one step */
    dp_ledger_entry ops[64];
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
    dp_ledger_reset();
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
    out->n_ops = dp_ledger_count() < 64 ? dp_ledger_count() : 64;
    for (size_t i = 0; i < out->n_ops; i++) out->ops[i] = *dp_ledger_at(i);
    dp_batch_release(&bt);
    dp_model_free(m);
}

static const dp_ledger_entry *find_op(const step_stats *s, const char *op) {
    for (size_t i = 0; i < s->n_ops; i++)
        if (strcmp(s->ops[i].op, op) == 0) return &s->ops[i];
    return NULL;
}

static void check_same(const step_stats *a, const step_stats *b) {
    for (int c = 0; c < DP_CAT_COUNT; c++) {
        CHECK_EQ_U64(b->peak[c], a->peak[c]);
        CHECK_EQ_U64(b->after[c], a->after[c]);
    }
    CHECK_EQ_U64(b->modules, a->modules);
    for (uint32_t m = 0; m < a->modules && m < 512; m++) CHECK_EQ_U64(b->module_peak[m], a->module_peak[m]);
    CHECK_EQ_U64(b->n_ops, a->n_ops);
    for (size_t i = 0; i < a->n_ops && i < b->n_ops; i++) {
        CHECK(strcmp(a->ops[i].op, b->ops[i].op) == 0);
        CHECK_EQ_U64(b->ops[i].calls, a->ops[i].calls);
        CHECK(b->ops[i].flops == a->ops[i].flops && b->ops[i].bytes == a->ops[i].bytes);
    }
}

/* Bytes the forward saves, from model_internal.h's lists, at the moment of its peak (the
 * per-token losses included): values of the compute dtype, f32 statistics. */
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
    return (c->dtype == DP_BF16 ? 2 : 4) * values + 4 * stats;
}

/* The ledger of a step: attention's (4 hd + 5) flops per causal (query, key) pair per layer, and
 * the other layers' entries present. */
static void check_ledger(dp_arch arch, const dp_model_config *cfg, const step_stats *s) {
    const dp_ledger_entry *att = find_op(s, "attention_fwd");
    const double T = (double)cfg->seq_len, pairs = (double)cfg->batch * cfg->heads * T * (T + 1) / 2.0;
    CHECK(att && att->calls == (uint64_t)cfg->layers &&
          att->flops == cfg->layers * (4.0 * (cfg->hidden / cfg->heads) + 5.0) * pairs);
    const char *ops[] = {"embedding_fwd",
                         "embedding_bwd",
                         "gemm",
                         "attention_bwd",
                         "cross_entropy_fwd",
                         "cross_entropy_bwd",
                         arch == DP_ARCH_GPT ? "layernorm_bwd" : "rmsnorm_bwd",
                         arch == DP_ARCH_GPT ? "gelu_bwd" : "swiglu_bwd"};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        const dp_ledger_entry *e = find_op(s, ops[k]);
        /* a gather without positions (llama's embedding) does no arithmetic */
        CHECK(e && e->calls > 0 && e->bytes > 0 && (e->flops > 0 || (arch == DP_ARCH_LLAMA && k == 0)));
    }
}

static void check_arch(dp_arch arch, const char *name) {
    dp_device *cpu, *plan;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    printf("%s\n", name);
    /* the CPU once, in f32 and bf16: its allocations and ledger are the plan's, to the byte */
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        dp_model_config cfg = tiny(arch, CPU_T);
        if (bf16) cfg.dtype = DP_BF16;
        step_stats s_cpu, s_plan;
        one_step(cpu, &cfg, &s_cpu);
        one_step(plan, &cfg, &s_plan);
        printf("  cpu %s T = %d: activations peak %llu B (expected %llu B)\n", bf16 ? "bf16" : "f32 ", CPU_T,
               (unsigned long long)s_cpu.peak[DP_CAT_ACTIVATIONS], (unsigned long long)expected_activations(&cfg));
        CHECK_EQ_U64(s_cpu.peak[DP_CAT_ACTIVATIONS], expected_activations(&cfg));
        /* nothing of the step is left but the gradients */
        CHECK_EQ_U64(s_cpu.after[DP_CAT_ACTIVATIONS], 0);
        CHECK_EQ_U64(s_cpu.after[DP_CAT_TEMP], 0);
        check_same(&s_cpu, &s_plan);
        check_ledger(arch, &cfg, &s_cpu);
    }
    /* long sequences on the plan: exact, and linear in T */
    uint64_t act[NT];
    for (int i = 0; i < NT; i++) {
        dp_model_config cfg = tiny(arch, seq[i]);
        step_stats s;
        one_step(plan, &cfg, &s);
        act[i] = s.peak[DP_CAT_ACTIVATIONS];
        printf("  plan T = %5lld: activations peak %11llu B, temp peak %10llu B, gradients %8llu B\n",
               (long long)seq[i], (unsigned long long)act[i], (unsigned long long)s.peak[DP_CAT_TEMP],
               (unsigned long long)s.peak[DP_CAT_GRADIENTS]);
        CHECK_EQ_U64(act[i], expected_activations(&cfg));
        CHECK_EQ_U64(s.after[DP_CAT_ACTIVATIONS], 0);
        CHECK_EQ_U64(s.after[DP_CAT_TEMP], 0);
        check_ledger(arch, &cfg, &s);
    }
    /* the quadratic through (T_i, act_i): its T^2 coefficient is the second divided difference
     * ([T2,T3] - [T1,T2]) / (T3 - T1), zero exactly when the slopes agree; checked in integers */
    for (int i = 0; i + 2 < NT; i++) {
        int64_t s1 = (int64_t)(act[i + 1] - act[i]), s2 = (int64_t)(act[i + 2] - act[i + 1]);
        int64_t w1 = seq[i + 1] - seq[i], w2 = seq[i + 2] - seq[i + 1];
        CHECK(s1 * w2 == s2 * w1); /* s1 / w1 == s2 / w2 */
    }
    double slope = (double)(act[NT - 1] - act[0]) / (double)(seq[NT - 1] - seq[0]);
    double c2 = ((double)(act[3] - act[2]) / (double)(seq[3] - seq[2]) -
                 (double)(act[2] - act[1]) / (double)(seq[2] - seq[1])) /
                (double)(seq[3] - seq[1]);
    printf("  fit: %.1f bytes per token of seq_len, T^2 coefficient %g bytes\n", slope, c2);
    CHECK(c2 == 0.0);
}

static long max_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* 4: the plan's host memory does not grow with what it models. */
static void check_plan_host_memory(void) {
    dp_device *plan;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    /* B = T = 2^20: 2^40 losses, 4 TiB had they been brought to the host */
    dp_model_config cfg = tiny(DP_ARCH_GPT, (int64_t)1 << 20);
    cfg.batch = (int64_t)1 << 20;
    cfg.vocab = 16, cfg.hidden = 8, cfg.heads = 1, cfg.layers = 1;
    step_stats s;
    one_step(plan, &cfg, &s);
    CHECK_EQ_U64(s.peak[DP_CAT_ACTIVATIONS], expected_activations(&cfg));

    /* DP at B = 2^20, T = 1 over 100 trainable tensors: the n_params x B norms (400 MiB) stay on
     * the (plan) device; the host holds a few B-float lists (the scales, norms, factors) */
    cfg = tiny(DP_ARCH_GPT, 1);
    cfg.batch = (int64_t)1 << 20;
    cfg.layers = 8;
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(plan, &cfg, &m));
    dpsgd_config dc;
    dpsgd_config_default(&dc);
    CHECK_OK(dpsgd_method_preset("ghost", &dc.norms, &dc.clip));
    dpsgd *dp = NULL;
    if (m) CHECK_OK(dpsgd_new(m, &dc, &dp));
    dp_batch bt;
    CHECK_OK(dp_batch_init(&bt, plan, cfg.batch, cfg.seq_len));
    const uint64_t n_params = (uint64_t)dp_model_param_count(m), norms_bytes = n_params * (uint64_t)cfg.batch * 4;
    CHECK_EQ_U64(n_params, 100);
    long before = max_rss_kib();
    float loss;
    if (dp) {
        CHECK_OK(dpsgd_forward(dp, &bt.inputs, &bt.targets, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        CHECK_OK(dpsgd_noise(dp));
    }
    long grown = max_rss_kib() - before;
    printf("plan DP step at B = 2^20: resident set grew %ld KiB (the norms would be %llu KiB)\n", grown,
           (unsigned long long)(norms_bytes >> 10));
    CHECK((uint64_t)grown * 1024 < norms_bytes / 2);
    dp_batch_release(&bt);
    dpsgd_free(dp);
    dp_model_free(m);
}

/* `parameters` bytes of a model built on dev (what its construction added) */
static uint64_t param_bytes(dp_device *dev, const dp_model_config *cfg, dp_model **out) {
    dp_mem_stats before, after;
    dp_mem_get_stats(dev->mem, &before);
    *out = NULL;
    CHECK_OK(dp_model_new(dev, cfg, out));
    dp_mem_get_stats(dev->mem, &after);
    return after.current[DP_CAT_PARAMETERS] - before.current[DP_CAT_PARAMETERS];
}

/* 5. Weight precision as users run bf16 LoRA: the frozen base weights are bf16 only (2 bytes
 *    each: no f32 master, no gradient, no state), the adapters keep f32 masters (4 bytes) and
 *    the bf16 copies their GEMMs read (2 bytes), so `parameters` is exactly
 *    2 x base + (4 + 2) x adapters; after a backward only the adapters have gradients (4 bytes
 *    each). With master_weights = 0 every parameter is bf16 only: 2 x all. f32 models: 4 x all.
 *    The plan device allocates the same per category and module as the CPU. */
static void check_weight_precision(void) {
    dp_device *cpu, *plan;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    dp_model_config cfg = tiny(DP_ARCH_LLAMA, 64);
    cfg.heads = 4, cfg.kv_heads = 2;
    cfg.lora_rank = 4, cfg.lora_alpha = 8;
    cfg.lora_targets = DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_FC | DP_LORA_DOWN;
    cfg.dtype = DP_BF16;
    dp_model *m;
    uint64_t got = param_bytes(cpu, &cfg, &m);
    if (!m) return;
    const uint64_t all = (uint64_t)dp_model_num_params(m, 0), adapters = (uint64_t)dp_model_num_params(m, 1);
    printf("weight precision: llama LoRA bf16: %llu base + %llu adapter parameters, %llu bytes\n",
           (unsigned long long)(all - adapters), (unsigned long long)adapters, (unsigned long long)got);
    CHECK_EQ_U64(got, 2 * (all - adapters) + (4 + 2) * adapters);
    for (int i = 0; i < dp_model_param_count(m); i++) {
        const dp_param *p = dp_model_param(m, i);
        CHECK(p->trainable ? p->value.dtype == DP_F32 && p->compute.alloc.live
                           : p->value.dtype == DP_BF16 && !p->compute.alloc.live);
    }
    dp_batch bt;
    CHECK_OK(dp_batch_init(&bt, cpu, cfg.batch, cfg.seq_len));
    CHECK_OK(dp_data_synthetic(&bt.inputs, &bt.targets, cfg.vocab, 1, 0));
    dp_mem_stats before, st;
    dp_mem_get_stats(cpu->mem, &before);
    float loss;
    CHECK_OK(dp_model_forward(m, &bt.inputs, &bt.targets, &loss, NULL));
    CHECK_OK(dp_model_backward(m, NULL));
    dp_mem_get_stats(cpu->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_GRADIENTS] - before.current[DP_CAT_GRADIENTS], 4 * adapters);
    CHECK(loss > 0 && loss == loss);
    dp_batch_release(&bt);
    dp_model_free(m);
    step_stats s_cpu, s_plan; /* the plan's step allocates what the CPU's does */
    one_step(cpu, &cfg, &s_cpu);
    one_step(plan, &cfg, &s_plan);
    check_same(&s_cpu, &s_plan);
    CHECK_EQ_U64(param_bytes(plan, &cfg, &m), got);
    dp_model_free(m);

    cfg.master_weights = 0; /* pure bf16 training */
    got = param_bytes(plan, &cfg, &m);
    CHECK_EQ_U64(got, 2 * all);
    dp_model_free(m);
    cfg.lora_rank = 0;
    got = param_bytes(cpu, &cfg, &m);
    CHECK_EQ_U64(got, 2 * (uint64_t)dp_model_num_params(m, 0));
    dp_model_free(m);
    cfg.dtype = DP_F32, cfg.master_weights = 1;
    got = param_bytes(cpu, &cfg, &m);
    CHECK_EQ_U64(got, 4 * (uint64_t)dp_model_num_params(m, 0));
    dp_model_free(m);
    cfg.master_weights = 0;
    CHECK(dp_model_new(cpu, &cfg, &m) == DP_EINVAL && strstr(dp_error_message(), "'master_weights' = false needs"));
}

int main(void) {
    CHECK_OK(dp_engine_init());
    check_plan_host_memory(); /* first: the resident set's high-water mark is still low */
    check_arch(DP_ARCH_GPT, "gpt");
    check_arch(DP_ARCH_LLAMA, "llama");
    check_weight_precision();
    dp_engine_shutdown();
    return check_report("test_model_memory");
}
