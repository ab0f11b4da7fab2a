/* model_config.c: defaults and validation of a model configuration. */
#include "model.h"

#include "error.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned bits;
} lora_names[] = {{"qkv", DP_LORA_QKV},    {"proj", DP_LORA_PROJ},      {"fc", DP_LORA_FC},
                  {"down", DP_LORA_DOWN},  {"q_proj", DP_LORA_Q},       {"k_proj", DP_LORA_K},
                  {"v_proj", DP_LORA_V},   {"o_proj", DP_LORA_O},       {"gate_proj", DP_LORA_GATE},
                  {"up_proj", DP_LORA_UP}, {"down_proj", DP_LORA_DOWN}, {"c_attn", DP_LORA_QKV},
                  {"c_fc", DP_LORA_FC}};
#define N_LORA_NAMES (sizeof lora_names / sizeof *lora_names)

void dp_model_config_default(dp_model_config *cfg, dp_arch arch) {
    memset(cfg, 0, sizeof *cfg);
    cfg->arch = arch;
    cfg->mlp_ratio = arch == DP_ARCH_LLAMA ? 8.0 / 3.0 : 4.0;
    cfg->tie_head = arch == DP_ARCH_GPT;
    cfg->dtype = DP_F32;
    cfg->master_weights = 1;
    cfg->norm_eps = 1e-5f;
    cfg->rope_theta = 10000.0f;
    dp_rope_scaling_default(&cfg->rope);
    cfg->init_std = 0.02f;
    cfg->lora_alpha = 0;
}

const char *dp_arch_name(dp_arch arch) {
    switch (arch) {
    case DP_ARCH_GPT: return "gpt";
    case DP_ARCH_LLAMA: return "llama";
    }
    return "?";
}

int dp_arch_parse(const char *name, dp_arch *out) {
    if (strcmp(name, "gpt") == 0)
        *out = DP_ARCH_GPT;
    else if (strcmp(name, "llama") == 0)
        *out = DP_ARCH_LLAMA;
    else
        return -1;
    return 0;
}

int dp_lora_target_parse(const char *name, unsigned *bits) {
    for (size_t i = 0; name && i < N_LORA_NAMES; i++)
        if (strcmp(name, lora_names[i].name) == 0) {
            *bits = lora_names[i].bits;
            return 0;
        }
    return -1;
}

