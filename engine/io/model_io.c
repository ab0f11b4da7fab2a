/* model_io.c: Hugging Face checkpoints in and out (config.json + safetensors, PEFT adapters).
 * See model_io.h for the files; HF's names and layouts are in /work/shared/NOTES.md. */
#include "model_io.h"

#include "error.h"
#include "peft_targets.h"
#include "safe_file.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PEFT_PREFIX "base_model.model."

void dp_model_load_opts_default(dp_model_load_opts *opts) {
    memset(opts, 0, sizeof *opts);
    opts->dtype = DP_F32;
    opts->master_weights = 1;
}

/* ---- small file helpers ------------------------------------------------------------------- */

static int join(char *out, size_t n, const char *dir, const char *name) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n)
        return dp_error_set(DP_EINVAL, "path too long: %s/%s", dir, name);
    return DP_OK;
}

/* Whether anything is at path: a file, a link (dangling too), a directory, a device. What is
 * there but is no regular file is then refused by the reader naming what it is, rather than
 * taken for absent. */
static int name_taken(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Reads a whole text file into a NUL-terminated malloc'd buffer: a regular file only (never a
 * FIFO or device planted under the name), at most DPFILE_MAX_READ bytes. */
static int read_text(const char *path, char **out) {
    char why[1024];
    if (dpfile_read(path, DPFILE_MAX_READ, out, NULL, why, sizeof why) != 0)
        return dp_error_set(errno == ENOMEM ? DP_EOOM : DP_EIO, "%s", why);
    return DP_OK;
}

/* Where a parse stopped: its line and column (1-based) in text. */
static void text_position(const char *text, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *c = text; c < at && *c; c++) {
        if (*c == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* The first number of the tree under j that is not finite (1e999 parses as inf), with the key
 * it is under ("?" for an array element), or NULL. */
static const cJSON *non_finite(const cJSON *j, const char **key) {
    for (const cJSON *e = j ? j->child : NULL; e; e = e->next) {
        if (cJSON_IsNumber(e) && !isfinite(e->valuedouble)) {
            *key = e->string ? e->string : (j->string ? j->string : "?");
            return e;
        }
        const cJSON *in = non_finite(e, key);
        if (in) return in;
    }
    return NULL;
}

static int read_json(const char *path, cJSON **out) {
    char *text;
    DP_TRY(read_text(path, &text));
    const char *end = NULL;
    *out = cJSON_ParseWithOpts(text, &end, 1);
    if (!*out) {
        int line, col;
        const char *at = end ? end : text;
        text_position(text, at, &line, &col);
        char near[24];
        size_t k = 0;
        for (; k + 1 < sizeof near && at[k] && at[k] != '\n'; k++) near[k] = at[k] >= 32 && at[k] < 127 ? at[k] : '?';
        near[k] = 0;
        int word = strncmp(at, "NaN", 3) == 0 || strncmp(at, "Infinity", 8) == 0 || strncmp(at, "-Infinity", 9) == 0;
        free(text);
        return dp_error_set(DP_EINVAL, "%s: invalid JSON at line %d, column %d (near '%s')%s", path, line, col, near,
                            word ? ": JSON has no NaN or Infinity, every number must be finite" : "");
    }
    free(text);
    const char *key = NULL;
    const cJSON *bad = cJSON_IsObject(*out) ? non_finite(*out, &key) : NULL;
    int rc = DP_OK;
    if (!cJSON_IsObject(*out))
        rc = dp_error_set(DP_EINVAL, "%s: the top level is not a JSON object ({...})", path);
    else if (bad)
        rc = dp_error_set(DP_EINVAL, "%s: '%s' is %s, out of the range of a double: every number must be finite", path,
                          key, bad->valuedouble > 0 ? "a number above 1.8e308" : "a number below -1.8e308");
    if (rc != DP_OK) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}

/* Writes text and a newline to path through a unique temporary renamed over it; never through a
 * link at path, never over anything but a regular file (common/safe_file). */
static int write_text(const char *path, const char *text) {
    dpfile_writer w;
    char why[1024];
    if (dpfile_writer_open(&w, path, why, sizeof why) != 0) return dp_error_set(DP_EIO, "%s", why);
    size_t n = strlen(text);
    if (fwrite(text, 1, n, w.fp) != n || fputc('\n', w.fp) == EOF) {
        dpfile_writer_abort(&w);
        return dp_error_set(DP_EIO, "%s: write failed: %s", path, strerror(errno));
    }
    if (dpfile_writer_commit(&w, why, sizeof why) != 0) return dp_error_set(DP_EIO, "%s", why);
    return DP_OK;
}

/* ---- config.json: reading ----------------------------------------------------------------- */

/* A positive integer key; absent is an error when required, else *out is kept. */
static int cfg_int(const char *path, const cJSON *root, const char *key, int required, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return dp_error_set(DP_EINVAL, "%s: missing '%s'", path, key);
        return DP_OK;
    }
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || !(d >= 1.0) || d > 9007199254740992.0 || floor(d) != d)
        return dp_error_set(DP_EINVAL, "%s: '%s' must be a positive integer", path, key);
    *out = (int64_t)d;
    return DP_OK;
}

/* A positive number key (eps, theta, std); absent keeps *out. */
static int cfg_num(const char *path, const cJSON *root, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DP_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0) || isinf(v->valuedouble))
        return dp_error_set(DP_EINVAL, "%s: '%s' must be a positive number", path, key);
    *out = (float)v->valuedouble;
    return DP_OK;
}

