/* test_block_weights.c: the model's block weights provider (dp_model_set_block_weights), the
 * hook fsdp gathers each block's weights through (docs/architecture.md, "fsdp").
 *
 * A provider that holds every parameter on the host, writes a block's (or a pseudo-block's: the
 * embeddings, DP_MODEL_EMBEDDINGS; the final norm and the head, the token embedding when tied,
 * DP_MODEL_HEAD) into the model at acquire and poisons them (NaN) at release, makes the loss, the
 * per-sample losses and every gradient of a forward and two backwards (the first retained, so the
 * second recomputes the logits) the same bits as a model without a provider, for gpt (tied head)
 * and llama (untied and tied), with and without checkpointing: so no pass reads a parameter
 * outside its acquire. At most one is acquired at a time; a forward acquires each block and each
 * pseudo-block once, a backward each block and the head once more (a checkpointed block's
 * recompute and backward share it; the embeddings are not read); a clip's
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
#define NONE (-100)    /* no block */
#define AT(l) ((l) + 2) /* acquires' index of block l, or of a pseudo-block (-1, -2) */

static dp_device *cpu;

typedef struct provider {
    dp_model *m;
    const char *prefix; /* "transformer.h." or "model.layers." */
    float *saved[64];   /* each parameter's values */
    int64_t held;       /* the block acquired, NONE when none */
    int64_t fail_at;    /* the block whose acquire fails, NONE when none */
    int acquires[AT(LAYERS)], overlaps;
} provider;

static int64_t block_of(const provider *pv, const dp_param *p) {
    size_t n = strlen(pv->prefix);
    if (strncmp(p->name, pv->prefix, n) != 0) return -1;
    return strtoll(p->name + n, NULL, 10);
}

/* whether block (or pseudo-block) `layer` reads p */
static int reads(const provider *pv, const dp_param *p, int64_t layer) {
    int64_t l = block_of(pv, p);
    if (layer >= 0 || l >= 0) return l == layer;
    int embedding = p->kind == DP_PARAM_EMBEDDING || p->kind == DP_PARAM_POSITION;
    int tied = p->kind == DP_PARAM_EMBEDDING && dp_model_config_of(pv->m)->tie_head;
    return layer == DP_MODEL_EMBEDDINGS ? embedding : !embedding || tied;
}

static void set_block(provider *pv, int64_t layer, int poison) {
    for (int k = 0; k < dp_model_param_count(pv->m); k++) {
        dp_param *p = dp_model_param(pv->m, k);
        if (!reads(pv, p, layer)) continue;
        if (poison)
            CHECK_OK(dp_tensor_fill(&p->value, NAN));
        else
            CHECK_OK(dp_tensor_from_host_f32(&p->value, pv->saved[k], p->value.numel));
    }
}

static int acquire(void *ctx, dp_model *m, int64_t layer) {
    provider *pv = ctx;
    (void)m;
    if (pv->held != NONE) pv->overlaps++;
    if (layer == pv->fail_at) return dp_error_set(DP_EOOM, "test: no room to gather block %lld", (long long)layer);
    CHECK(layer >= DP_MODEL_HEAD && layer < LAYERS);
    pv->held = layer;
    pv->acquires[AT(layer)]++;
    set_block(pv, layer, 0);
    return DP_OK;
}

static void release(void *ctx, dp_model *m, int64_t layer) {
    provider *pv = ctx;
    (void)m;
    CHECK(pv->held == layer);
    pv->held = NONE;
    set_block(pv, layer, 1);
}

static dp_model *make(dp_arch arch, int checkpoint, int tie) {
    dp_model_config c;
    dp_model_config_default(&c, arch);
    c.vocab = 19, c.hidden = 16, c.layers = LAYERS, c.ffn = 24, c.seq_len = 9, c.batch = 3, c.seed = 3;
    c.heads = 2;
    if (arch == DP_ARCH_LLAMA) c.heads = 4, c.kv_heads = 2;
    c.checkpoint = checkpoint;
    c.tie_head = tie;
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(cpu, &c, &m));
    return m;
}

static void install(provider *pv, dp_model *m, dp_arch arch) {
    memset(pv, 0, sizeof *pv);
    pv->m = m, pv->held = NONE, pv->fail_at = NONE;
    pv->prefix = arch == DP_ARCH_GPT ? "transformer.h." : "model.layers.";
    CHECK(dp_model_param_count(m) <= 64);
    for (int k = 0; k < dp_model_param_count(m) && k < 64; k++) {
        dp_param *p = dp_model_param(m, k);
        int sets = 0; /* every parameter is read by a block or a pseudo-block (the tied table by both) */
        for (int64_t l = DP_MODEL_HEAD; l < LAYERS; l++) sets += reads(pv, p, l);
        CHECK(sets == 1 + (p->kind == DP_PARAM_EMBEDDING && dp_model_config_of(m)->tie_head));
        pv->saved[k] = malloc((size_t)p->value.numel * sizeof(float));
        CHECK_OK(dp_tensor_to_host_f32(&p->value, pv->saved[k], p->value.numel));
    }
    for (int64_t l = DP_MODEL_HEAD; l < LAYERS; l++) set_block(pv, l, 1); /* held nowhere until acquired */
    dp_block_weights w = {pv, acquire, release};
    dp_model_set_block_weights(m, &w);
}

