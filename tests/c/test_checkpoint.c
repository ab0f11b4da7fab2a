/* test_checkpoint.c: activation checkpointing (issue 16) is exact and costs what it says.
 *
 * 1. The model alone: loss, per-sample losses and every gradient are the same bits with and
 *    without checkpointing (every block, every 2nd), for gpt (tied and untied) and llama
 *    (grouped-query attention with kv_heads < heads, head_dim given or not, llama3 rope
 *    scaling), with and without LoRA (adapters on the block's output projection too, whose
 *    recomputation makes only the adapter's input), f32 and bf16 (a bf16 LoRA model: frozen base
 *    weights bf16 only). Nothing is left allocated after it.
 * 2. DP-SGD, for each of those models: for vanilla and every norms x clip pair of the engine's
 *    lists (every preset among them; flash in strips too), one logical step of 5 samples in
 *    physical batches of 2, 2 and 1, noised: the per-sample norms, each parameter's squared norms
 *    of the last batch and the updated parameters are the same bits with and without
 *    checkpointing. Twopass recomputes in both backwards, book-keeping in its backward and, block
 *    by block, in its clip.
 * 3. The plan device allocates what the CPU does with checkpointing, per category and per module,
 *    and records the same ledger, whose "recompute:" entries hold the recomputation's work.
 * 4. The `activations` peak of a checkpointed step equals, in bytes: the blocks' kept inputs (and
 *    the last block's output) plus the full activations of the blocks not checkpointed plus one
 *    block's activations, plus what the method keeps across its backward (twopass and bk retain
 *    the final norm's output and statistics and the loss's log-sum-exp).
 * 5. Bad values: checkpoint < 0 is refused; the DP clip refuses to recompute a block whose input
 *    is gone. */
#include "check.h"
#include "data.h"
#include "device.h"
#include "dpprof_engine.h"
#include "dpsgd.h"
#include "error.h"
#include "ledger.h"
#include "model.h"
#include "optim.h"
#include "scope.h"
#include "test_util.h"

#include <string.h>

static dp_device *cpu;

typedef struct variant {
    dp_arch arch;
    int tied, lora, bf16;
    int64_t head_dim; /* llama: 0 = hidden / heads */
} variant;

static const char *variant_name(const variant *v) {
    static char buf[64];
    snprintf(buf, sizeof buf, "%s%s%s%s%s", v->arch == DP_ARCH_GPT ? "gpt" : "llama", v->tied ? " tied" : "",
             v->lora ? " lora" : "", v->bf16 ? " bf16" : "", v->head_dim ? " head_dim" : "");
    return buf;
}

static dp_model_config config_of(const variant *v, int checkpoint, int64_t batch) {
    dp_model_config c;
    dp_model_config_default(&c, v->arch);
    c.vocab = 19, c.hidden = 16, c.layers = 3, c.ffn = 24, c.seq_len = 9, c.batch = batch, c.seed = 3;
    c.heads = 2;
    if (v->arch == DP_ARCH_LLAMA) {
        c.heads = 4, c.kv_heads = 2; /* grouped-query attention, head width 4 (or head_dim) */
        c.head_dim = v->head_dim;
        c.rope.type = DP_ROPE_LLAMA3, c.rope.factor = 8.0, c.rope.low_freq_factor = 1.0;
        c.rope.high_freq_factor = 4.0, c.rope.original_max_positions = 4;
    }
    c.tie_head = v->arch == DP_ARCH_GPT ? v->tied : 0;
    if (v->lora) {
        c.lora_rank = 2, c.lora_alpha = 4.0f;
        c.lora_targets = v->arch == DP_ARCH_GPT ? DP_LORA_QKV | DP_LORA_FC | DP_LORA_DOWN : DP_LORA_ALL;
    }
    if (v->bf16) c.dtype = DP_BF16;
    c.checkpoint = checkpoint;
    return c;
}