/* A boolean key; absent keeps *out. */
static int cfg_bool(const char *path, const cJSON *root, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DP_OK;
    if (!cJSON_IsBool(v)) return dp_error_set(DP_EINVAL, "%s: '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return DP_OK;
}

/* A string key; absent (or null) gives def. */
static int cfg_str(const char *path, const cJSON *root, const char *key, const char *def, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = def;
    if (!v || cJSON_IsNull(v)) return DP_OK;
    if (!cJSON_IsString(v)) return dp_error_set(DP_EINVAL, "%s: '%s' must be a string", path, key);
    *out = v->valuestring;
    return DP_OK;
}

/* GPT2Config: n_embd, n_layer, n_head, n_positions, n_inner, layer_norm_epsilon, ... */
static int read_gpt2(const char *path, const cJSON *root, dp_model_config *cfg) {
    dp_model_config_default(cfg, DP_ARCH_GPT);
    DP_TRY(cfg_int(path, root, "vocab_size", 1, &cfg->vocab));
    DP_TRY(cfg_int(path, root, "n_embd", 1, &cfg->hidden));
    DP_TRY(cfg_int(path, root, "n_layer", 1, &cfg->layers));
    DP_TRY(cfg_int(path, root, "n_head", 1, &cfg->heads));
    int64_t positions = 0;
    DP_TRY(cfg_int(path, root, "n_ctx", 0, &positions));
    DP_TRY(cfg_int(path, root, "n_positions", positions == 0, &positions));
    cfg->max_positions = positions;
    cfg->ffn = 4 * cfg->hidden; /* n_inner: null means 4 n_embd */
    DP_TRY(cfg_int(path, root, "n_inner", 0, &cfg->ffn));
    cfg->norm_eps = 1e-5f;
    DP_TRY(cfg_num(path, root, "layer_norm_epsilon", &cfg->norm_eps));
    DP_TRY(cfg_num(path, root, "initializer_range", &cfg->init_std));
    cfg->tie_head = 1;
    DP_TRY(cfg_bool(path, root, "tie_word_embeddings", &cfg->tie_head));

    const char *act;
    DP_TRY(cfg_str(path, root, "activation_function", "gelu_new", &act));
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return dp_error_set(DP_ENOTSUP,
                            "%s: activation_function '%s' is not supported (dpprof's GPT uses the "
                            "tanh GELU: gelu_new or gelu_pytorch_tanh)",
                            path, act);
    int scale_weights = 1, by_layer = 0;
    DP_TRY(cfg_bool(path, root, "scale_attn_weights", &scale_weights));
    DP_TRY(cfg_bool(path, root, "scale_attn_by_inverse_layer_idx", &by_layer));
    if (!scale_weights || by_layer)
        return dp_error_set(DP_ENOTSUP,
                            "%s: attention scaling other than 1/sqrt(head_dim) is not supported "
                            "(scale_attn_weights must be true, scale_attn_by_inverse_layer_idx false)",
                            path);
    return DP_OK;
}

/* A number key of a rope object, when present: positive (or >= 0 when zero_ok). */
static int rope_num(const char *path, const cJSON *o, const char *where, const char *key, int zero_ok, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return DP_OK;
    if (!cJSON_IsNumber(v) || !(zero_ok ? v->valuedouble >= 0.0 : v->valuedouble > 0.0) || isinf(v->valuedouble))
        return dp_error_set(DP_EINVAL, "%s: '%s.%s' must be a %s number", path, where, key,
                            zero_ok ? "non-negative" : "positive");
    *out = v->valuedouble;
    return DP_OK;
}

/* The rotary embedding as transformers 5 reads it: the parameters from `rope_scaling` (older
 * files; it wins when both are given, as in transformers' convert_rope_params_to_dict) or
 * `rope_parameters`, the base from their rope_theta or the top-level one, the type from
 * rope_type (or the older "type"), original_max_position_embeddings from the top level, the
 * object, or max_position_embeddings, in that order (standardize_rope_params). */
static int read_rope(const char *path, const cJSON *root, int64_t max_positions, dp_model_config *cfg) {
    dp_rope_scaling *r = &cfg->rope;
    dp_rope_scaling_default(r);
    DP_TRY(cfg_num(path, root, "rope_theta", &cfg->rope_theta));
    const char *where = "rope_scaling";
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, where);
    if (!o || cJSON_IsNull(o) || (cJSON_IsObject(o) && !o->child)) {
        where = "rope_parameters";
        o = cJSON_GetObjectItemCaseSensitive(root, where);
    }
    if (!o || cJSON_IsNull(o)) return DP_OK;
    if (!cJSON_IsObject(o)) return dp_error_set(DP_EINVAL, "%s: '%s' must be an object", path, where);
    DP_TRY(cfg_num(path, o, "rope_theta", &cfg->rope_theta));
    const char *legacy, *type;
    DP_TRY(cfg_str(path, o, "type", "default", &legacy));
    DP_TRY(cfg_str(path, o, "rope_type", legacy, &type));
    if (dp_rope_type_parse(type, &r->type) != 0)
        return dp_error_set(
            DP_ENOTSUP, "%s: rope type '%s' is not supported (supported: default, linear, llama3, yarn)", path, type);
    double prf = 1.0;
    DP_TRY(rope_num(path, o, where, "partial_rotary_factor", 0, &prf));
    if (prf != 1.0)
        return dp_error_set(DP_ENOTSUP,
                            "%s: '%s.partial_rotary_factor' %g is not supported (dpprof rotates whole heads)", path,
                            where, prf);
    if (r->type == DP_ROPE_DEFAULT) return DP_OK;
    double orig = (double)max_positions;
    DP_TRY(rope_num(path, o, where, "original_max_position_embeddings", 0, &orig));
    DP_TRY(rope_num(path, root, "config", "original_max_position_embeddings", 0, &orig));
    r->original_max_positions = (int64_t)orig;
    r->factor = 0.0;
    DP_TRY(rope_num(path, o, where, "factor", 0, &r->factor));
    if (r->factor == 0.0 && r->type == DP_ROPE_YARN && orig > 0) r->factor = (double)max_positions / orig;
    if (r->factor == 0.0) return dp_error_set(DP_EINVAL, "%s: rope type '%s' needs '%s.factor'", path, type, where);
    DP_TRY(rope_num(path, o, where, "low_freq_factor", 0, &r->low_freq_factor));
    DP_TRY(rope_num(path, o, where, "high_freq_factor", 0, &r->high_freq_factor));
    DP_TRY(rope_num(path, o, where, "beta_fast", 0, &r->beta_fast));
    DP_TRY(rope_num(path, o, where, "beta_slow", 0, &r->beta_slow));
    DP_TRY(rope_num(path, o, where, "mscale", 1, &r->mscale));
    DP_TRY(rope_num(path, o, where, "mscale_all_dim", 1, &r->mscale_all_dim));
    DP_TRY(rope_num(path, o, where, "attention_factor", 1, &r->attention_factor));
    DP_TRY(cfg_bool(path, o, "truncate", &r->truncate));
    if (r->type == DP_ROPE_LLAMA3 && (r->low_freq_factor == 0.0 || r->high_freq_factor == 0.0))
        return dp_error_set(DP_EINVAL, "%s: rope type 'llama3' needs '%s.low_freq_factor' and 'high_freq_factor'", path,
                            where);
    return DP_OK;
}

/* LlamaConfig: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, ... */
static int read_llama(const char *path, const cJSON *root, dp_model_config *cfg) {
    dp_model_config_default(cfg, DP_ARCH_LLAMA);
    DP_TRY(cfg_int(path, root, "vocab_size", 1, &cfg->vocab));
    DP_TRY(cfg_int(path, root, "hidden_size", 1, &cfg->hidden));
    DP_TRY(cfg_int(path, root, "intermediate_size", 1, &cfg->ffn));
    DP_TRY(cfg_int(path, root, "num_hidden_layers", 1, &cfg->layers));
    DP_TRY(cfg_int(path, root, "num_attention_heads", 1, &cfg->heads));
    int64_t positions = 0;
    cfg->kv_heads = cfg->heads; /* LlamaConfig: num_key_value_heads None means num_attention_heads */
    DP_TRY(cfg_int(path, root, "num_key_value_heads", 0, &cfg->kv_heads));
    if (cfg->heads % cfg->kv_heads)
        return dp_error_set(DP_EINVAL,
                            "%s: num_attention_heads (%lld) must be a multiple of num_key_value_heads (%lld): each "
                            "key/value head serves a group of query heads",
                            path, (long long)cfg->heads, (long long)cfg->kv_heads);
    DP_TRY(cfg_int(path, root, "head_dim", 0, &cfg->head_dim));
    DP_TRY(cfg_int(path, root, "max_position_embeddings", 0, &positions));
    cfg->max_positions = positions;
    cfg->norm_eps = 1e-6f; /* LlamaConfig's default */
    DP_TRY(cfg_num(path, root, "rms_norm_eps", &cfg->norm_eps));
    cfg->rope_theta = 10000.0f;
    DP_TRY(read_rope(path, root, positions, cfg));
    DP_TRY(cfg_num(path, root, "initializer_range", &cfg->init_std));

    const char *act;
    DP_TRY(cfg_str(path, root, "hidden_act", "silu", &act));
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return dp_error_set(DP_ENOTSUP, "%s: hidden_act '%s' is not supported (dpprof's llama uses SwiGLU: silu)", path,
                            act);
    int attention_bias = 0, mlp_bias = 0;
    DP_TRY(cfg_bool(path, root, "attention_bias", &attention_bias));
    DP_TRY(cfg_bool(path, root, "mlp_bias", &mlp_bias));
    if (attention_bias || mlp_bias)
        return dp_error_set(DP_ENOTSUP, "%s: biases in llama linears (attention_bias, mlp_bias) are not supported",
                            path);
    cfg->tie_head = 0; /* LlamaConfig's default; Llama-3.2-1B/3B tie the head to embed_tokens */
    DP_TRY(cfg_bool(path, root, "tie_word_embeddings", &cfg->tie_head));
    return DP_OK;
}

