/* model.c: the model's life cycle and its passes: embeddings, the blocks in order, the final
 * norm, the LM head and the fused loss; the backward in reverse. */
#include "model_internal.h"

#include "error.h"
#include "layer_ops.h"
#include "layers.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

int dp_model_new(dp_device *dev, const dp_model_config *cfg, dp_model **out) {
    *out = NULL;
    DP_TRY(dp_model_config_check(cfg));
    dp_model *m = calloc(1, sizeof *m);
    if (!m) return dp_error_set(DP_EOOM, "model: out of host memory");
    m->dev = dev;
    m->cfg = *cfg;
    m->cfg.ffn = dp_model_config_ffn(cfg);
    if (m->cfg.max_positions == 0) m->cfg.max_positions = cfg->seq_len;
    if (m->cfg.lora_rank == 0) m->cfg.lora_targets = 0, m->cfg.lora_alpha = 0;
    m->d = cfg->hidden;
    m->H = cfg->heads;
    m->Hkv = cfg->kv_heads > 0 ? cfg->kv_heads : cfg->heads;
    m->hd = cfg->head_dim > 0 ? cfg->head_dim : cfg->hidden / cfg->heads;
    m->cfg.kv_heads = m->Hkv;
    m->cfg.head_dim = m->hd;
    m->F = m->cfg.ffn;
    m->V = cfg->vocab;
    m->t = cfg->dtype;
    m->lora_scale = cfg->lora_rank > 0 ? cfg->lora_alpha / (float)cfg->lora_rank : 0.0f;
    m->target_count = calloc((size_t)cfg->batch, sizeof *m->target_count);
    int rc = m->target_count ? DP_OK : dp_error_set(DP_EOOM, "model: out of host memory");
    if (rc == DP_OK && cfg->arch == DP_ARCH_LLAMA) {
        m->rope_inv_freq = malloc((size_t)(m->hd / 2) * sizeof *m->rope_inv_freq);
        rc = m->rope_inv_freq ? dp_rope_inv_freq(&m->cfg, m->hd, m->rope_inv_freq, &m->rope_scale)
                              : dp_error_set(DP_EOOM, "model: out of host memory");
    }
    if (rc == DP_OK) rc = dp_model_build_params(m);
    if (rc != DP_OK) {
        dp_model_free(m);
        return rc;
    }
    *out = m;
    return DP_OK;
}

void dp_model_free(dp_model *m) {
    if (!m) return;
    if (m->params) dp_model_release_activations(m);
    dp_model_free_params(m);
    free(m->rope_inv_freq);
    free(m->target_count);
    free(m->spans);
    free(m->origin.dir);
    free(m->origin.tokens);
    free(m->origin.generation);
    free(m);
}

const dp_model_config *dp_model_config_of(const dp_model *m) { return &m->cfg; }

dp_device *dp_model_device(const dp_model *m) { return m->dev; }

dp_model_origin *dp_model_origin_of(dp_model *m) { return &m->origin; }

void dp_model_release_activations(dp_model *m) {
    for (int64_t l = 0; l < m->cfg.layers; l++) dp_model_block_release(m, l, 1);
    dp_tensor *all[] = {&m->embedded, &m->final_out, &m->final_mean, &m->final_rstd, &m->logits, &m->loss_lse};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dp_tensor_release(all[i]);
    memset(&m->ids, 0, sizeof m->ids);
    memset(&m->targets, 0, sizeof m->targets);
    m->have_forward = 0;
    m->forward_id = 0;
}

uint64_t dp_model_forward_id(const dp_model *m) { return m->have_forward ? m->forward_id : 0; }

const dp_tensor *dp_model_logits(const dp_model *m) {
    return m->have_forward && m->logits.alloc.live ? &m->logits : NULL;
}

/* the LM head as a linear: V x d, no bias; wte when tied */
static dp_linear head_linear(const dp_model *m) {
    dp_linear lin = {0};
    lin.w = m->head ? m->head : m->wte;
    lin.in = m->d;
    lin.out = m->V;
    lin.module = m->head_module;
    return lin;
}

/* The head's logits (B x T x V, `activations`) from the final norm's output. */
static int head_forward(dp_model *m) {
    dp_linear head = head_linear(m);
    DP_TRY(dp_model_act(m, &m->logits, m->V, DP_CAT_ACTIVATIONS, m->head_module));
    return dp_linear_forward(m, &head, &m->final_out, &m->logits, NULL);
}

/* ---- forward --------------------------------------------------------------------------- */

/* A batch is B x T with B <= cfg.batch and T <= cfg.seq_len: a physical batch padded to its
 * longest sample is shorter than the model's longest (the memory is that of its own T). */
