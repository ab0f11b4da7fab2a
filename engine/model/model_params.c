/* model_params.c: the parameters of a model, in Hugging Face's names, order and (out x in)
 * memory layout, with their initialisation, gradients and bf16 compute copies; and the pure
 * queries on the configuration and the layer structures that the architectures' blocks ask (which
 * blocks are checkpointed, the module a block's output is charged to), so that model_gpt.c and
 * model_llama.c never call back into model_blocks.c or model_checkpoint.c. */
#include "model_internal.h"

#include "error.h"
#include "scope.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t dp_model_module(const char *fmt, ...) {
    char path[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    return dp_module_intern(path);
}

/* ---- building ------------------------------------------------------------------------- */

typedef struct builder {
    dp_model *m;
    int cap;
    int rc;
} builder;

/* FNV-1a of the name: each parameter's Philox stream */
static uint64_t name_stream(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int fail_module(uint32_t module) {
    return module == UINT32_MAX ? dp_error_set(DP_EOOM, "model: out of host memory for module paths") : DP_OK;
}

/* What a parameter is stored in: bf16 only in a bf16 model when frozen or without masters. */
static dp_dtype param_dtype(const dp_model *m, const dp_param *p) {
    return m->t == DP_BF16 && (!p->trainable || !m->cfg.master_weights) ? DP_BF16 : DP_F32;
}

/* Adds parameter `name` (rows x cols; cols 0 for a vector) under module, initialised for its
 * kind (std: the normal's standard deviation for weights). NULL after the first failure. */
static dp_param *add(builder *bd, const char *name, dp_param_kind kind, int64_t rows, int64_t cols, uint32_t module,
                     float std) {
    dp_model *m = bd->m;
    if (bd->rc != DP_OK) return NULL;
    if ((bd->rc = fail_module(module)) != DP_OK) return NULL;
    if (m->n_params >= bd->cap) {
        bd->rc = dp_error_set(DP_EINTERNAL, "model: parameter table overflow at '%s'", name);
        return NULL;
    }
    dp_param *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    if ((size_t)snprintf(p->name, sizeof p->name, "%s", name) >= sizeof p->name) {
        bd->rc = dp_error_set(DP_EINVAL, "model: parameter name '%s' is too long", name);
        return NULL;
    }
    p->kind = kind;
    p->module = module;
    p->trainable = m->cfg.lora_rank > 0 ? (kind == DP_PARAM_LORA_A || kind == DP_PARAM_LORA_B) : 1;
    int64_t shape[2] = {rows, cols};
    if ((bd->rc = dp_tensor_init_module(&p->value, m->dev, param_dtype(m, p), cols ? 2 : 1, shape, DP_CAT_PARAMETERS,
                                        module)) != DP_OK)
        return NULL;
    m->n_params++;
    uint64_t seed = m->cfg.seed, stream = name_stream(name);
    switch (kind) {
    case DP_PARAM_NORM_W: bd->rc = dp_tensor_fill(&p->value, 1.0); break;
    case DP_PARAM_NORM_B:
    case DP_PARAM_LINEAR_B:
    case DP_PARAM_LORA_B: bd->rc = dp_tensor_fill(&p->value, 0.0); break;
    case DP_PARAM_LORA_A: {
        float bound = 1.0f / sqrtf((float)cols); /* kaiming_uniform(a = sqrt(5)) over fan_in = cols */
        bd->rc = dp_tensor_rand(&p->value, DP_RAND_UNIFORM, -bound, bound, seed, stream);
        break;
    }
    default: bd->rc = dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0.0f, std, seed, stream); break;
    }
    /* built in parts: this tensor whole only until its part is cut, before the next is made */
    if (bd->rc == DP_OK && dp_model_config_parted(&m->cfg))
        bd->rc = dp_param_cut(p, m->cfg.parts_world, m->cfg.parts_rank);
    return bd->rc == DP_OK ? p : NULL;
}