int dp_model_config_read(const char *dir, dp_model_config *cfg) {
    char path[4096];
    DP_TRY(join(path, sizeof path, dir, "config.json"));
    cJSON *root;
    DP_TRY(read_json(path, &root));
    const char *type;
    int rc = cfg_str(path, root, "model_type", NULL, &type);
    if (rc == DP_OK) {
        if (!type)
            rc = dp_error_set(DP_EINVAL, "%s: missing 'model_type' (valid: gpt2, llama)", path);
        else if (strcmp(type, "gpt2") == 0)
            rc = read_gpt2(path, root, cfg);
        else if (strcmp(type, "llama") == 0)
            rc = read_llama(path, root, cfg);
        else
            rc = dp_error_set(DP_ENOTSUP, "%s: model_type '%s' is not supported (valid: gpt2, llama)", path, type);
    }
    cJSON_Delete(root);
    return rc;
}

/* ---- config.json: writing ----------------------------------------------------------------- */

/* The shortest decimal that reads back as f (so 1e-5f is written 1e-05, not 9.99999975e-06). */
static double short_decimal(float f) {
    char buf[40];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

static int is_lora(const dp_param *p) { return p->kind == DP_PARAM_LORA_A || p->kind == DP_PARAM_LORA_B; }

/* rope_scaling as transformers reads it (null for the default rope). */
static cJSON *rope_json(const dp_rope_scaling *r) {
    if (r->type == DP_ROPE_DEFAULT) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "rope_type", dp_rope_type_name(r->type));
    cJSON_AddNumberToObject(o, "factor", r->factor);
    if (r->type == DP_ROPE_LINEAR) return o;
    cJSON_AddNumberToObject(o, "original_max_position_embeddings", (double)r->original_max_positions);
    if (r->type == DP_ROPE_LLAMA3) {
        cJSON_AddNumberToObject(o, "low_freq_factor", r->low_freq_factor);
        cJSON_AddNumberToObject(o, "high_freq_factor", r->high_freq_factor);
        return o;
    }
    cJSON_AddNumberToObject(o, "beta_fast", r->beta_fast);
    cJSON_AddNumberToObject(o, "beta_slow", r->beta_slow);
    if (r->mscale > 0) cJSON_AddNumberToObject(o, "mscale", r->mscale);
    if (r->mscale_all_dim > 0) cJSON_AddNumberToObject(o, "mscale_all_dim", r->mscale_all_dim);
    if (r->attention_factor > 0) cJSON_AddNumberToObject(o, "attention_factor", r->attention_factor);
    cJSON_AddBoolToObject(o, "truncate", r->truncate);
    return o;
}

/* Rows of the parameter named name (its value's first dimension), or 0 when absent. */
static int64_t rows_of(dp_model *m, const char *name) {
    dp_param *p = dp_model_param_named(m, name);
    return p ? p->value.shape[0] : 0;
}

static cJSON *config_json(dp_model *m) {
    const dp_model_config *c = dp_model_config_of(m);
    cJSON *j = cJSON_CreateObject();
    int gpt = c->arch == DP_ARCH_GPT;
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(gpt ? "GPT2LMHeadModel" : "LlamaForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", gpt ? "gpt2" : "llama");
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab);
    if (gpt) {
        int64_t positions = rows_of(m, "transformer.wpe.weight");
        cJSON_AddNumberToObject(j, "n_embd", (double)c->hidden);
        cJSON_AddNumberToObject(j, "n_layer", (double)c->layers);
        cJSON_AddNumberToObject(j, "n_head", (double)c->heads);
        cJSON_AddNumberToObject(j, "n_positions", (double)positions);
        cJSON_AddNumberToObject(j, "n_ctx", (double)positions);
        cJSON_AddNumberToObject(j, "n_inner", (double)rows_of(m, "transformer.h.0.mlp.c_fc.weight"));
        cJSON_AddStringToObject(j, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(j, "layer_norm_epsilon", short_decimal(c->norm_eps));
        cJSON_AddNumberToObject(j, "initializer_range", short_decimal(c->init_std));
        /* dpprof has no dropout: PyTorch in train() mode then computes what dpprof does */
        cJSON_AddNumberToObject(j, "resid_pdrop", 0.0);
        cJSON_AddNumberToObject(j, "embd_pdrop", 0.0);
        cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
        cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
        cJSON_AddBoolToObject(j, "scale_attn_by_inverse_layer_idx", 0);
        cJSON_AddBoolToObject(j, "reorder_and_upcast_attn", 0);
        cJSON_AddBoolToObject(j, "tie_word_embeddings", dp_model_param_named(m, "lm_head.weight") == NULL);
    } else {
        int64_t positions = c->max_positions > c->seq_len ? c->max_positions : c->seq_len;
        cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden);
        cJSON_AddNumberToObject(j, "intermediate_size", (double)rows_of(m, "model.layers.0.mlp.gate_proj.weight"));
        cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->layers);
        cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->heads);
        cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->kv_heads);
        cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
        cJSON_AddNumberToObject(j, "max_position_embeddings", (double)positions);
        cJSON_AddStringToObject(j, "hidden_act", "silu");
        cJSON_AddNumberToObject(j, "rms_norm_eps", short_decimal(c->norm_eps));
        cJSON_AddNumberToObject(j, "rope_theta", short_decimal(c->rope_theta));
        cJSON_AddItemToObject(j, "rope_scaling", rope_json(&c->rope));
        cJSON_AddBoolToObject(j, "attention_bias", 0);
        cJSON_AddBoolToObject(j, "mlp_bias", 0);
        cJSON_AddNumberToObject(j, "attention_dropout", 0.0);
        cJSON_AddNumberToObject(j, "initializer_range", short_decimal(c->init_std));
        cJSON_AddBoolToObject(j, "tie_word_embeddings", dp_model_param_named(m, "lm_head.weight") == NULL);
    }
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    return j;
}

/* ---- PEFT (LoRA adapters) ----------------------------------------------------------------- */

/* PEFT's key for a LoRA parameter: base_model.model.<linear>.lora_A.weight. */
static void peft_key(const dp_param *p, char *out, size_t n) { snprintf(out, n, PEFT_PREFIX "%s", p->name); }

/* Which DP_LORA_* target a linear's HF module name (e.g. "model.layers.3.self_attn.q_proj") is. */
static unsigned lora_target_of(dp_arch arch, const char *module) {
    static const struct {
        const char *suffix;
        unsigned target;
    } gpt[] = {{".attn.c_attn", DP_LORA_QKV},
               {".attn.c_proj", DP_LORA_PROJ},
               {".mlp.c_fc", DP_LORA_FC},
               {".mlp.c_proj", DP_LORA_DOWN}},
      llama[] = {{".self_attn.q_proj", DP_LORA_Q}, {".self_attn.k_proj", DP_LORA_K}, {".self_attn.v_proj", DP_LORA_V},
                 {".self_attn.o_proj", DP_LORA_O}, {".mlp.gate_proj", DP_LORA_GATE}, {".mlp.up_proj", DP_LORA_UP},
                 {".mlp.down_proj", DP_LORA_DOWN}};
    size_t len = strlen(module);
    size_t n = arch == DP_ARCH_GPT ? sizeof gpt / sizeof *gpt : sizeof llama / sizeof *llama;
    for (size_t i = 0; i < n; i++) {
        const char *s = arch == DP_ARCH_GPT ? gpt[i].suffix : llama[i].suffix;
        size_t sl = strlen(s);
        if (len >= sl && strcmp(module + len - sl, s) == 0)
            return arch == DP_ARCH_GPT ? gpt[i].target : llama[i].target;
    }
    return 0;
}