static dp_model *make_model(dp_device *dev, const variant *v, int checkpoint, int64_t batch) {
    dp_model_config cfg = config_of(v, checkpoint, batch);
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(dev, &cfg, &m));
    /* LoRA's B starts at zero: nonzero, so the adapters change the forward */
    for (int k = 0; m && dev->kind == DP_DEV_CPU && k < dp_model_param_count(m); k++) {
        dp_param *p = dp_model_param(m, k);
        if (p->kind == DP_PARAM_LORA_B) CHECK_OK(dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0.0f, 0.3f, 5, 700 + k));
    }
    if (m && v->bf16) CHECK_OK(dp_model_sync_compute_weights(m));
    return m;
}

static int same_bits(const dp_tensor *a, const dp_tensor *b) {
    return a->numel == b->numel && a->dtype == b->dtype &&
           (a->numel == 0 || memcmp(a->data, b->data, (size_t)dp_tensor_bytes(a)) == 0);
}

/* ---- 1. the model alone -------------------------------------------------------------------- */

static void check_model(const variant *v, int checkpoint) {
    dp_model *ref = make_model(cpu, v, 0, 3), *ck = make_model(cpu, v, checkpoint, 3);
    if (!ref || !ck) goto out;
    dp_tensor *in = test_ids(cpu, 3, 9, 19, 11), *tg = test_ids(cpu, 3, 9, 19, 13);
    float lr, lc, sr[3], sc[3];
    const float scale[3] = {0.7f, -0.4f, 1.3f};
    dp_backward_opts o = {.sample_scale = scale, .weight_grads = 1, .retain = 0, .hooks = NULL};
    dp_mem_stats before, after;
    CHECK_OK(dp_model_forward(ref, in, tg, &lr, sr));
    CHECK_OK(dp_model_backward(ref, &o));
    dp_mem_get_stats(cpu->mem, &before);
    dp_model_clear_recompute_log(ck);
    CHECK_OK(dp_model_forward(ck, in, tg, &lc, sc));
    CHECK_OK(dp_model_backward(ck, &o));
    dp_mem_get_stats(cpu->mem, &after);
    size_t n_spans;
    int64_t ns;
    dp_model_recompute_log(ck, &n_spans, &ns);
    int64_t blocks = 0;
    for (int64_t l = 0; l < 3; l++) blocks += dp_model_checkpointed(ck, l);
    CHECK_EQ_U64(n_spans, (uint64_t)blocks); /* one recomputation per checkpointed block */
    CHECK(blocks == (checkpoint == 1 ? 3 : 2));
    CHECK(memcmp(&lr, &lc, sizeof lr) == 0 && memcmp(sr, sc, sizeof sr) == 0);
    int differ = 0;
    for (int k = 0; k < dp_model_param_count(ref); k++) {
        dp_param *a = dp_model_param(ref, k), *b = dp_model_param(ck, k);
        if (!a->trainable) continue;
        if (!same_bits(&a->grad, &b->grad)) {
            fprintf(stderr, "  %s checkpoint %d: the gradient of %s differs\n", variant_name(v), checkpoint, a->name);
            differ++;
        }
    }
    CHECK(differ == 0);
    /* nothing of the step is left but the gradients */
    CHECK_EQ_U64(after.current[DP_CAT_ACTIVATIONS], before.current[DP_CAT_ACTIVATIONS]);
    CHECK_EQ_U64(after.current[DP_CAT_TEMP], before.current[DP_CAT_TEMP]);
    dp_tensor_free(in);
    dp_tensor_free(tg);
out:
    dp_model_free(ref);
    dp_model_free(ck);
}

/* ---- 2. DP-SGD ----------------------------------------------------------------------------- */

/* A DP method: vanilla, or a norms x clip pair with flash's implementation. */
typedef struct method {
    dpsgd_norms_method norms;
    dpsgd_clip_method clip;
    dpsgd_flash_impl flash_impl;
} method;

/* vanilla and every norms x clip pair of the engine's lists (so every preset: list_methods checks
 * that each is one of them), flash in strips too */
#define MAX_METHODS 32
static method methods[MAX_METHODS];
static size_t n_methods;