/* A linear (and its adapter when the config targets it). hf: the HF module name. */
static void add_linear(builder *bd, dp_linear *lin, const char *hf, const char *path, int64_t in, int64_t out, int bias,
                       int hf_transposed, unsigned lora_bit, float std) {
    dp_model *m = bd->m;
    char name[128];
    lin->in = in;
    lin->out = out;
    lin->module = dp_module_intern(path);
    snprintf(name, sizeof name, "%s.weight", hf);
    lin->w = add(bd, name, DP_PARAM_LINEAR_W, out, in, lin->module, std);
    if (lin->w) lin->w->hf_transposed = hf_transposed;
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", hf);
        lin->b = add(bd, name, DP_PARAM_LINEAR_B, out, 0, lin->module, 0);
    }
    if (m->cfg.lora_rank > 0 && (m->cfg.lora_targets & lora_bit)) {
        const int64_t r = m->cfg.lora_rank;
        lin->lora_module = dp_model_module("%s.lora_a", path);
        snprintf(name, sizeof name, "%s.lora_A.weight", hf);
        lin->lora_a = add(bd, name, DP_PARAM_LORA_A, r, in, lin->lora_module, 0);
        snprintf(name, sizeof name, "%s.lora_B.weight", hf);
        lin->lora_b = add(bd, name, DP_PARAM_LORA_B, out, r, dp_model_module("%s.lora_b", path), 0);
    }
}

static void add_norm(builder *bd, dp_norm *nm, const char *hf, const char *path, int bias) {
    char name[128];
    nm->module = dp_module_intern(path);
    snprintf(name, sizeof name, "%s.weight", hf);
    nm->w = add(bd, name, DP_PARAM_NORM_W, bd->m->d, 0, nm->module, 0);
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", hf);
        nm->b = add(bd, name, DP_PARAM_NORM_B, bd->m->d, 0, nm->module, 0);
    }
}

static void build_gpt(builder *bd) {
    dp_model *m = bd->m;
    const int64_t d = m->d, F = m->F, L = m->cfg.layers;
    const float std = m->cfg.init_std, resid_std = std / sqrtf(2.0f * (float)L);
    char hf[96], path[96];
    m->embed_module = dp_module_intern("wte");
    m->wpe_module = dp_module_intern("wpe");
    m->wte = add(bd, "transformer.wte.weight", DP_PARAM_EMBEDDING, m->V, d, m->embed_module, std);
    m->wpe = add(bd, "transformer.wpe.weight", DP_PARAM_POSITION, m->cfg.max_positions, d, m->wpe_module, std);
    for (int64_t i = 0; i < L && bd->rc == DP_OK; i++) {
        gpt_block *b = &m->gpt[i];
#define NAMES(h, p)                                                                                                    \
    (snprintf(hf, sizeof hf, "transformer.h.%lld.%s", (long long)i, h),                                                \
     snprintf(path, sizeof path, "layers.%lld.%s", (long long)i, p))
        NAMES("ln_1", "ln_1"), add_norm(bd, &b->ln_1, hf, path, 1);
        NAMES("attn.c_attn", "attn.qkv"), add_linear(bd, &b->qkv, hf, path, d, 3 * d, 1, 1, DP_LORA_QKV, std);
        NAMES("attn.c_proj", "attn.proj"), add_linear(bd, &b->proj, hf, path, d, d, 1, 1, DP_LORA_PROJ, resid_std);
        NAMES("ln_2", "ln_2"), add_norm(bd, &b->ln_2, hf, path, 1);
        NAMES("mlp.c_fc", "mlp.fc"), add_linear(bd, &b->fc, hf, path, d, F, 1, 1, DP_LORA_FC, std);
        NAMES("mlp.c_proj", "mlp.proj"), add_linear(bd, &b->fc_proj, hf, path, F, d, 1, 1, DP_LORA_DOWN, resid_std);
#undef NAMES
        b->core_module = dp_model_module("layers.%lld.attn.core", (long long)i);
        if (bd->rc == DP_OK) bd->rc = fail_module(b->core_module);
        b->module = dp_model_module("layers.%lld", (long long)i);
        if (bd->rc == DP_OK) bd->rc = fail_module(b->module);
    }
    add_norm(bd, &m->final_norm, "transformer.ln_f", "ln_f", 1);
    m->head_module = dp_module_intern("lm_head");
    if (!m->cfg.tie_head) m->head = add(bd, "lm_head.weight", DP_PARAM_HEAD, m->V, d, m->head_module, std);
}