/* PEFT's target_modules: Llama's linear names are unique; GPT-2's c_proj names two linears, so a
 * regular expression (PEFT full-matches a string against each module's name) says which. */
static cJSON *peft_targets(dp_arch arch, unsigned targets) {
    if (arch == DP_ARCH_GPT) {
        char re[160] = ".*\\.(";
        const char *alt[4] = {"attn\\.c_attn", "attn\\.c_proj", "mlp\\.c_fc", "mlp\\.c_proj"};
        const unsigned group[4] = {DP_LORA_QKV, DP_LORA_PROJ, DP_LORA_FC, DP_LORA_DOWN};
        int first = 1;
        for (int i = 0; i < 4; i++)
            if (targets & group[i]) {
                strcat(re, first ? "" : "|");
                strcat(re, alt[i]);
                first = 0;
            }
        strcat(re, ")");
        return cJSON_CreateString(re);
    }
    cJSON *list = cJSON_CreateArray();
    for (unsigned bit = 1; bit <= DP_LORA_DOWN; bit <<= 1) /* PEFT's names, one per linear */
        if (targets & bit) cJSON_AddItemToArray(list, cJSON_CreateString(dp_lora_target_name(arch, bit)));
    return list;
}

static cJSON *adapter_config_json(dp_model *m) {
    const dp_model_config *c = dp_model_config_of(m);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "peft_type", "LORA");
    cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM");
    cJSON_AddNumberToObject(j, "r", (double)c->lora_rank);
    cJSON_AddNumberToObject(j, "lora_alpha", short_decimal(c->lora_alpha));
    cJSON_AddNumberToObject(j, "lora_dropout", 0.0);
    cJSON_AddStringToObject(j, "bias", "none");
    cJSON_AddBoolToObject(j, "fan_in_fan_out", c->arch == DP_ARCH_GPT); /* GPT-2's Conv1D base weights */
    cJSON_AddItemToObject(j, "target_modules", peft_targets(c->arch, c->lora_targets));
    cJSON_AddBoolToObject(j, "use_rslora", 0);
    cJSON_AddBoolToObject(j, "use_dora", 0);
    cJSON_AddBoolToObject(j, "inference_mode", 0);
    cJSON_AddNullToObject(j, "base_model_name_or_path");
    cJSON_AddNullToObject(j, "modules_to_save");
    return j;
}

/* ---- saving ------------------------------------------------------------------------------- */

typedef struct save_ctx {
    dp_model *m;
    dp_param **params; /* the entries' parameters, in order */
    float *scratch;    /* the largest transposed parameter */
} save_ctx;