const char *dp_lora_target_name(dp_arch arch, unsigned bit) {
    static const char *const llama[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    static const char *const gpt[7] = {"qkv", NULL, NULL, "proj", "fc", NULL, "down"};
    for (unsigned i = 0; i < 7; i++)
        if (bit == 1u << i) return arch == DP_ARCH_GPT ? gpt[i] : llama[i];
    return NULL;
}

int64_t dp_model_config_ffn(const dp_model_config *cfg) {
    if (cfg->ffn > 0) return cfg->ffn;
    double w = cfg->mlp_ratio * (double)cfg->hidden;
    if (cfg->arch == DP_ARCH_LLAMA) return (int64_t)ceil(w / 64.0 - 1e-9) * 64;
    return (int64_t)llround(w);
}

static int positive(int64_t v, const char *key) {
    if (v > 0) return DP_OK;
    return dp_error_set(DP_EINVAL, "model: '%s' must be a positive integer (got %lld)", key, (long long)v);
}

/* heads, kv_heads, head_dim: gpt's fused qkv has H heads of hidden / H for q, k and v alike;
 * llama's H query heads are groups of kv_heads key/value heads, of width head_dim (even: the
 * rotary pairs). */
static int check_heads(const dp_model_config *cfg) {
    const long long H = cfg->heads, kv = cfg->kv_heads, hd = cfg->head_dim;
    if (kv < 0) return dp_error_set(DP_EINVAL, "model: 'kv_heads' must be positive, or 0 for 'heads' (got %lld)", kv);
    if (hd < 0)
        return dp_error_set(DP_EINVAL, "model: 'head_dim' must be positive, or 0 for hidden / heads (got %lld)", hd);
    if (hd == 0 && cfg->hidden % cfg->heads)
        return dp_error_set(DP_EINVAL, "model: 'heads' (%lld) must divide 'hidden' (%lld), or give 'head_dim'", H,
                            (long long)cfg->hidden);
    const long long width = hd ? hd : (long long)(cfg->hidden / cfg->heads);
    if (cfg->arch == DP_ARCH_GPT) {
        if (kv && kv != H)
            return dp_error_set(DP_EINVAL,
                                "model: 'kv_heads' (%lld) must equal 'heads' (%lld) for gpt (its fused qkv has one "
                                "key/value head per query head; grouped-query attention is llama's)",
                                kv, H);
        if (hd && hd * H != cfg->hidden)
            return dp_error_set(DP_EINVAL, "model: 'head_dim' (%lld) must be 'hidden' / 'heads' = %lld for gpt", hd,
                                (long long)(cfg->hidden / cfg->heads));
        return DP_OK;
    }
    if (kv && (kv > H || H % kv))
        return dp_error_set(DP_EINVAL,
                            "model: 'heads' (%lld) must be a multiple of 'kv_heads' (%lld): each key/value head "
                            "serves a group of query heads",
                            H, kv);
    if (width % 2)
        return dp_error_set(DP_EINVAL, "model: llama's rotary embeddings need an even head dimension (got %lld)",
                            width);
    if (width > 1 << 20 || H * width > (long long)1 << 30)
        return dp_error_set(DP_EINVAL, "model: 'heads' x head dimension (%lld x %lld) is too large", H, width);
    return DP_OK;
}

int dp_model_checkpoint_check(int checkpoint, int64_t layers) {
    if (checkpoint < 0)
        return dp_error_set(DP_EINVAL,
                            "model: 'checkpoint' must be off (0), every block (1) or every N-th block (N >= 1), got %d",
                            checkpoint);
    if (checkpoint > layers) /* past the last block: it says something the model cannot do */
        return dp_error_set(DP_EINVAL,
                            "model: 'checkpoint' %d is more than the model's %lld layers (valid: false, \"blocks\" or "
                            "N in 1..%lld, every N-th block)",
                            checkpoint, (long long)layers, (long long)layers);
    return DP_OK;
}

int dp_model_config_check(const dp_model_config *cfg) {
    if (cfg->arch != DP_ARCH_GPT && cfg->arch != DP_ARCH_LLAMA)
        return dp_error_set(DP_EINVAL, "model: unknown 'arch' %d (valid: gpt, llama)", (int)cfg->arch);
    DP_TRY(positive(cfg->vocab, "vocab"));
    DP_TRY(positive(cfg->hidden, "hidden"));
    DP_TRY(positive(cfg->layers, "layers"));
    if (cfg->layers > DP_MODEL_MAX_LAYERS)
        return dp_error_set(DP_EINVAL, "model: 'layers' %lld is too many (at most %d)", (long long)cfg->layers,
                            DP_MODEL_MAX_LAYERS);
    DP_TRY(positive(cfg->heads, "heads"));
    DP_TRY(positive(cfg->seq_len, "seq_len"));
    DP_TRY(positive(cfg->batch, "batch"));
    if (cfg->vocab > INT32_MAX)
        return dp_error_set(DP_EINVAL, "model: 'vocab' %lld does not fit token ids (i32)", (long long)cfg->vocab);
    DP_TRY(check_heads(cfg));
    if (cfg->ffn < 0) return dp_error_set(DP_EINVAL, "model: 'ffn' must be positive (got %lld)", (long long)cfg->ffn);
    if (cfg->ffn == 0 && !(cfg->mlp_ratio > 0 && isfinite(cfg->mlp_ratio)))
        return dp_error_set(DP_EINVAL, "model: 'mlp_ratio' must be a positive number (got %g)", cfg->mlp_ratio);
    if (dp_model_config_ffn(cfg) <= 0)
        return dp_error_set(DP_EINVAL, "model: 'mlp_ratio' %g gives an empty MLP for 'hidden' %lld", cfg->mlp_ratio,
                            (long long)cfg->hidden);
    if (cfg->max_positions < 0 || (cfg->max_positions > 0 && cfg->max_positions < cfg->seq_len))
        return dp_error_set(DP_EINVAL,
                            "model: 'max_positions' (%lld) must be at least 'seq_len' (%lld), or 0 for seq_len",
                            (long long)cfg->max_positions, (long long)cfg->seq_len);
    if (cfg->dtype != DP_F32 && cfg->dtype != DP_BF16)
        return dp_error_set(DP_EINVAL, "model: 'dtype' must be f32 or bf16 (got %s)", dp_dtype_name(cfg->dtype));
    if (!cfg->master_weights && cfg->dtype != DP_BF16)
        return dp_error_set(DP_EINVAL, "model: 'master_weights' = false needs dtype bf16 (an f32 model's weights are "
                                       "their own masters)");
    if (!(cfg->norm_eps > 0 && isfinite(cfg->norm_eps)))
        return dp_error_set(DP_EINVAL, "model: 'norm_eps' must be a positive number (got %g)", (double)cfg->norm_eps);
    if (cfg->arch == DP_ARCH_LLAMA && !(cfg->rope_theta > 0 && isfinite(cfg->rope_theta)))
        return dp_error_set(DP_EINVAL, "model: 'rope_theta' must be a positive number (got %g)",
                            (double)cfg->rope_theta);
    DP_TRY(dp_rope_scaling_check(cfg));
    if (!(cfg->init_std >= 0 && isfinite(cfg->init_std)))
        return dp_error_set(DP_EINVAL, "model: 'init_std' must be a non-negative number (got %g)",
                            (double)cfg->init_std);
    DP_TRY(dp_model_checkpoint_check(cfg->checkpoint, cfg->layers));
    if (cfg->parts_world < 0 || cfg->parts_world > (1 << 20) || cfg->parts_rank < 0 ||
        (cfg->parts_world > 1 ? cfg->parts_rank >= cfg->parts_world : cfg->parts_rank != 0))
        return dp_error_set(DP_EINVAL,
                            "model: 'parts' must be {world_size = N, rank = r} with 1 <= N <= %d and 0 <= r < N "
                            "(got world_size %lld, rank %lld)",
                            1 << 20, (long long)cfg->parts_world, (long long)cfg->parts_rank);
    if (cfg->lora_rank < 0)
        return dp_error_set(DP_EINVAL, "model: 'lora.rank' must be positive (got %d)", cfg->lora_rank);
    if (cfg->lora_rank > 0) {
        const unsigned t = cfg->lora_targets;
        if (t == 0 || (t & ~(unsigned)DP_LORA_ALL))
            return dp_error_set(DP_EINVAL, "model: 'lora.targets' must name at least one of " DP_LORA_TARGET_NAMES);
        if (cfg->arch == DP_ARCH_GPT && (((t & DP_LORA_QKV) && (t & DP_LORA_QKV) != DP_LORA_QKV) ||
                                         ((t & DP_LORA_FC) && (t & DP_LORA_FC) != DP_LORA_FC)))
            return dp_error_set(DP_EINVAL, "model: gpt's attn.c_attn computes q, k and v in one linear, and its "
                                           "mlp.c_fc is one linear: target qkv (c_attn) and fc (c_fc) whole");
        if (!(cfg->lora_alpha > 0 && isfinite(cfg->lora_alpha)))
            return dp_error_set(DP_EINVAL, "model: 'lora.alpha' must be a positive number (got %g)",
                                (double)cfg->lora_alpha);
    }
    return DP_OK;
}