static void build_llama(builder *bd) {
    dp_model *m = bd->m;
    const int64_t d = m->d, F = m->F, L = m->cfg.layers, dq = m->H * m->hd, dkv = m->Hkv * m->hd;
    const float std = m->cfg.init_std;
    char hf[96], path[96];
    m->embed_module = dp_module_intern("embed");
    m->wte = add(bd, "model.embed_tokens.weight", DP_PARAM_EMBEDDING, m->V, d, m->embed_module, std);
    for (int64_t i = 0; i < L && bd->rc == DP_OK; i++) {
        llama_block *b = &m->llama[i];
#define NAMES(h, p)                                                                                                    \
    (snprintf(hf, sizeof hf, "model.layers.%lld.%s", (long long)i, h),                                                 \
     snprintf(path, sizeof path, "layers.%lld.%s", (long long)i, p))
        /* Hugging Face's order: attention, MLP, then the two norms */
        NAMES("self_attn.q_proj", "attn.q"), add_linear(bd, &b->q, hf, path, d, dq, 0, 0, DP_LORA_Q, std);
        NAMES("self_attn.k_proj", "attn.k"), add_linear(bd, &b->k, hf, path, d, dkv, 0, 0, DP_LORA_K, std);
        NAMES("self_attn.v_proj", "attn.v"), add_linear(bd, &b->v, hf, path, d, dkv, 0, 0, DP_LORA_V, std);
        NAMES("self_attn.o_proj", "attn.o"), add_linear(bd, &b->o, hf, path, dq, d, 0, 0, DP_LORA_O, std);
        NAMES("mlp.gate_proj", "mlp.gate"), add_linear(bd, &b->gate, hf, path, d, F, 0, 0, DP_LORA_GATE, std);
        NAMES("mlp.up_proj", "mlp.up"), add_linear(bd, &b->up, hf, path, d, F, 0, 0, DP_LORA_UP, std);
        NAMES("mlp.down_proj", "mlp.down"), add_linear(bd, &b->down, hf, path, F, d, 0, 0, DP_LORA_DOWN, std);
        NAMES("input_layernorm", "input_norm"), add_norm(bd, &b->input_norm, hf, path, 0);
        NAMES("post_attention_layernorm", "post_norm"), add_norm(bd, &b->post_norm, hf, path, 0);
#undef NAMES
        b->core_module = dp_model_module("layers.%lld.attn.core", (long long)i);
        if (bd->rc == DP_OK) bd->rc = fail_module(b->core_module);
        b->module = dp_model_module("layers.%lld", (long long)i);
        if (bd->rc == DP_OK) bd->rc = fail_module(b->module);
    }
    add_norm(bd, &m->final_norm, "model.norm", "norm", 0);
    m->head_module = dp_module_intern("lm_head");
    if (!m->cfg.tie_head) m->head = add(bd, "lm_head.weight", DP_PARAM_HEAD, m->V, d, m->head_module, std);
}

/* the weights a GEMM reads: bf16 copies of the f32 masters in bf16 mode */
static int needs_compute_copy(const dp_model *m, const dp_param *p) {
    if (m->t != DP_BF16 || p->value.dtype != DP_F32) return 0;
    switch (p->kind) {
    case DP_PARAM_LINEAR_W:
    case DP_PARAM_LORA_A:
    case DP_PARAM_LORA_B:
    case DP_PARAM_HEAD: return 1;
    case DP_PARAM_EMBEDDING: return m->head == NULL; /* the tied head */
    default: return 0;
    }
}