/* Out x in (memory) to in x out (file), or a plain copy. */
static int get_param(void *vctx, int index, float *dst, int64_t numel) {
    save_ctx *ctx = vctx;
    const dp_param *p = ctx->params[index];
    if (!p->hf_transposed) return dp_tensor_to_host_f32(&p->value, dst, numel); /* bf16 values widen exactly */
    DP_TRY(dp_tensor_to_host_f32(&p->value, ctx->scratch, numel));
    int64_t rows = p->value.shape[0], cols = p->value.shape[1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = ctx->scratch[r * cols + c];
    return DP_OK;
}

/* Writes the parameters selecting lora (0: base, 1: adapters) to path. */
static int save_weights(dp_model *m, const char *path, int lora) {
    int n = dp_model_param_count(m), k = 0;
    dp_st_entry *entries = calloc((size_t)(n ? n : 1), sizeof *entries);
    dp_param **params = calloc((size_t)(n ? n : 1), sizeof *params);
    char(*keys)[160] = calloc((size_t)(n ? n : 1), sizeof *keys);
    int64_t scratch = 0;
    save_ctx ctx = {m, params, NULL};
    int rc = DP_OK;
    if (!entries || !params || !keys) {
        rc = dp_error_set(DP_EOOM, "%s: out of host memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        dp_param *p = dp_model_param(m, i);
        if (is_lora(p) != lora) continue;
        if (p->value.ndim > DP_ST_MAX_DIMS || (p->hf_transposed && p->value.ndim != 2)) {
            rc = dp_error_set(DP_EINTERNAL, "%s: parameter '%s' has an unexpected shape", path, p->name);
            goto done;
        }
        if (lora)
            peft_key(p, keys[k], sizeof keys[k]);
        else
            snprintf(keys[k], sizeof keys[k], "%s", p->name);
        dp_st_entry *e = &entries[k];
        e->name = keys[k];
        e->ndim = p->value.ndim;
        for (int d = 0; d < e->ndim; d++) e->shape[d] = p->value.shape[d];
        if (p->hf_transposed) {
            e->shape[0] = p->value.shape[1];
            e->shape[1] = p->value.shape[0];
            if (p->value.numel > scratch) scratch = p->value.numel;
        }
        e->get = get_param;
        e->ctx = &ctx;
        params[k++] = p;
    }
    if (scratch && !(ctx.scratch = malloc((size_t)scratch * sizeof(float)))) {
        rc = dp_error_set(DP_EOOM, "%s: out of host memory", path);
        goto done;
    }
    static const char *const metadata[] = {"format", "pt", NULL}; /* transformers requires it */
    rc = dp_st_write_f32(path, entries, k, metadata);
done:
    free(ctx.scratch);
    free(keys);
    free(params);
    free(entries);
    return rc;
}

static int write_json(const char *path, cJSON *j) {
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!text) return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    int rc = write_text(path, text);
    cJSON_free(text);
    return rc;
}

int dp_model_save(dp_model *m, const char *dir) {
    if (dp_model_device(m)->kind == DP_DEV_PLAN)
        return dp_error_set(DP_ENOTSUP, "%s: a model on the plan device has no values to save", dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return dp_error_set(DP_EIO, "%s: cannot create the directory: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return dp_error_set(DP_EIO, "%s: not a directory", dir);

    char path[4096];
    DP_TRY(join(path, sizeof path, dir, "config.json"));
    DP_TRY(write_json(path, config_json(m)));
    DP_TRY(join(path, sizeof path, dir, "model.safetensors"));
    DP_TRY(save_weights(m, path, 0));

    int lora = dp_model_config_of(m)->lora_rank > 0;
    DP_TRY(join(path, sizeof path, dir, "adapter_model.safetensors"));
    if (lora)
        DP_TRY(save_weights(m, path, 1));
    else if (unlink(path) != 0 && errno != ENOENT) /* stale adapters would be loaded with this model */
        return dp_error_set(DP_EIO, "%s: cannot remove: %s", path, strerror(errno));
    DP_TRY(join(path, sizeof path, dir, "adapter_config.json"));
    if (lora)
        DP_TRY(write_json(path, adapter_config_json(m)));
    else if (unlink(path) != 0 && errno != ENOENT)
        return dp_error_set(DP_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return DP_OK;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* The weight files of a checkpoint (one, or the shards of an index) and which tensors were used. */
typedef struct weight_files {
    int n;
    dp_st_file **files;
    unsigned char **used;
} weight_files;

static void weights_close(weight_files *w) {
    for (int i = 0; i < w->n; i++) {
        dp_st_close(w->files[i]);
        free(w->used[i]);
    }
    free(w->files);
    free(w->used);
    memset(w, 0, sizeof *w);
}

static int weights_add(weight_files *w, const char *path) {
    dp_st_file **files = realloc(w->files, (size_t)(w->n + 1) * sizeof *files);
    if (files) w->files = files;
    unsigned char **used = realloc(w->used, (size_t)(w->n + 1) * sizeof *used);
    if (used) w->used = used;
    if (!files || !used) return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    dp_st_file *f;
    DP_TRY(dp_st_open(path, &f));
    w->files[w->n] = f;
    w->used[w->n] = calloc((size_t)(dp_st_count(f) ? dp_st_count(f) : 1), 1);
    w->n++;
    if (!w->used[w->n - 1]) return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    return DP_OK;
}

/* A weight_map entry: its file name and its place in the map. */
typedef struct shard_ref {
    const char *file;
    size_t at;
} shard_ref;

static int by_file_then_place(const void *a, const void *b) {
    const shard_ref *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : (x->at < y->at ? -1 : x->at > y->at);
}

/* The distinct shard names of a checked weight_map in order of first appearance (a sort, not a
 * scan of the map per entry: maps have a hundred thousand entries). first[i] is 1 for entry i
 * when it is its file's first; *n gets the number of entries. */
static int first_appearances(const char *index, const cJSON *map, unsigned char **first, size_t *n) {
    size_t count = 0;
    for (const cJSON *e = map->child; e; e = e->next) count++;
    *n = count;
    shard_ref *refs = malloc((count ? count : 1) * sizeof *refs);
    *first = calloc(count ? count : 1, 1);
    if (!refs || !*first) {
        free(refs);
        free(*first);
        *first = NULL;
        return dp_error_set(DP_EOOM, "%s: out of host memory", index);
    }
    size_t i = 0;
    for (const cJSON *e = map->child; e; e = e->next, i++) refs[i] = (shard_ref){e->valuestring, i};
    qsort(refs, count, sizeof *refs, by_file_then_place);
    for (i = 0; i < count; i++)
        if (i == 0 || strcmp(refs[i - 1].file, refs[i].file) != 0) (*first)[refs[i].at] = 1;
    free(refs);
    return DP_OK;
}

/* Opens dir/<file> or, failing that, the shards listed by dir/<file>.index.json. On failure w
 * holds nothing. */
static int weights_open(const char *dir, const char *file, weight_files *w) {
    memset(w, 0, sizeof *w);
    char path[4096];
    DP_TRY(join(path, sizeof path, dir, file));
    if (name_taken(path)) {
        int rc = weights_add(w, path);
        if (rc != DP_OK) weights_close(w);
        return rc;
    }
    char index[4200];
    snprintf(index, sizeof index, "%s.index.json", path);
    if (!name_taken(index))
        return dp_error_set(DP_EIO, "%s: no weights (neither %s nor %s.index.json)", dir, file, file);
    cJSON *root;
    DP_TRY(read_json(index, &root));
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int rc = DP_OK;
    if (!cJSON_IsObject(map))
        rc = dp_error_set(DP_EINVAL, "%s: missing object 'weight_map'", index);
    else if (!map->child)
        rc = dp_error_set(DP_EINVAL,
                          "%s: 'weight_map' is empty (it must map each tensor name to its shard file, e.g. "
                          "\"model.norm.weight\": \"model-00001-of-00002.safetensors\")",
                          index);
    for (const cJSON *e = map ? map->child : NULL; e && rc == DP_OK; e = e->next)
        if (!cJSON_IsString(e) || !*e->valuestring || strchr(e->valuestring, '/') || strcmp(e->valuestring, ".") == 0 ||
            strcmp(e->valuestring, "..") == 0)
            rc = dp_error_set(DP_EINVAL, "%s: tensor '%s' maps to a bad file name", index, e->string);
    unsigned char *first = NULL;
    size_t n = 0;
    if (rc == DP_OK) rc = first_appearances(index, map, &first, &n);
    size_t i = 0; /* shards repeat across the map: open each once */
    for (const cJSON *e = map ? map->child : NULL; e && rc == DP_OK; e = e->next, i++) {
        if (!first[i]) continue;
        rc = join(path, sizeof path, dir, e->valuestring);
        if (rc == DP_OK) rc = weights_add(w, path);
    }
    free(first);
    cJSON_Delete(root);
    if (rc != DP_OK) weights_close(w);
    return rc;
}

/* The tensor named name in any of the files (marking it used), or NULL. */
static const dp_st_tensor *weights_find(weight_files *w, const char *name, dp_st_file **file) {
    for (int i = 0; i < w->n; i++) {
        const dp_st_tensor *t = dp_st_find(w->files[i], name);
        if (t) {
            w->used[i][t - dp_st_at(w->files[i], 0)] = 1;
            *file = w->files[i];
            return t;
        }
    }
    return NULL;
}

/* HF's buffers and duplicates that are not parameters of the model. */
static int ignorable(const dp_model_config *c, const char *name) {
    static const char *const suffixes[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        size_t sl = strlen(suffixes[i]);
        if (len >= sl && strcmp(name + len - sl, suffixes[i]) == 0) return 1;
    }
    return c->tie_head && strcmp(name, "lm_head.weight") == 0; /* tied: the embedding's copy */
}

/* Fails naming the first tensor of the files that nothing used. */
static int weights_check_all_used(const weight_files *w, const dp_model_config *c) {
    for (int i = 0; i < w->n; i++)
        for (int k = 0; k < dp_st_count(w->files[i]); k++) {
            const char *name = dp_st_at(w->files[i], k)->name;
            if (!w->used[i][k] && !ignorable(c, name))
                return dp_error_set(DP_EINVAL, "%s: unexpected tensor '%s' (not a parameter of this %s model)",
                                    dp_st_path(w->files[i]), name, c->arch == DP_ARCH_GPT ? "gpt2" : "llama");
        }
    return DP_OK;
}

/* Loads one parameter from the tensor key of the files (an alias without the base model's
 * prefix is tried too: HF saves bare GPT2Model / LlamaModel weights that way). */
static int load_param(weight_files *w, dp_param *p, const char *key, const char *prefix) {
    dp_st_file *f = NULL;
    const dp_st_tensor *t = weights_find(w, key, &f);
    size_t pl = strlen(prefix);
    if (!t && pl && strncmp(key, prefix, pl) == 0) t = weights_find(w, key + pl, &f);
    if (!t) return dp_error_set(DP_EINVAL, "%s: tensor '%s' is missing", w->n ? dp_st_path(w->files[0]) : "?", key);

    const dp_tensor *v = &p->value;
    int64_t want[2] = {v->ndim > 0 ? v->shape[0] : 0, v->ndim > 1 ? v->shape[1] : 0};
    if (p->hf_transposed) {
        want[0] = v->shape[1];
        want[1] = v->shape[0];
    }
    int ok = t->ndim == v->ndim && t->numel == v->numel;
    for (int d = 0; ok && d < v->ndim; d++) ok = t->shape[d] == (d < 2 ? want[d] : v->shape[d]);
    if (!ok) {
        char got[96] = "", exp[96] = "";
        for (int d = 0, a = 0, b = 0; d < t->ndim || d < v->ndim; d++) {
            if (d < t->ndim)
                a += snprintf(got + a, sizeof got - (size_t)a, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
            if (d < v->ndim)
                b += snprintf(exp + b, sizeof exp - (size_t)b, "%s%lld", d ? "x" : "",
                              (long long)(d < 2 ? want[d] : v->shape[d]));
            if (a >= 80 || b >= 80) break;
        }
        return dp_error_set(DP_EINVAL, "%s: tensor '%s' has shape [%s], the model's config needs [%s]", dp_st_path(f),
                            t->name, got, exp);
    }
    if (v->dev->kind == DP_DEV_PLAN) return DP_OK; /* no values: shapes are all there is */

    float *host = malloc((size_t)(v->numel ? v->numel : 1) * sizeof(float) * (p->hf_transposed ? 2 : 1));
    if (!host) return dp_error_set(DP_EOOM, "%s: out of host memory for '%s'", dp_st_path(f), t->name);
    int rc = dp_st_read_f32(f, t, host, t->numel);
    for (int64_t i = 0; rc == DP_OK && i < t->numel; i++)
        if (!isfinite(host[i]))
            rc = dp_error_set(DP_EINVAL, "%s: tensor '%s' holds a non-finite value (%g at element %lld): weights must "
                              "be finite",
                              dp_st_path(f), t->name, (double)host[i], (long long)i);
    float *src = host;
    if (rc == DP_OK && p->hf_transposed) { /* in x out (file) to out x in (memory) */
        float *dst = host + v->numel;
        int64_t rows = v->shape[0], cols = v->shape[1];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = host[c * rows + r];
        src = dst;
    }
    if (rc == DP_OK) rc = dp_tensor_from_host_f32(&p->value, src, v->numel); /* a bf16 parameter rounds once */
    free(host);
    return rc;
}

#define LORA_RANK_MAX (1 << 20)

/* A key that dpprof honours only when it is null or empty (an empty list or object): what it
 * says otherwise (train whole modules, skip some, replicate layers) dpprof does not model. */
static int adapter_unset(const char *path, const cJSON *root, const char *key, const char *what) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v) || ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child)) return DP_OK;
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v) && !cJSON_IsString(v))
        return dp_error_set(DP_EINVAL, "%s: '%s' must be null, a string or a list", path, key);
    return dp_error_set(DP_ENOTSUP, "%s: '%s' is not supported (%s); it must be null or empty", path, key, what);
}