static void list_methods(void) {
    methods[n_methods++] = (method){DPSGD_NORMS_NONE, DPSGD_CLIP_NONE, DPSGD_FLASH_TILES};
    for (size_t i = 0; dpsgd_list_name(DPSGD_LIST_NORMS, i); i++)
        for (size_t j = 0; dpsgd_list_name(DPSGD_LIST_CLIPS, j) && n_methods + 2 <= MAX_METHODS; j++) {
            method mt = {DPSGD_NORMS_NONE, DPSGD_CLIP_NONE, DPSGD_FLASH_TILES};
            CHECK_OK(dpsgd_norms_parse(dpsgd_list_name(DPSGD_LIST_NORMS, i), &mt.norms));
            CHECK_OK(dpsgd_clip_parse(dpsgd_list_name(DPSGD_LIST_CLIPS, j), &mt.clip));
            methods[n_methods++] = mt;
            if (mt.norms == DPSGD_NORMS_FLASH) {
                mt.flash_impl = DPSGD_FLASH_STRIPS;
                methods[n_methods++] = mt;
            }
        }
    size_t presets = 0;
    for (const char *name; (name = dpsgd_list_name(DPSGD_LIST_PRESETS, presets)) != NULL; presets++) {
        method p = {DPSGD_NORMS_NONE, DPSGD_CLIP_NONE, DPSGD_FLASH_TILES};
        CHECK_OK(dpsgd_method_preset(name, &p.norms, &p.clip));
        int found = 0;
        for (size_t k = 0; k < n_methods; k++) found |= methods[k].norms == p.norms && methods[k].clip == p.clip;
        if (!found) fprintf(stderr, "  the preset %s is not among the methods tested\n", name);
        CHECK(found);
    }
    CHECK(presets >= 6 && n_methods >= presets);
}

/* The preset's name, or norms+clip; " (strips)" for flash in strips. */
static const char *method_name(const method *mt) {
    static char buf[64];
    const char *preset = dpsgd_method_preset_name(mt->norms, mt->clip);
    if (preset)
        snprintf(buf, sizeof buf, "%s", preset);
    else
        snprintf(buf, sizeof buf, "%s+%s", dpsgd_norms_name(mt->norms), dpsgd_clip_name(mt->clip));
    if (mt->flash_impl == DPSGD_FLASH_STRIPS) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " (strips)");
    return buf;
}

static void method_config(const method *mt, dpsgd_config *cfg) {
    dpsgd_config_default(cfg);
    cfg->norms = mt->norms, cfg->clip = mt->clip, cfg->flash_impl = mt->flash_impl;
}

/* What one logical step leaves: the per-sample norms, the last batch's squared norms per
 * parameter, and the trainable parameters after an SGD step. */
typedef struct step_out {
    float norms[5];
    float *sq;              /* n_trainable x (last batch) */
    unsigned char *params;  /* the trainable values' bytes, concatenated (a bf16-only one's bf16) */
    int64_t n_sq, n_params; /* n_params: bytes */
} step_out;

static void step_out_free(step_out *s) {
    free(s->sq);
    free(s->params);
}

