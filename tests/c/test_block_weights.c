/* test_block_weights.c: the model's block weights provider (dp_model_set_block_weights), the
 * hook fsdp gathers each block's weights through (docs/architecture.md, "fsdp").
 *
 * A provider that holds every block's weights on the host, writes them into the block's
 * parameters at acquire and poisons them (NaN) at release, makes the loss, the per-sample losses
 * and every gradient of a forward and a backward the same bits as a model without a provider,
 * for gpt and llama, with and without checkpointing: so no pass reads a block's weights outside
 * its acquire. At most one block is acquired at a time; a forward acquires each block once, a
 * backward once more (a checkpointed block's recompute and backward share it); a clip's
 * dp_model_recompute_block acquires its block again. A failing acquire fails the forward. */
#include "check.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "model.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS 3

static dp_device *cpu;

typedef struct provider {
    dp_model *m;
    const char *prefix; /* "transformer.h." or "model.layers." */
    float *saved[64];   /* each parameter's values, for a parameter of a block, else NULL */
    int64_t held;       /* the block acquired, -1 when none */
    int acquires[LAYERS], overlaps, fail_at;
} provider;

static int64_t block_of(const provider *pv, const dp_param *p) {
    size_t n = strlen(pv->prefix);
    if (strncmp(p->name, pv->prefix, n) != 0) return -1;
    return strtoll(p->name + n, NULL, 10);
}

static void set_block(provider *pv, int64_t layer, int poison) {
    for (int k = 0; k < dp_model_param_count(pv->m); k++) {
        dp_param *p = dp_model_param(pv->m, k);
        if (block_of(pv, p) != layer) continue;
        if (poison)
            CHECK_OK(dp_tensor_fill(&p->value, NAN));
        else
            CHECK_OK(dp_tensor_from_host_f32(&p->value, pv->saved[k], p->value.numel));
    }
}

static int acquire(void *ctx, dp_model *m, int64_t layer) {
    provider *pv = ctx;
    (void)m;
    if (pv->held >= 0) pv->overlaps++;
    if (layer == pv->fail_at) return dp_error_set(DP_EOOM, "test: no room to gather block %lld", (long long)layer);
    pv->held = layer;
    pv->acquires[layer]++;
    set_block(pv, layer, 0);
    return DP_OK;
}

static void release(void *ctx, dp_model *m, int64_t layer) {
    provider *pv = ctx;
    (void)m;
    CHECK(pv->held == layer);
    pv->held = -1;
    set_block(pv, layer, 1);
}

static dp_model *make(dp_arch arch, int checkpoint) {
    dp_model_config c;
    dp_model_config_default(&c, arch);
    c.vocab = 19, c.hidden = 16, c.layers = LAYERS, c.ffn = 24, c.seq_len = 9, c.batch = 3, c.seed = 3;
    c.heads = 2;
    if (arch == DP_ARCH_LLAMA) c.heads = 4, c.kv_heads = 2;
    c.checkpoint = checkpoint;
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(cpu, &c, &m));
    return m;
}

static void install(provider *pv, dp_model *m, dp_arch arch) {
    memset(pv, 0, sizeof *pv);
    pv->m = m, pv->held = -1, pv->fail_at = -1;
    pv->prefix = arch == DP_ARCH_GPT ? "transformer.h." : "model.layers.";
    int blocks = 0;
    for (int k = 0; k < dp_model_param_count(m) && k < 64; k++) {
        dp_param *p = dp_model_param(m, k);
        if (block_of(pv, p) < 0) continue;
        blocks++;
        pv->saved[k] = malloc((size_t)p->value.numel * sizeof(float));
        CHECK_OK(dp_tensor_to_host_f32(&p->value, pv->saved[k], p->value.numel));
    }
    CHECK(dp_model_param_count(m) <= 64 && blocks > 0);
    for (int64_t l = 0; l < LAYERS; l++) set_block(pv, l, 1); /* held nowhere until acquired */
    dp_block_weights w = {pv, acquire, release};
    dp_model_set_block_weights(m, &w);
}

static void uninstall(provider *pv) {
    for (int64_t l = 0; l < LAYERS; l++) set_block(pv, l, 0);
    dp_model_set_block_weights(pv->m, NULL);
    for (int k = 0; k < 64; k++) free(pv->saved[k]);
}

static int same_bits(const dp_tensor *a, const dp_tensor *b) {
    return a->numel == b->numel && (a->numel == 0 || memcmp(a->data, b->data, (size_t)dp_tensor_bytes(a)) == 0);
}

static void check_arch(dp_arch arch, int checkpoint) {
    dp_model *ref = make(arch, checkpoint), *m = make(arch, checkpoint);
    if (!ref || !m) goto out;
    provider pv;
    install(&pv, m, arch);
    dp_tensor *in = test_ids(cpu, 3, 9, 19, 11), *tg = test_ids(cpu, 3, 9, 19, 13);
    float lr, lm, sr[3], sm[3];
    const float scale[3] = {0.7f, -0.4f, 1.3f};
    dp_backward_opts o = {.sample_scale = scale, .weight_grads = 1, .retain = 1, .hooks = NULL};
    CHECK_OK(dp_model_forward(ref, in, tg, &lr, sr));
    CHECK_OK(dp_model_backward(ref, &o));
    CHECK_OK(dp_model_forward(m, in, tg, &lm, sm));
    for (int64_t l = 0; l < LAYERS; l++) CHECK(pv.acquires[l] == 1);
    CHECK_OK(dp_model_backward(m, &o));
    for (int64_t l = 0; l < LAYERS; l++) CHECK(pv.acquires[l] == 2);
    CHECK(pv.overlaps == 0 && pv.held == -1);
    CHECK(memcmp(&lr, &lm, sizeof lr) == 0 && memcmp(sr, sm, sizeof sr) == 0);
    int differ = 0;
    for (int k = 0; k < dp_model_param_count(ref); k++) {
        dp_param *a = dp_model_param(ref, k), *b = dp_model_param(m, k);
        if (!same_bits(&a->grad, &b->grad)) {
            fprintf(stderr, "  %s checkpoint %d: the gradient of %s differs\n", arch == DP_ARCH_GPT ? "gpt" : "llama",
                    checkpoint, a->name);
            differ++;
        }
    }
    CHECK(differ == 0);
    if (checkpoint) { /* a clip's recompute asks for the block again */
        CHECK_OK(dp_model_recompute_block(m, 1));
        dp_model_release_block(m, 1);
        CHECK(pv.acquires[1] == 3 && pv.held == -1);
    }
    /* a failing acquire fails the forward with its error, and nothing stays acquired */
    pv.fail_at = 2;
    CHECK(dp_model_forward(m, in, tg, &lm, sm) == DP_EOOM);
    CHECK(strstr(dp_error_message(), "gather block 2") != NULL);
    CHECK(pv.held == -1);
    uninstall(&pv);
    dp_tensor_free(in);
    dp_tensor_free(tg);
out:
    dp_model_free(ref);
    dp_model_free(m);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    check_arch(DP_ARCH_GPT, 0);
    check_arch(DP_ARCH_GPT, 1);
    check_arch(DP_ARCH_LLAMA, 0);
    check_arch(DP_ARCH_LLAMA, 1);
    dp_engine_shutdown();
    return check_report("test_block_weights");
}