static int check_batch(const dp_model *m, const dp_tensor *t, const char *what) {
    const int64_t T = m->cfg.seq_len;
    if (t->dev != m->dev)
        return dp_error_set(DP_EINVAL, "model forward: %s live on %s, the model on %s", what,
                            dp_device_kind_name(t->dev ? t->dev->kind : DP_DEV_CPU), dp_device_kind_name(m->dev->kind));
    if (t->dtype != DP_I32 || t->ndim != 2 || t->shape[1] < 1 || t->shape[1] > T || t->shape[0] < 1 ||
        t->shape[0] > m->cfg.batch)
        return dp_error_set(DP_EINVAL,
                            "model forward: %s must be i32 B x T with 1 <= B <= %lld (batch) and 1 <= T <= %lld "
                            "(seq_len)",
                            what, (long long)m->cfg.batch, (long long)T);
    return DP_OK;
}

/* Token ids index the tables, so every one must lie in [0, V): on every device, before any
 * kernel reads a table with them (a GPU kernel would read out of bounds). Device ids are copied
 * to the host first (B T int32: one small synchronising copy per forward); plan ids hold no
 * values. */
static int check_ids(dp_model *m, const dp_tensor *t, const char *what, int targets) {
    const int64_t B = t->shape[0], T = t->shape[1];
    if (targets)
        for (int64_t i = 0; i < B; i++) m->target_count[i] = T; /* plan: no values, every target counts */
    if (!t->data || t->numel == 0) return DP_OK;
    const int32_t *ids = t->data;
    int32_t *host = NULL;
    if (t->dev->kind != DP_DEV_CPU) {
        host = malloc((size_t)t->numel * sizeof *host);
        if (!host) return dp_error_set(DP_EOOM, "model forward: out of host memory to check the %s", what);
        int rc = dp_tensor_to_host(t, host, (uint64_t)t->numel * sizeof *host);
        if (rc != DP_OK) {
            free(host);
            return rc;
        }
        ids = host;
    }
    int rc = DP_OK;
    for (int64_t i = 0; i < t->numel; i++)
        if (targets && ids[i] == DP_IGNORE_INDEX) {
            m->target_count[i / T]--;
        } else if (ids[i] < 0 || ids[i] >= m->cfg.vocab) {
            rc = dp_error_set(DP_EINVAL,
                              "model forward: %s hold token %d at sample %lld position %lld, outside the "
                              "vocabulary [0, %lld)%s",
                              what, (int)ids[i], (long long)(i / T), (long long)(i % T), (long long)m->cfg.vocab,
                              targets ? " (or -100, ignored: a pad)" : "");
            break;
        }
    free(host);
    return rc;
}

static int forward_body(dp_model *m, float *loss, float *sample_losses) {
    const int64_t d = m->d, T = m->T, B = m->B, N = B * T;

    DP_TRY(dp_model_act(m, &m->embedded, d, DP_CAT_ACTIVATIONS, dp_model_block_output_module(m, -1, m->embed_module)));
    DP_TRY(dp_model_acquire_block(m, DP_MODEL_EMBEDDINGS)); /* fsdp: the tables whole for the lookup alone */
    int erc = dp_layer_embedding_forward(&m->embedded, &m->ids, &m->wte->value, m->wpe ? &m->wpe->value : NULL, T);
    dp_model_unacquire_block(m, DP_MODEL_EMBEDDINGS);
    DP_TRY(erc);
    for (int64_t l = 0; l < m->cfg.layers; l++) {
        DP_TRY(dp_model_acquire_block(m, l));
        int rc = dp_model_block_forward(m, l, 0);
        dp_model_unacquire_block(m, l);
        DP_TRY(rc);
        if (dp_model_checkpointed(m, l)) dp_model_block_release(m, l, 0); /* its input is what it keeps */
    }
    const dp_tensor *x = dp_model_block_output(m, m->cfg.layers - 1);
    const uint32_t fm = m->final_norm.module;
    DP_TRY(dp_model_act(m, &m->final_out, d, DP_CAT_ACTIVATIONS, fm));
    if (m->final_norm.b) DP_TRY(dp_model_stat(m, &m->final_mean, 0, DP_CAT_ACTIVATIONS, fm));
    DP_TRY(dp_model_stat(m, &m->final_rstd, 0, DP_CAT_ACTIVATIONS, fm));
    DP_TRY(dp_model_acquire_block(m, DP_MODEL_HEAD)); /* the final norm and the head, for the logits */
    int hrc = dp_norm_forward(m, &m->final_norm, x, &m->final_out, &m->final_mean, &m->final_rstd);
    if (hrc == DP_OK) hrc = head_forward(m);
    dp_model_unacquire_block(m, DP_MODEL_HEAD);
    DP_TRY(hrc);

    /* the fused loss: per-token losses live only until they reach the host */
    dp_tensor losses;
    DP_TRY(dp_model_stat(m, &m->loss_lse, 0, DP_CAT_ACTIVATIONS, m->loss_module));
    DP_TRY(dp_model_stat(m, &losses, 0, DP_CAT_ACTIVATIONS, m->loss_module));
    int rc = dp_layer_cross_entropy_forward(&losses, &m->loss_lse, &m->logits, &m->targets);
    if (m->dev->kind == DP_DEV_PLAN) { /* no values: losses are 0, and no B x T host buffer is made */
        dp_tensor_release(&losses);
        if (sample_losses) memset(sample_losses, 0, (size_t)B * sizeof *sample_losses);
        *loss = 0.0f;
        return rc;
    }
    float *host = rc == DP_OK ? malloc((size_t)N * sizeof *host) : NULL;
    if (rc == DP_OK && !host)
        rc = dp_error_set(DP_EOOM, "model forward: out of host memory for %lld losses", (long long)N);
    if (rc == DP_OK) rc = dp_tensor_to_host(&losses, host, (uint64_t)N * sizeof *host);
    dp_tensor_release(&losses);
    if (rc == DP_OK) {
        double total = 0;
        for (int64_t i = 0; i < B; i++) {
            double s = 0; /* an ignored target's loss is 0: the mean is over the sample's own tokens */
            for (int64_t t = 0; t < T; t++) s += host[i * T + t];
            s = m->target_count[i] > 0 ? s / (double)m->target_count[i] : 0.0;
            if (sample_losses) sample_losses[i] = (float)s;
            total += s;
        }
        *loss = (float)(total / (double)B);
    }
    free(host);
    return rc;
}