/* layers_to_transform: null, a layer index or a list of them; dpprof adapts every block, so the
 * list must name them all. */
static int adapter_layers(const char *path, const cJSON *root, int64_t layers) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "layers_to_transform");
    if (!v || cJSON_IsNull(v)) return DP_OK;
    const cJSON *one = cJSON_IsNumber(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v))
        return dp_error_set(DP_EINVAL, "%s: 'layers_to_transform' must be null, a layer index or a list of them", path);
    unsigned char *seen = calloc((size_t)layers, 1);
    if (!seen) return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    int rc = DP_OK;
    int64_t n = 0;
    for (const cJSON *e = one ? one : v->child; e && rc == DP_OK; e = one ? NULL : e->next) {
        double d = e->valuedouble;
        if (!cJSON_IsNumber(e) || !(d >= 0) || d >= (double)layers || floor(d) != d)
            rc = dp_error_set(DP_EINVAL, "%s: 'layers_to_transform' holds %s, not a layer index (0..%lld)", path,
                              cJSON_IsNumber(e) ? "a number out of range" : "a value that is not a number",
                              (long long)layers - 1);
        else if (!seen[(int64_t)d]++)
            n++;
    }
    free(seen);
    if (rc == DP_OK && n != layers)
        rc = dp_error_set(DP_ENOTSUP,
                          "%s: 'layers_to_transform' adapts %lld of the %lld layers; dpprof adapts every layer (give "
                          "null)",
                          path, (long long)n, (long long)layers);
    return rc;
}

/* The PEFT keys of adapter_config.json that decide what the adapters are: rank, alpha, targets
 * and what dpprof does not model (refused naming the key). */
static int adapter_keys(const char *path, const cJSON *root, dp_model_config *cfg, unsigned *targets) {
    int64_t rank = 0;
    int rslora = 0, dora = 0, lora_bias = 0, fan_in_fan_out = cfg->arch == DP_ARCH_GPT;
    const char *type, *bias = "none";
    DP_TRY(cfg_str(path, root, "peft_type", "", &type));
    if (strcmp(type, "LORA") != 0)
        return dp_error_set(DP_ENOTSUP, "%s: peft_type '%s' is not supported (valid: LORA)", path, type);
    DP_TRY(cfg_int(path, root, "r", 1, &rank));
    if (rank > LORA_RANK_MAX)
        return dp_error_set(DP_EINVAL, "%s: 'r' must be an integer in 1..%d (got %lld)", path, LORA_RANK_MAX,
                            (long long)rank);
    float alpha = (float)rank;
    DP_TRY(cfg_num(path, root, "lora_alpha", &alpha));
    DP_TRY(cfg_bool(path, root, "use_rslora", &rslora));
    DP_TRY(cfg_bool(path, root, "use_dora", &dora));
    if (rslora || dora)
        return dp_error_set(DP_ENOTSUP, "%s: use_rslora and use_dora are not supported (plain LoRA, scale alpha/r)",
                            path);
    DP_TRY(cfg_str(path, root, "bias", "none", &bias));
    if (strcmp(bias, "none") != 0)
        return dp_error_set(DP_ENOTSUP, "%s: trained biases (bias != \"none\") are not supported", path);
    DP_TRY(cfg_bool(path, root, "lora_bias", &lora_bias));
    if (lora_bias) return dp_error_set(DP_ENOTSUP, "%s: lora_bias (a bias on lora_B) is not supported", path);
    /* fan_in_fan_out says the base weights are stored in x out: GPT-2's Conv1D, never Llama's
     * nn.Linear (PEFT resets a wrong value with a warning; a file that says otherwise was not
     * written for this model) */
    DP_TRY(cfg_bool(path, root, "fan_in_fan_out", &fan_in_fan_out));
    if (fan_in_fan_out != (cfg->arch == DP_ARCH_GPT))
        return dp_error_set(DP_EINVAL,
                            "%s: 'fan_in_fan_out' must be %s for %s (its linears are %s)", path,
                            cfg->arch == DP_ARCH_GPT ? "true" : "false", cfg->arch == DP_ARCH_GPT ? "gpt2" : "llama",
                            cfg->arch == DP_ARCH_GPT ? "Conv1D, stored in x out" : "nn.Linear, stored out x in");
    /* per-module ranks or alphas: one alpha/r for every adapter is all dpprof has, and a scale
     * read wrong would load without an error */
    static const char *const patterns[] = {"rank_pattern", "alpha_pattern"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, patterns[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsObject(v))
            return dp_error_set(DP_EINVAL, "%s: '%s' must be an object", path, patterns[i]);
        if (v && v->child)
            return dp_error_set(DP_ENOTSUP,
                                "%s: '%s' gives some modules their own %s; not supported (one r and lora_alpha for "
                                "every adapter)",
                                path, patterns[i], i ? "lora_alpha" : "rank");
    }
    DP_TRY(adapter_unset(path, root, "modules_to_save", "it trains whole copies of modules beside the adapters"));
    DP_TRY(adapter_unset(path, root, "exclude_modules", "dpprof adapts the targets in every block"));
    DP_TRY(adapter_unset(path, root, "layer_replication", "dpprof does not repeat layers"));
    DP_TRY(adapter_unset(path, root, "target_parameters", "LoRA on bare parameters"));
    DP_TRY(adapter_layers(path, root, cfg->layers));
    DP_TRY(dp_peft_targets(path, cJSON_GetObjectItemCaseSensitive(root, "target_modules"), cfg->arch, cfg->layers,
                           targets));
    cfg->lora_rank = (int)rank;
    cfg->lora_alpha = alpha;
    return DP_OK;
}

/* Reads adapter_config.json beside adapter_model.safetensors: rank, alpha and targets, the
 * targets checked against the adapter tensors the weights hold. *present is 0 when the
 * directory has neither file; one without the other is refused. */