static void uninstall(provider *pv) {
    for (int64_t l = DP_MODEL_HEAD; l < LAYERS; l++) set_block(pv, l, 0);
    dp_model_set_block_weights(pv->m, NULL);
    for (int k = 0; k < 64; k++) free(pv->saved[k]);
}

static int same_bits(const dp_tensor *a, const dp_tensor *b) {
    return a->numel == b->numel && (a->numel == 0 || memcmp(a->data, b->data, (size_t)dp_tensor_bytes(a)) == 0);
}

static int same_grads(dp_model *ref, dp_model *m, const char *what) {
    int differ = 0;
    for (int k = 0; k < dp_model_param_count(ref); k++) {
        dp_param *a = dp_model_param(ref, k), *b = dp_model_param(m, k);
        if (!same_bits(&a->grad, &b->grad)) {
            fprintf(stderr, "  %s: the gradient of %s differs\n", what, a->name);
            differ++;
        }
    }
    return differ == 0;
}

static void check_arch(dp_arch arch, int checkpoint, int tie) {
    char what[64];
    snprintf(what, sizeof what, "%s checkpoint %d tie_head %d", arch == DP_ARCH_GPT ? "gpt" : "llama", checkpoint, tie);
    dp_model *ref = make(arch, checkpoint, tie), *m = make(arch, checkpoint, tie);
    if (!ref || !m) goto out;
    provider pv;
    install(&pv, m, arch);
    dp_tensor *in = test_ids(cpu, 3, 9, 19, 11), *tg = test_ids(cpu, 3, 9, 19, 13);
    float lr, lm, sr[3], sm[3];
    const float scale[3] = {0.7f, -0.4f, 1.3f};
    dp_backward_opts o = {.sample_scale = scale, .weight_grads = 1, .retain = 1, .hooks = NULL};
    dp_backward_opts last = o;
    last.retain = 0; /* after a retained backward: the logits are recomputed from the final norm's output */
    CHECK_OK(dp_model_forward(ref, in, tg, &lr, sr));
    CHECK_OK(dp_model_backward(ref, &o));
    CHECK_OK(dp_model_forward(m, in, tg, &lm, sm));
    for (int64_t l = DP_MODEL_HEAD; l < LAYERS; l++) CHECK(pv.acquires[AT(l)] == 1);
    CHECK_OK(dp_model_backward(m, &o));
    for (int64_t l = 0; l < LAYERS; l++) CHECK(pv.acquires[AT(l)] == 2);
    CHECK(pv.acquires[AT(DP_MODEL_HEAD)] == 2 && pv.acquires[AT(DP_MODEL_EMBEDDINGS)] == 1);
    CHECK(pv.overlaps == 0 && pv.held == NONE);
    CHECK(memcmp(&lr, &lm, sizeof lr) == 0 && memcmp(sr, sm, sizeof sr) == 0);
    CHECK(same_grads(ref, m, what));
    if (checkpoint) { /* a clip's recompute asks for the block again */
        CHECK_OK(dp_model_recompute_block(m, 1));
        dp_model_release_block(m, 1);
        CHECK(pv.acquires[AT(1)] == 3 && pv.held == NONE);
        pv.acquires[AT(1)]--;
    }
    CHECK_OK(dp_model_backward(ref, &last));
    CHECK_OK(dp_model_backward(m, &last));
    for (int64_t l = 0; l < LAYERS; l++) CHECK(pv.acquires[AT(l)] == 3);
    CHECK(pv.acquires[AT(DP_MODEL_HEAD)] == 3 && pv.acquires[AT(DP_MODEL_EMBEDDINGS)] == 1);
    CHECK(pv.overlaps == 0 && pv.held == NONE);
    CHECK(same_grads(ref, m, what));
    /* a failing acquire fails the forward with its error, and nothing stays acquired */
    const int64_t fail[] = {2, DP_MODEL_EMBEDDINGS, DP_MODEL_HEAD};
    for (int i = 0; i < 3; i++) {
        char want[32];
        snprintf(want, sizeof want, "gather block %lld", (long long)fail[i]);
        pv.fail_at = fail[i];
        CHECK(dp_model_forward(m, in, tg, &lm, sm) == DP_EOOM);
        CHECK(strstr(dp_error_message(), want) != NULL);
        CHECK(pv.held == NONE);
    }
    /* and a failing acquire of the head fails the backward, after a forward that got it */
    pv.fail_at = NONE;
    CHECK_OK(dp_model_forward(m, in, tg, &lm, sm));
    pv.fail_at = DP_MODEL_HEAD;
    CHECK(dp_model_backward(m, &o) == DP_EOOM);
    CHECK(pv.held == NONE && dp_model_forward_id(m) == 0);
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
    check_arch(DP_ARCH_GPT, 0, 1);
    check_arch(DP_ARCH_GPT, 1, 1);
    check_arch(DP_ARCH_LLAMA, 0, 0);
    check_arch(DP_ARCH_LLAMA, 1, 0);
    check_arch(DP_ARCH_LLAMA, 0, 1);
    check_arch(DP_ARCH_LLAMA, 1, 1);
    dp_engine_shutdown();
    return check_report("test_block_weights");
}