int dp_model_forward(dp_model *m, const dp_tensor *inputs, const dp_tensor *targets, float *loss,
                     float *sample_losses) {
    DP_TRY(check_batch(m, inputs, "inputs"));
    DP_TRY(check_batch(m, targets, "targets"));
    if (inputs->shape[0] != targets->shape[0] || inputs->shape[1] != targets->shape[1])
        return dp_error_set(DP_EINVAL, "model forward: inputs are %lld x %lld, targets %lld x %lld",
                            (long long)inputs->shape[0], (long long)inputs->shape[1], (long long)targets->shape[0],
                            (long long)targets->shape[1]);
    DP_TRY(check_ids(m, inputs, "inputs", 0));
    DP_TRY(check_ids(m, targets, "targets", 1));
    if (!m->block_weights.acquire)
        for (int i = 0; i < m->n_params; i++)
            if (m->params[i].part.alloc.live)
                return dp_error_set(DP_EINVAL,
                                    "model forward: '%s' is held in parts (the model was built with parts = "
                                    "{world_size = %lld, rank = %lld}): distribute it with fsdp first",
                                    m->params[i].name, (long long)m->cfg.parts_world, (long long)m->cfg.parts_rank);
    dp_model_release_activations(m);
    m->B = inputs->shape[0];
    m->T = inputs->shape[1];
    DP_TRY(dp_tensor_view(&m->ids, inputs, 0, 2, inputs->shape));
    DP_TRY(dp_tensor_view(&m->targets, targets, 0, 2, targets->shape));
    float dummy;
    int rc = forward_body(m, loss ? loss : &dummy, sample_losses);
    if (rc != DP_OK) {
        dp_model_release_activations(m);
        return rc;
    }
    m->have_forward = 1;
    m->forward_id = ++m->forwards_run;
    return DP_OK;
}

/* ---- backward -------------------------------------------------------------------------- */

/* After a held block's block_end: what its backward would have freed as it went (its activations
 * and its input, unless retained; recomputed ones in any case). */
static void release_held_block(const dp_bw *block, int64_t l) {
    dp_model *m = block->m;
    if (!block->retain || block->recomputed) dp_model_block_release(m, l, 0);
    if (!block->retain) dp_tensor_release(dp_model_block_input(m, l));
}