static int read_adapter_config(const char *dir, dp_model_config *cfg, int *present) {
    char path[4096], weights[4096];
    *present = 0;
    DP_TRY(join(path, sizeof path, dir, "adapter_config.json"));
    DP_TRY(join(weights, sizeof weights, dir, "adapter_model.safetensors"));
    if (!name_taken(path)) {
        if (name_taken(weights))
            return dp_error_set(DP_EINVAL,
                                "%s: adapter_model.safetensors is there but adapter_config.json is not: the adapters' "
                                "rank, alpha and targets are unknown (add PEFT's adapter_config.json, or remove the "
                                "adapters to load the base model alone)",
                                dir);
        return DP_OK;
    }
    cJSON *root;
    DP_TRY(read_json(path, &root)); /* refuses a directory, a device or a dangling link by name */
    unsigned named = 0;
    int rc = adapter_keys(path, root, cfg, &named);
    cJSON_Delete(root);
    DP_TRY(rc);

    /* the targets the weights hold: they must be the ones target_modules selects */
    dp_st_file *f;
    DP_TRY(dp_st_open(weights, &f));
    unsigned targets = 0;
    const char *suffix = ".lora_A.weight";
    size_t pl = strlen(PEFT_PREFIX), sl = strlen(suffix);
    for (int i = 0; i < dp_st_count(f) && rc == DP_OK; i++) {
        const char *name = dp_st_at(f, i)->name;
        size_t len = strlen(name);
        if (len <= pl + sl || strcmp(name + len - sl, suffix) != 0) continue;
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)(len - pl - sl), name + pl);
        unsigned t = strncmp(name, PEFT_PREFIX, pl) == 0 ? lora_target_of(cfg->arch, module) : 0;
        if (!t) rc = dp_error_set(DP_ENOTSUP, "%s: adapter '%s' is on a linear dpprof cannot adapt", weights, name);
        targets |= t;
    }
    dp_st_close(f);
    DP_TRY(rc);
    if (!targets) return dp_error_set(DP_EINVAL, "%s: no lora_A weights", weights);
    if (targets != named) {
        char a[160], b[160];
        dp_peft_targets_text(cfg->arch, named, a, sizeof a);
        dp_peft_targets_text(cfg->arch, targets, b, sizeof b);
        return dp_error_set(DP_EINVAL, "%s: 'target_modules' selects %s but %s holds adapters on %s", path, a, weights,
                            b);
    }
    cfg->lora_targets = targets;
    *present = 1;
    return DP_OK;
}

/* Whether dir holds file or its shards' index. */
static int weights_present(const char *dir, const char *file) {
    char path[4096], index[4200];
    if (join(path, sizeof path, dir, file) != DP_OK) return 0;
    snprintf(index, sizeof index, "%s.index.json", path);
    return name_taken(path) || name_taken(index);
}

/* ---- the files' headers against the configuration, before anything is allocated ------------- */

/* One parameter cfg gives a model, as the files hold it: name, shape (in x out for GPT-2's
 * Conv1D weights), and whether it is a LoRA tensor and trained. */
typedef struct expected {
    const char *name;
    int ndim;
    int64_t shape[2];
    int lora, trainable;
} expected;

typedef int (*expect_fn)(void *ctx, const expected *e);

typedef struct expect_walk {
    const dp_model_config *c;
    expect_fn fn;
    void *ctx;
    int rc;
} expect_walk;

static void expect(expect_walk *w, const char *name, int64_t rows, int64_t cols, int lora) {
    if (w->rc != DP_OK) return;
    expected e = {name, cols ? 2 : 1, {rows, cols}, lora, w->c->lora_rank > 0 ? lora : 1};
    w->rc = w->fn(w->ctx, &e);
}

/* A linear of HF module hf (in x out in the file when transposed) and its adapters when targeted,
 * as model_params.c's add_linear makes them. */
static void expect_linear(expect_walk *w, const char *hf, int64_t in, int64_t out, int bias, int transposed,
                          unsigned bit) {
    char name[192];
    snprintf(name, sizeof name, "%s.weight", hf);
    expect(w, name, transposed ? in : out, transposed ? out : in, 0);
    if (bias) snprintf(name, sizeof name, "%s.bias", hf), expect(w, name, out, 0, 0);
    if (w->c->lora_rank > 0 && (w->c->lora_targets & bit)) {
        snprintf(name, sizeof name, PEFT_PREFIX "%s.lora_A.weight", hf);
        expect(w, name, w->c->lora_rank, in, 1);
        snprintf(name, sizeof name, PEFT_PREFIX "%s.lora_B.weight", hf);
        expect(w, name, out, w->c->lora_rank, 1);
    }
}

static void expect_norm(expect_walk *w, const char *hf, int bias) {
    char name[192];
    snprintf(name, sizeof name, "%s.weight", hf);
    expect(w, name, w->c->hidden, 0, 0);
    if (bias) snprintf(name, sizeof name, "%s.bias", hf), expect(w, name, w->c->hidden, 0, 0);
}

/* Calls fn for every parameter of the model c describes, in model_params.c's order and shapes
 * (the loader checks each loaded tensor against the model too: the two cannot drift apart
 * unnoticed). */
static int each_expected(const dp_model_config *c, expect_fn fn, void *ctx) {
    expect_walk w = {c, fn, ctx, DP_OK};
    const int64_t d = c->hidden, F = dp_model_config_ffn(c), V = c->vocab, L = c->layers;
    char hf[96];
    if (c->arch == DP_ARCH_GPT) {
        expect(&w, "transformer.wte.weight", V, d, 0);
        expect(&w, "transformer.wpe.weight", c->max_positions ? c->max_positions : c->seq_len, d, 0);
        for (int64_t i = 0; i < L && w.rc == DP_OK; i++) {
#define HF(x) (snprintf(hf, sizeof hf, "transformer.h.%lld.%s", (long long)i, x), hf)
            expect_norm(&w, HF("ln_1"), 1);
            expect_linear(&w, HF("attn.c_attn"), d, 3 * d, 1, 1, DP_LORA_QKV);
            expect_linear(&w, HF("attn.c_proj"), d, d, 1, 1, DP_LORA_PROJ);
            expect_norm(&w, HF("ln_2"), 1);
            expect_linear(&w, HF("mlp.c_fc"), d, F, 1, 1, DP_LORA_FC);
            expect_linear(&w, HF("mlp.c_proj"), F, d, 1, 1, DP_LORA_DOWN);
#undef HF
        }
        expect_norm(&w, "transformer.ln_f", 1);
    } else {
        const int64_t H = c->heads, Hkv = c->kv_heads > 0 ? c->kv_heads : H;
        const int64_t hd = c->head_dim > 0 ? c->head_dim : d / H, dq = H * hd, dkv = Hkv * hd;
        expect(&w, "model.embed_tokens.weight", V, d, 0);
        for (int64_t i = 0; i < L && w.rc == DP_OK; i++) {
#define HF(x) (snprintf(hf, sizeof hf, "model.layers.%lld.%s", (long long)i, x), hf)
            expect_linear(&w, HF("self_attn.q_proj"), d, dq, 0, 0, DP_LORA_Q);
            expect_linear(&w, HF("self_attn.k_proj"), d, dkv, 0, 0, DP_LORA_K);
            expect_linear(&w, HF("self_attn.v_proj"), d, dkv, 0, 0, DP_LORA_V);
            expect_linear(&w, HF("self_attn.o_proj"), dq, d, 0, 0, DP_LORA_O);
            expect_linear(&w, HF("mlp.gate_proj"), d, F, 0, 0, DP_LORA_GATE);
            expect_linear(&w, HF("mlp.up_proj"), d, F, 0, 0, DP_LORA_UP);
            expect_linear(&w, HF("mlp.down_proj"), F, d, 0, 0, DP_LORA_DOWN);
            expect_norm(&w, HF("input_layernorm"), 0);
            expect_norm(&w, HF("post_attention_layernorm"), 0);
#undef HF
        }
        expect_norm(&w, "model.norm", 0);
    }
    if (!c->tie_head) expect(&w, "lm_head.weight", V, d, 0);
    return w.rc;
}

/* What checking the headers needs: the open files (base and adapters), the base's alias prefix,
 * and the bytes the parameters will take. */
typedef struct header_check {
    weight_files *base, *adapters;
    const char *prefix;
    dp_dtype dtype;
    int master_weights;
    uint64_t bytes;
} header_check;