int dp_model_build_params(dp_model *m) {
    const int64_t L = m->cfg.layers;
    builder bd = {m, (int)(4 + L * 24), DP_OK};
    if (L > 100000) return dp_error_set(DP_EINVAL, "model: 'layers' %lld is too many", (long long)L);
    m->params = calloc((size_t)bd.cap, sizeof *m->params);
    if (m->cfg.arch == DP_ARCH_GPT) {
        m->gpt = calloc((size_t)L, sizeof *m->gpt);
        m->gpt_acts = calloc((size_t)L, sizeof *m->gpt_acts);
    } else {
        m->llama = calloc((size_t)L, sizeof *m->llama);
        m->llama_acts = calloc((size_t)L, sizeof *m->llama_acts);
    }
    if (!m->params || !(m->gpt || m->llama) || !(m->gpt_acts || m->llama_acts))
        return dp_error_set(DP_EOOM, "model: out of host memory for %lld layers", (long long)L);
    if (m->cfg.arch == DP_ARCH_GPT)
        build_gpt(&bd);
    else
        build_llama(&bd);
    m->loss_module = dp_module_intern("loss");
    if (bd.rc == DP_OK) bd.rc = fail_module(m->loss_module);
    if (bd.rc == DP_OK) bd.rc = fail_module(m->head_module);
    for (int i = 0; i < m->n_params && bd.rc == DP_OK; i++) {
        dp_param *p = &m->params[i];
        p->compute_copy = needs_compute_copy(m, p);
        if (p->compute_copy && p->part.alloc.live) { /* a part's copy: shape only, gathered per pass (fsdp) */
            p->compute.dev = m->dev;
            p->compute.dtype = DP_BF16;
            p->compute.ndim = p->value.ndim;
            p->compute.numel = p->value.numel;
            memcpy(p->compute.shape, p->value.shape, sizeof p->compute.shape);
        }
        if (!p->compute_copy || p->part.alloc.live) continue;
        bd.rc = dp_tensor_init_module(&p->compute, m->dev, DP_BF16, p->value.ndim, p->value.shape, DP_CAT_PARAMETERS,
                                      p->module);
        if (bd.rc == DP_OK) bd.rc = dp_tensor_copy(&p->compute, &p->value);
    }
    return bd.rc;
}

void dp_model_free_params(dp_model *m) {
    for (int i = 0; i < m->n_params; i++) {
        dp_tensor_release(&m->params[i].grad);
        dp_tensor_release(&m->params[i].compute);
        dp_tensor_release(&m->params[i].part);
        dp_tensor_release(&m->params[i].value);
    }
    free(m->params);
    free(m->gpt);
    free(m->llama);
    free(m->gpt_acts);
    free(m->llama_acts);
    m->params = NULL;
    m->n_params = 0;
}

/* ---- the public parameter API ---------------------------------------------------------- */

int dp_model_param_count(const dp_model *m) { return m->n_params; }

dp_param *dp_model_param(dp_model *m, int i) { return i >= 0 && i < m->n_params ? &m->params[i] : NULL; }

dp_param *dp_model_param_named(dp_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

int64_t dp_model_num_params(const dp_model *m, int trainable_only) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        if (!trainable_only || m->params[i].trainable) n += m->params[i].value.numel;
    return n;
}

int dp_model_zero_grad(dp_model *m, int set_to_none) {
    for (int i = 0; i < m->n_params; i++) {
        dp_tensor *g = &m->params[i].grad;
        if (!g->alloc.live) continue;
        if (set_to_none)
            dp_tensor_release(g);
        else
            DP_TRY(dp_tensor_fill(g, 0.0));
    }
    return DP_OK;
}

int dp_model_sync_compute_weights(dp_model *m) {
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].compute.alloc.live) DP_TRY(dp_tensor_copy(&m->params[i].compute, &m->params[i].value));
    return DP_OK;
}

const dp_tensor *dp_model_gemm_weight(const dp_param *p) { return p->compute.alloc.live ? &p->compute : &p->value; }

/* ---- pure queries of the configuration and the layer structures ---------------------------- */

int dp_model_checkpointed(const dp_model *m, int64_t layer) {
    const int64_t n = m->cfg.checkpoint;
    return n > 0 && layer >= 0 && layer < m->cfg.layers && layer % n == 0;
}

uint32_t dp_model_block_output_module(const dp_model *m, int layer, uint32_t own) {
    if (!dp_model_checkpointed(m, layer + 1)) return own;
    return m->gpt ? m->gpt[layer + 1].module : m->llama[layer + 1].module;
}