static void run_step(const variant *v, const method *mt, int checkpoint, step_out *out) {
    memset(out, 0, sizeof *out);
    dp_model *m = make_model(cpu, v, checkpoint, 2);
    dpsgd_config cfg;
    method_config(mt, &cfg);
    dpsgd *dp = NULL;
    dp_optimizer *opt = NULL;
    /* C between the samples' norms (LoRA's 0.25 to 1, the others' 1.9 to 3.3): some clipped, some not */
    const double C = v->lora ? 0.45 : v->arch == DP_ARCH_LLAMA ? 2.2 : 2.5;
    if (m) CHECK_OK(test_dp_sgd(m, &cfg, C, 0.7, 2, &dp, &opt));
    if (!dp || !opt) goto done;
    dp_tensor *all_in = test_ids(cpu, 5, 9, 19, 17), *all_tg = test_ids(cpu, 5, 9, 19, 23);
    dpsgd_step_plan plan;
    CHECK_OK(dpsgd_next_step(dp, &plan));
    int64_t last = 0;
    for (int64_t k = 0, first = 0; k < plan.n_physical; k++) {
        int64_t nb = dpsgd_step_plan_batch(&plan, k), shape[2] = {nb, 9};
        dp_tensor in, tg;
        CHECK_OK(dp_tensor_view(&in, all_in, first * 9, 2, shape));
        CHECK_OK(dp_tensor_view(&tg, all_tg, first * 9, 2, shape));
        float loss;
        dp_model_clear_recompute_log(m);
        CHECK_OK(dpsgd_forward(dp, &in, &tg, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        first += nb;
        last = nb;
        /* each checkpointed block is recomputed once per backward, and once more by bk's clip
         * when it keeps a linear's output gradient there (not over materialized gradients) */
        size_t spans;
        int64_t ns;
        dp_model_recompute_log(m, &spans, &ns);
        uint64_t blocks = checkpoint == 0 ? 0 : checkpoint == 1 ? 3 : 2, passes = 1;
        if (cfg.clip == DPSGD_CLIP_TWOPASS || (cfg.clip == DPSGD_CLIP_BK && cfg.norms == DPSGD_NORMS_GHOST) ||
            (cfg.clip == DPSGD_CLIP_BK && cfg.norms == DPSGD_NORMS_FLASH && nb > 1))
            passes = 2;
        if (cfg.clip == DPSGD_CLIP_BK && cfg.norms == DPSGD_NORMS_MIXED)
            CHECK(spans >= blocks && spans <= 2 * blocks);
        else
            CHECK_EQ_U64(spans, blocks * passes);
    }
    CHECK_OK(dpsgd_noise(dp));
    if (cfg.norms != DPSGD_NORMS_NONE) {
        size_t n;
        const float *nv = dpsgd_norms(dp, &n);
        CHECK_EQ_U64(n, 5);
        memcpy(out->norms, nv, (n < 5 ? n : 5) * sizeof *nv);
    }
    int n_tr = 0;
    for (int k = 0; k < dp_model_param_count(m); k++) {
        dp_param *p = dp_model_param(m, k);
        if (!p->trainable) continue;
        n_tr++;
        out->n_params += dp_tensor_bytes(&p->value);
    }
    out->params = malloc((size_t)out->n_params);
    out->sq = calloc((size_t)(n_tr * last + 1), sizeof *out->sq);
    CHECK_OK(dp_optim_step(opt));
    for (int k = 0, j = 0; k < dp_model_param_count(m); k++) {
        dp_param *p = dp_model_param(m, k);
        if (!p->trainable) continue;
        if (cfg.norms != DPSGD_NORMS_NONE) CHECK_OK(dpsgd_param_sq_norms(dp, p, out->sq + out->n_sq, last));
        out->n_sq += last;
        const int64_t bytes = dp_tensor_bytes(&p->value);
        memcpy(out->params + j, p->value.data, (size_t)bytes);
        j += (int)bytes;
    }
    dp_tensor_free(all_in);
    dp_tensor_free(all_tg);
done:
    dp_optim_free(opt);
    dpsgd_free(dp);
    dp_model_free(m);
}

static void check_dp(const variant *v) {
    for (size_t k = 0; k < n_methods; k++) {
        step_out ref;
        run_step(v, &methods[k], 0, &ref);
        for (int checkpoint = 1; checkpoint <= 2; checkpoint++) {
            step_out got;
            run_step(v, &methods[k], checkpoint, &got);
            int norms = memcmp(ref.norms, got.norms, sizeof ref.norms) == 0;
            int sq = ref.n_sq == got.n_sq && memcmp(ref.sq, got.sq, (size_t)ref.n_sq * sizeof *ref.sq) == 0;
            int params = ref.n_params == got.n_params && memcmp(ref.params, got.params, (size_t)ref.n_params) == 0;
            if (!norms || !sq || !params) {
                fprintf(stderr, "  %s, %s, checkpoint %d: %s%s%s differ from no checkpointing\n", variant_name(v),
                        method_name(&methods[k]), checkpoint, norms ? "" : "norms ", sq ? "" : "squared norms ",
                        params ? "" : "update");
                check_failures++;
            }
            step_out_free(&got);
        }
        step_out_free(&ref);
    }
}

/* ---- 3. and 4. memory and ledger: the plan's and the formula ------------------------------- */

#define MAX_MODULES 1024
typedef struct step_mem {
    uint64_t peak[DP_CAT_COUNT];
    uint32_t modules;
    uint64_t module_peak[MAX_MODULES];
    size_t n_ops;
    char op[128][48];
    dp_ledger_entry ops[128];
} step_mem;

/* One logical step of expected size 2 in one physical batch on dev, from a fresh peak. */
static void measure(dp_device *dev, const variant *v, const method *mt, int checkpoint, step_mem *out) {
    memset(out, 0, sizeof *out);
    dp_model *m = make_model(dev, v, checkpoint, 2);
    dpsgd_config dc;
    method_config(mt, &dc);
    dc.expected_batch_size = 2;
    dpsgd *dp = NULL;
    if (m) CHECK_OK(dpsgd_new(m, &dc, &dp));
    dp_batch bt;
    CHECK_OK(dp_batch_init(&bt, dev, 2, 9));
    CHECK_OK(dp_data_synthetic(&bt.inputs, &bt.targets, 19, 1, 0));
    dp_mem_stats before, after;
    dp_mem_get_stats(dev->mem, &before);
    dp_mem_reset_peak(dev->mem);
    dp_ledger_reset();
    for (uint32_t i = 0; i < dp_module_count() && i < MAX_MODULES; i++) {
        uint64_t cur, peak, live;
        dp_mem_module_stats(dev->mem, i, &cur, &peak, &live);
        out->module_peak[i] = cur; /* the level before the step, subtracted below */
    }
    dpsgd_step_plan plan;
    float loss;
    if (dp) {
        CHECK_OK(dpsgd_next_step(dp, &plan));
        CHECK_OK(dpsgd_forward(dp, &bt.inputs, &bt.targets, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        CHECK_OK(dpsgd_noise(dp));
    }
    dp_mem_get_stats(dev->mem, &after);
    for (int c = 0; c < DP_CAT_COUNT; c++) out->peak[c] = after.peak[c] - before.current[c];
    out->modules = dp_module_count();
    for (uint32_t i = 0; i < out->modules && i < MAX_MODULES; i++) {
        uint64_t cur, peak, live;
        dp_mem_module_stats(dev->mem, i, &cur, &peak, &live);
        out->module_peak[i] = peak - out->module_peak[i];
    }
    out->n_ops = dp_ledger_count() < 128 ? dp_ledger_count() : 128;
    for (size_t i = 0; i < out->n_ops; i++) {
        out->ops[i] = *dp_ledger_at(i);
        snprintf(out->op[i], sizeof out->op[i], "%s", out->ops[i].op);
    }
    dp_batch_release(&bt);
    dpsgd_free(dp);
    dp_model_free(m);
}

static void check_plan(const variant *v, dp_device *plan) {
    for (size_t k = 0; k < n_methods; k++)
        for (int checkpoint = 1; checkpoint <= 2; checkpoint++) {
            static step_mem c, p;
            measure(cpu, v, &methods[k], checkpoint, &c);
            measure(plan, v, &methods[k], checkpoint, &p);
            int bad = 0;
            for (int cat = 0; cat < DP_CAT_COUNT; cat++) bad += c.peak[cat] != p.peak[cat];
            for (uint32_t i = 0; i < c.modules && i < MAX_MODULES; i++) bad += c.module_peak[i] != p.module_peak[i];
            bad += c.n_ops != p.n_ops;
            double recompute_flops = 0;
            for (size_t i = 0; i < c.n_ops && i < p.n_ops; i++) {
                bad += strcmp(c.op[i], p.op[i]) != 0 || c.ops[i].calls != p.ops[i].calls ||
                       c.ops[i].flops != p.ops[i].flops || c.ops[i].bytes != p.ops[i].bytes;
                if (strncmp(c.op[i], "recompute:", 10) == 0) recompute_flops += c.ops[i].flops;
            }
            if (bad) {
                fprintf(stderr, "  %s, %s, checkpoint %d: plan and cpu differ in %d figures\n", variant_name(v),
                        method_name(&methods[k]), checkpoint, bad);
                check_failures++;
            }
            CHECK(recompute_flops > 0);
        }
}

/* Bytes of one block's activations (model_internal.h's lists): `inner` without its output,
 * which is B x T x d; values in the compute dtype (2 bytes for bf16), statistics f32. */
static void block_bytes(const dp_model_config *c, uint64_t *inner, uint64_t *output) {
    const uint64_t N = (uint64_t)(c->batch * c->seq_len), d = (uint64_t)c->hidden, H = (uint64_t)c->heads;
    const uint64_t F = (uint64_t)dp_model_config_ffn(c), r = (uint64_t)c->lora_rank;
    uint64_t values, stats, adapters = 0;
    for (unsigned bit = 1; bit <= DP_LORA_DOWN; bit <<= 1) adapters += (c->lora_targets & bit) != 0;
    if (c->arch == DP_ARCH_GPT) {
        /* ln_1, qkv (3d), att, res_mid, ln_2; fc, gelu (F); stats: ln_1, ln_2 mean and rstd, lse (H) */
        if (c->lora_rank) adapters -= 3; /* qkv's k and v bits and fc's up bit: one adapter each group */
        values = N * (7 * d + 2 * F);
        stats = N * (4 + H);
    } else {
        const uint64_t hd = c->head_dim ? (uint64_t)c->head_dim : d / H, dq = H * hd, dkv = (uint64_t)c->kv_heads * hd;
        /* xn, q, k, v, att, res_mid, xn2; gate, up, h (F); stats: two rstd, lse (H) */
        values = N * (3 * d + 2 * dq + 2 * dkv + 3 * F);
        stats = N * (2 + H);
    }
    if (c->lora_rank) values += N * r * adapters;
    const uint64_t value_bytes = c->dtype == DP_BF16 ? 2 : 4;
    *inner = value_bytes * values + 4 * stats;
    *output = value_bytes * N * d;
}

static void check_formula(const variant *v, dp_device *plan) {
    for (size_t k = 0; k < n_methods; k++)
        for (int checkpoint = 1; checkpoint <= 2; checkpoint++) {
            dp_model_config c = config_of(v, checkpoint, 2);
            const uint64_t N = 18, L = 3;
            uint64_t inner, out;
            block_bytes(&c, &inner, &out);
            /* the embeddings' output and every block's output (each the next one's input), the
             * blocks not checkpointed but the last, and the last block whole */
            uint64_t expected = (L + 1) * out + inner, not_ckpt = 0;
            for (uint64_t l = 0; l + 1 < L; l++) not_ckpt += !(l % (uint64_t)checkpoint == 0);
            expected += not_ckpt * inner;
            dpsgd_config dc;
            method_config(&methods[k], &dc);
            /* twopass and bk (but over materialized gradients) keep the final norm's output and
             * statistics and the loss's log-sum-exp across the backward */
            int retains =
                dc.clip == DPSGD_CLIP_TWOPASS || (dc.clip == DPSGD_CLIP_BK && dc.norms != DPSGD_NORMS_MATERIALIZE);
            const uint64_t final_stats = v->arch == DP_ARCH_GPT ? 2 : 1;
            if (retains) expected += out + 4 * N * final_stats + 4 * N;
            static step_mem s;
            measure(plan, v, &methods[k], checkpoint, &s);
            if (s.peak[DP_CAT_ACTIVATIONS] != expected) {
                fprintf(stderr, "  %s, %s, checkpoint %d: activations peak %llu B, the formula says %llu B\n",
                        variant_name(v), method_name(&methods[k]), checkpoint,
                        (unsigned long long)s.peak[DP_CAT_ACTIVATIONS], (unsigned long long)expected);
                check_failures++;
            }
            /* what bk keeps besides (output gradients) is what it keeps without checkpointing */
            static step_mem s0;
            measure(plan, v, &methods[k], 0, &s0);
            CHECK_EQ_U64(s.peak[DP_CAT_OUTPUT_GRADS], s0.peak[DP_CAT_OUTPUT_GRADS]);
            CHECK(s.peak[DP_CAT_ACTIVATIONS] < s0.peak[DP_CAT_ACTIVATIONS]);
        }
}

/* ---- 5. bad values ------------------------------------------------------------------------- */

static void check_errors(void) {
    variant v = {DP_ARCH_GPT, 1, 0, 0, 0};
    dp_model_config c = config_of(&v, -1, 2);
    CHECK(dp_model_config_check(&c) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "checkpoint") != NULL);
    /* recomputing needs the input: after a backward that did not retain, it is gone */
    dp_model *m = make_model(cpu, &v, 1, 2);
    dp_tensor *in = test_ids(cpu, 2, 9, 19, 11), *tg = test_ids(cpu, 2, 9, 19, 13);
    float loss;
    CHECK_OK(dp_model_forward(m, in, tg, &loss, NULL));
    CHECK(dp_model_recompute_block(m, 1) == DP_OK); /* after the forward, its input is there */
    dp_mem_stats once, twice;
    dp_mem_get_stats(cpu->mem, &once);
    CHECK(dp_model_recompute_block(m, 1) == DP_OK); /* again: recomputed, not held twice */
    dp_mem_get_stats(cpu->mem, &twice);
    CHECK_EQ_U64(twice.current[DP_CAT_ACTIVATIONS], once.current[DP_CAT_ACTIVATIONS]);
    dp_model_release_block(m, 1);
    CHECK_OK(dp_model_backward(m, NULL));
    CHECK(dp_model_recompute_block(m, 1) == DP_EINVAL);
    dp_model_free(m);
    m = make_model(cpu, &v, 2, 2);
    CHECK_OK(dp_model_forward(m, in, tg, &loss, NULL));
    CHECK(dp_model_recompute_block(m, 1) == DP_EINVAL); /* not checkpointed */
    CHECK(strstr(dp_error_message(), "not checkpointed") != NULL);
    dp_model_free(m);
    dp_tensor_free(in);
    dp_tensor_free(tg);
}

int main(void) {
    dp_engine_init();
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    dp_device *plan;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    list_methods();
    /* llama: grouped-query attention (4 heads, 2 kv heads), one with head_dim != hidden / heads;
     * bf16 with LoRA: the frozen base weights bf16 only */
    const variant variants[] = {
        {DP_ARCH_GPT, 1, 0, 0, 0},   {DP_ARCH_GPT, 0, 0, 0, 0},   {DP_ARCH_GPT, 1, 1, 0, 0},
        {DP_ARCH_LLAMA, 0, 0, 0, 0}, {DP_ARCH_LLAMA, 0, 0, 0, 6}, {DP_ARCH_LLAMA, 0, 1, 0, 0},
        {DP_ARCH_GPT, 1, 1, 1, 0},   {DP_ARCH_LLAMA, 0, 1, 1, 0},
    };
    const size_t nv = sizeof variants / sizeof *variants;
    for (size_t i = 0; i < nv; i++)
        for (int checkpoint = 1; checkpoint <= 2; checkpoint++) check_model(&variants[i], checkpoint);
    printf("model: gradients identical with checkpointing\n");
    for (size_t i = 0; i < nv; i++) check_dp(&variants[i]);
    printf("dp: norms and updates identical with checkpointing, every method\n");
    for (size_t i = 0; i < nv; i++) check_plan(&variants[i], plan);
    printf("plan: allocations and ledger equal to the cpu's\n");
    for (size_t i = 0; i < nv; i++) check_formula(&variants[i], plan);
    printf("activations peak: the formula, every method\n");
    check_errors();
    return check_report("test_checkpoint");
}