/* The tensor for e in its files (marking it used): present, of e's shape, of a readable dtype. */
static int check_header(void *vctx, const expected *e) {
    header_check *hc = vctx;
    int bf16_only = hc->dtype == DP_BF16 && (!e->trainable || !hc->master_weights);
    hc->bytes += (uint64_t)e->shape[0] * (uint64_t)(e->ndim > 1 ? e->shape[1] : 1) * (bf16_only ? 2u : 4u);
    weight_files *w = e->lora ? hc->adapters : hc->base;
    if (!w || !w->n) return DP_OK; /* the plan device without weights */
    dp_st_file *f = NULL;
    const dp_st_tensor *t = weights_find(w, e->name, &f);
    size_t pl = e->lora ? 0 : strlen(hc->prefix);
    if (!t && pl && strncmp(e->name, hc->prefix, pl) == 0) t = weights_find(w, e->name + pl, &f);
    if (!t) return dp_error_set(DP_EINVAL, "%s: tensor '%s' is missing", dp_st_path(w->files[0]), e->name);
    int ok = t->ndim == e->ndim;
    for (int k = 0; ok && k < e->ndim; k++) ok = t->shape[k] == e->shape[k];
    if (!ok) {
        char got[96] = "", want[64];
        for (int k = 0, a = 0; k < t->ndim && a < 80; k++)
            a += snprintf(got + a, sizeof got - (size_t)a, "%s%lld", k ? "x" : "", (long long)t->shape[k]);
        if (e->ndim > 1)
            snprintf(want, sizeof want, "%lldx%lld", (long long)e->shape[0], (long long)e->shape[1]);
        else
            snprintf(want, sizeof want, "%lld", (long long)e->shape[0]);
        return dp_error_set(DP_EINVAL, "%s: tensor '%s' has shape [%s], the model's config needs [%s]", dp_st_path(f),
                            t->name, got, want);
    }
    if (strcmp(t->dtype, "F32") != 0 && strcmp(t->dtype, "BF16") != 0 && strcmp(t->dtype, "F16") != 0)
        return dp_error_set(DP_ENOTSUP, "%s: tensor '%s' has dtype %s (readable: F32, BF16, F16)", dp_st_path(f),
                            t->name, t->dtype);
    return DP_OK;
}

/* The most a device can hold: its allocator's limit, else its memory (0: no figure). */
static uint64_t device_capacity(const dp_device *dev) {
    uint64_t limit = dp_mem_limit(dev->mem), total = dev->info.total_memory;
    return limit && (!total || limit < total) ? limit : total;
}

/* Checks every tensor header of the files against cfg (names, shapes, dtypes, nothing unknown)
 * and the parameters' bytes against dev's memory, before anything is allocated: a config that
 * claims sizes its files do not have fails here, not after allocating and filling them. */
static int check_headers(dp_device *dev, const char *dir, const dp_model_config *cfg, weight_files *base,
                         weight_files *adapters) {
    header_check hc = {base, adapters, cfg->arch == DP_ARCH_GPT ? "transformer." : "model.", cfg->dtype,
                       cfg->master_weights, 0};
    DP_TRY(each_expected(cfg, check_header, &hc));
    if (base->n) DP_TRY(weights_check_all_used(base, cfg));
    if (adapters->n) DP_TRY(weights_check_all_used(adapters, cfg));
    uint64_t cap = device_capacity(dev);
    if (cap && hc.bytes > cap)
        return dp_error_set(DP_EOOM,
                            "%s: the model's parameters need %.3f GiB (%llu bytes, from config.json's sizes) but the "
                            "%s device has %.3f GiB (%llu bytes)",
                            dir, (double)hc.bytes / (double)(1ull << 30), (unsigned long long)hc.bytes,
                            dp_device_kind_name(dev->kind), (double)cap / (double)(1ull << 30),
                            (unsigned long long)cap);
    return DP_OK;
}

/* Loads every parameter of m from the opened files (headers already checked). */
static int load_all(dp_model *m, weight_files *base, weight_files *adapters) {
    const dp_model_config *c = dp_model_config_of(m);
    if (!base->n) return DP_OK; /* the plan device: config.json alone */
    const char *prefix = c->arch == DP_ARCH_GPT ? "transformer." : "model.";
    int rc = DP_OK;
    for (int i = 0; i < dp_model_param_count(m) && rc == DP_OK; i++) {
        dp_param *p = dp_model_param(m, i);
        char key[192];
        if (!is_lora(p))
            rc = load_param(base, p, p->name, prefix);
        else if (adapters->n)
            peft_key(p, key, sizeof key), rc = load_param(adapters, p, key, "");
    }
    return rc;
}

int dp_model_load(dp_device *dev, const char *dir, const dp_model_load_opts *opts, dp_model **out) {
    *out = NULL;
    dp_model_load_opts defaults;
    if (!opts) {
        dp_model_load_opts_default(&defaults);
        opts = &defaults;
    }
    dp_model_config cfg;
    DP_TRY(dp_model_config_read(dir, &cfg));
    int adapters = 0;
    DP_TRY(read_adapter_config(dir, &cfg, &adapters));
    if (adapters && opts->lora_rank && opts->lora_rank != cfg.lora_rank)
        return dp_error_set(DP_EINVAL, "%s: holds LoRA adapters of rank %d; lora rank %d was asked for", dir,
                            cfg.lora_rank, opts->lora_rank);
    if (!adapters && opts->lora_rank > 0) {
        cfg.lora_rank = opts->lora_rank;
        cfg.lora_alpha = opts->lora_alpha > 0.0f ? opts->lora_alpha : (float)opts->lora_rank;
        cfg.lora_targets = opts->lora_targets ? opts->lora_targets : DP_LORA_QKV;
    }
    /* a default from the file is bounded: positions past DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX
     * (Llama-3.1 claims 131072, a hostile file 2^31) are the user's choice to make */
    cfg.seq_len = opts->seq_len ? opts->seq_len
                  : cfg.max_positions > DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX ? DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX
                                                                          : cfg.max_positions;
    if (cfg.seq_len <= 0)
        return dp_error_set(DP_EINVAL, "%s: config.json gives no maximum positions: pass seq_len", dir);
    cfg.batch = opts->batch ? opts->batch : 1;
    cfg.dtype = opts->dtype;
    cfg.master_weights = opts->master_weights;
    cfg.checkpoint = opts->checkpoint;
    if (opts->seed) cfg.seed = opts->seed;
    DP_TRY(dp_model_config_check(&cfg));
    int have_weights = weights_present(dir, "model.safetensors");
    if (dev->kind != DP_DEV_PLAN && !have_weights) /* before allocating the model */
        return dp_error_set(DP_EIO,
                            "%s: no weights (neither model.safetensors nor model.safetensors.index.json; "
                            "the plan device, or weights = \"random\" in an experiment, needs config.json "
                            "alone)",
                            dir);
    /* the plan device holds no values: config.json alone will do, and weights that are there are
     * still checked against its shapes (adapters with them) */
    weight_files base = {0}, adapt = {0};
    int rc = have_weights ? weights_open(dir, "model.safetensors", &base) : DP_OK;
    if (rc == DP_OK && adapters && have_weights) rc = weights_open(dir, "adapter_model.safetensors", &adapt);
    if (rc == DP_OK) rc = check_headers(dev, dir, &cfg, &base, &adapt);
    dp_model *m = NULL;
    if (rc == DP_OK) rc = dp_model_new(dev, &cfg, &m);
    if (rc == DP_OK) rc = load_all(m, &base, &adapt);
    weights_close(&base);
    weights_close(&adapt);
    if (rc == DP_OK) rc = dp_model_sync_compute_weights(m);
    if (rc != DP_OK) {
        dp_model_free(m);
        return rc;
    }
    *out = m;
    return DP_OK;
}