static int backward_body(const dp_bw *bw, const float *sample_scale) {
    dp_model *m = bw->m;
    const int64_t d = m->d, T = m->T, B = m->B;
    dp_tensor scale = {0}, dfinal = {0}, dres = {0};
    float *host = NULL;
    int rc, head_held = 0;
#define TRY(expr)                                                                                                      \
    if ((rc = (expr)) != DP_OK) goto done

    /* the loss: the logits (recomputed after a retained backward) become their gradient in
     * place, row n scaled by s_i / n_i for its sample i (the 1/n_i of the mean over the n_i
     * targets that are not ignored; an ignored row's gradient is 0); the final norm and the head
     * are asked for once, for the recompute, the head's backward and the final norm's */
    TRY(dp_model_acquire_block(m, DP_MODEL_HEAD));
    head_held = 1;
    if (!m->logits.alloc.live) TRY(head_forward(m));
    host = malloc((size_t)B * sizeof *host);
    if (!host) TRY(dp_error_set(DP_EOOM, "model backward: out of host memory"));
    for (int64_t i = 0; i < B; i++)
        host[i] = m->target_count[i] > 0
                      ? (sample_scale ? sample_scale[i] : 1.0f / (float)B) / (float)m->target_count[i]
                      : 0.0f;
    int64_t nb = B;
    TRY(dp_tensor_init_module(&scale, m->dev, DP_F32, 1, &nb, DP_CAT_TEMP, m->loss_module));
    TRY(dp_tensor_from_host(&scale, host, (uint64_t)B * sizeof *host));
    TRY(dp_layer_cross_entropy_backward(&m->logits, &m->loss_lse, &m->targets, &scale, T));
    dp_tensor_release(&scale);
    dp_bw_done(bw, &m->loss_lse);

    /* the head; its N x V buffer goes as soon as it has been used, or to the hooks that keep the
     * head's output gradient (they adopt it: no copy) */
    dp_linear head = head_linear(m);
    TRY(dp_model_act(m, &dfinal, d, DP_CAT_TEMP, m->head_module));
    TRY(dp_bw_out_grad_held(bw, &head, &m->logits));
    TRY(dp_linear_backward(bw, &head, &m->final_out, &m->logits, &dfinal, 0, NULL));
    TRY(dp_bw_out_grad_done(bw, &head, &m->logits));
    dp_bw_done(bw, &m->final_out);

    /* the final norm, then the blocks in reverse; dres carries the residual stream's gradient; a
     * checkpointed block is recomputed first and frees what it recomputed as it goes */
    const int64_t L = m->cfg.layers;
    dp_tensor *x = dp_model_block_output(m, L - 1);
    TRY(dp_model_act(m, &dres, d, DP_CAT_TEMP, m->final_norm.module));
    TRY(dp_norm_backward(bw, &m->final_norm, x, &m->final_mean, &m->final_rstd, &dfinal, &dres, 0));
    dp_tensor_release(&dfinal);
    const dp_layer_hooks *hk = bw->hooks;
    if (hk && hk->block_end) TRY(hk->block_end(hk->ctx, m, DP_MODEL_HEAD)); /* the head and final norm are done */
    dp_model_unacquire_block(m, DP_MODEL_HEAD);
    head_held = 0;
    dp_bw_done(bw, &m->final_mean);
    dp_bw_done(bw, &m->final_rstd);
    dp_bw_done(bw, x);
    for (int64_t l = L - 1; l >= 0; l--) {
        dp_bw block = *bw;
        block.recomputed = dp_model_checkpointed(m, l);
        block.hold = hk && hk->block_end;  /* the block's activations kept until its block_end */
        TRY(dp_model_acquire_block(m, l)); /* one acquire serves the recompute and the backward */
        if (block.recomputed) rc = dp_model_recompute(m, l);
        if (rc == DP_OK) rc = dp_model_block_backward(&block, l, &dres);
        if (rc == DP_OK && block.hold) rc = hk->block_end(hk->ctx, m, l);
        if (block.hold) release_held_block(&block, l);
        dp_model_unacquire_block(m, l);
        TRY(rc);
    }

    /* the embeddings: their gradient is a scatter of dres, which reads no weights (not asked for) */
    if (hk && hk->embedding && m->wte->trainable) TRY(hk->embedding(hk->ctx, m, m->wte, &m->ids, &dres));
    if (hk && hk->position && m->wpe && m->wpe->trainable) TRY(hk->position(hk->ctx, m, m->wpe, &dres));
    dp_tensor *dwte = dp_bw_grad(bw, m->wte, &rc);
    TRY(rc);
    dp_tensor *dwpe = dp_bw_grad(bw, m->wpe, &rc);
    TRY(rc);
    TRY(dp_layer_embedding_backward(&dres, &m->ids, dwte, dwpe, T));
#undef TRY
done:
    if (head_held) dp_model_unacquire_block(m, DP_MODEL_HEAD);
    free(host);
    dp_tensor_release(&scale);
    dp_tensor_release(&dfinal);
    dp_tensor_release(&dres);
    return rc;
}

int dp_model_backward(dp_model *m, const dp_backward_opts *opts) {
    if (!m->have_forward)
        return dp_error_set(DP_EINVAL, "model backward: no saved activations (run forward first; a second "
                                       "backward needs retain = 1 in the first)");
    dp_bw bw = {m, opts ? opts->hooks : NULL, opts ? opts->weight_grads : 1, opts ? opts->retain : 0, 0, 0};
    int rc = backward_body(&bw, opts ? opts->sample_scale : NULL);
    if (!bw.retain || rc != DP_OK) dp_model_release_activations(m);
    return rc;
}
