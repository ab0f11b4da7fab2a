/* model_io.c: Hugging Face checkpoints out (config.json, safetensors, PEFT adapters) and
 * config.json in; model_load.c reads the rest. See model_io.h for the files; HF's names and
 * layouts are in /work/shared/NOTES.md. */
#include "model_io.h"
#include "model_io_internal.h"

#include "error.h"
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

/* ---- small file helpers ------------------------------------------------------------------- */

int dpio_join(char *out, size_t n, const char *dir, const char *name) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n)
        return dp_error_set(DP_EINVAL, "path too long: %s/%s", dir, name);
    return DP_OK;
}

/* Whether anything is at path: a file, a link (dangling too), a directory, a device. What is
 * there but is no regular file is then refused by the reader naming what it is, rather than
 * taken for absent. */
int dpio_name_taken(const char *path) {
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

int dpio_read_json(const char *path, cJSON **out) {
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
int dpio_cfg_int(const char *path, const cJSON *root, const char *key, int required, int64_t *out) {
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
int dpio_cfg_num(const char *path, const cJSON *root, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DP_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0) || isinf(v->valuedouble))
        return dp_error_set(DP_EINVAL, "%s: '%s' must be a positive number", path, key);
    *out = (float)v->valuedouble;
    return DP_OK;
}

/* A boolean key; absent keeps *out. */
int dpio_cfg_bool(const char *path, const cJSON *root, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DP_OK;
    if (!cJSON_IsBool(v)) return dp_error_set(DP_EINVAL, "%s: '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return DP_OK;
}

/* A string key; absent (or null) gives def. */
int dpio_cfg_str(const char *path, const cJSON *root, const char *key, const char *def, const char **out) {
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
    DP_TRY(dpio_cfg_int(path, root, "vocab_size", 1, &cfg->vocab));
    DP_TRY(dpio_cfg_int(path, root, "n_embd", 1, &cfg->hidden));
    DP_TRY(dpio_cfg_int(path, root, "n_layer", 1, &cfg->layers));
    DP_TRY(dpio_cfg_int(path, root, "n_head", 1, &cfg->heads));
    int64_t positions = 0;
    DP_TRY(dpio_cfg_int(path, root, "n_ctx", 0, &positions));
    DP_TRY(dpio_cfg_int(path, root, "n_positions", positions == 0, &positions));
    cfg->max_positions = positions;
    cfg->ffn = 4 * cfg->hidden; /* n_inner: null means 4 n_embd */
    DP_TRY(dpio_cfg_int(path, root, "n_inner", 0, &cfg->ffn));
    cfg->norm_eps = 1e-5f;
    DP_TRY(dpio_cfg_num(path, root, "layer_norm_epsilon", &cfg->norm_eps));
    DP_TRY(dpio_cfg_num(path, root, "initializer_range", &cfg->init_std));
    cfg->tie_head = 1;
    DP_TRY(dpio_cfg_bool(path, root, "tie_word_embeddings", &cfg->tie_head));

    const char *act;
    DP_TRY(dpio_cfg_str(path, root, "activation_function", "gelu_new", &act));
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return dp_error_set(DP_ENOTSUP,
                            "%s: activation_function '%s' is not supported (dpprof's GPT uses the "
                            "tanh GELU: gelu_new or gelu_pytorch_tanh)",
                            path, act);
    int scale_weights = 1, by_layer = 0;
    DP_TRY(dpio_cfg_bool(path, root, "scale_attn_weights", &scale_weights));
    DP_TRY(dpio_cfg_bool(path, root, "scale_attn_by_inverse_layer_idx", &by_layer));
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
    DP_TRY(dpio_cfg_num(path, root, "rope_theta", &cfg->rope_theta));
    const char *where = "rope_scaling";
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, where);
    if (!o || cJSON_IsNull(o) || (cJSON_IsObject(o) && !o->child)) {
        where = "rope_parameters";
        o = cJSON_GetObjectItemCaseSensitive(root, where);
    }
    if (!o || cJSON_IsNull(o)) return DP_OK;
    if (!cJSON_IsObject(o)) return dp_error_set(DP_EINVAL, "%s: '%s' must be an object", path, where);
    DP_TRY(dpio_cfg_num(path, o, "rope_theta", &cfg->rope_theta));
    const char *legacy, *type;
    DP_TRY(dpio_cfg_str(path, o, "type", "default", &legacy));
    DP_TRY(dpio_cfg_str(path, o, "rope_type", legacy, &type));
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
    DP_TRY(dpio_cfg_bool(path, o, "truncate", &r->truncate));
    if (r->type == DP_ROPE_LLAMA3 && (r->low_freq_factor == 0.0 || r->high_freq_factor == 0.0))
        return dp_error_set(DP_EINVAL, "%s: rope type 'llama3' needs '%s.low_freq_factor' and 'high_freq_factor'", path,
                            where);
    return DP_OK;
}

/* LlamaConfig: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, ... */
static int read_llama(const char *path, const cJSON *root, dp_model_config *cfg) {
    dp_model_config_default(cfg, DP_ARCH_LLAMA);
    DP_TRY(dpio_cfg_int(path, root, "vocab_size", 1, &cfg->vocab));
    DP_TRY(dpio_cfg_int(path, root, "hidden_size", 1, &cfg->hidden));
    DP_TRY(dpio_cfg_int(path, root, "intermediate_size", 1, &cfg->ffn));
    DP_TRY(dpio_cfg_int(path, root, "num_hidden_layers", 1, &cfg->layers));
    DP_TRY(dpio_cfg_int(path, root, "num_attention_heads", 1, &cfg->heads));
    int64_t positions = 0;
    cfg->kv_heads = cfg->heads; /* LlamaConfig: num_key_value_heads None means num_attention_heads */
    DP_TRY(dpio_cfg_int(path, root, "num_key_value_heads", 0, &cfg->kv_heads));
    if (cfg->heads % cfg->kv_heads)
        return dp_error_set(DP_EINVAL,
                            "%s: num_attention_heads (%lld) must be a multiple of num_key_value_heads (%lld): each "
                            "key/value head serves a group of query heads",
                            path, (long long)cfg->heads, (long long)cfg->kv_heads);
    DP_TRY(dpio_cfg_int(path, root, "head_dim", 0, &cfg->head_dim));
    DP_TRY(dpio_cfg_int(path, root, "max_position_embeddings", 0, &positions));
    cfg->max_positions = positions;
    cfg->norm_eps = 1e-6f; /* LlamaConfig's default */
    DP_TRY(dpio_cfg_num(path, root, "rms_norm_eps", &cfg->norm_eps));
    cfg->rope_theta = 10000.0f;
    DP_TRY(read_rope(path, root, positions, cfg));
    DP_TRY(dpio_cfg_num(path, root, "initializer_range", &cfg->init_std));

    const char *act;
    DP_TRY(dpio_cfg_str(path, root, "hidden_act", "silu", &act));
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return dp_error_set(DP_ENOTSUP, "%s: hidden_act '%s' is not supported (dpprof's llama uses SwiGLU: silu)", path,
                            act);
    int attention_bias = 0, mlp_bias = 0;
    DP_TRY(dpio_cfg_bool(path, root, "attention_bias", &attention_bias));
    DP_TRY(dpio_cfg_bool(path, root, "mlp_bias", &mlp_bias));
    if (attention_bias || mlp_bias)
        return dp_error_set(DP_ENOTSUP, "%s: biases in llama linears (attention_bias, mlp_bias) are not supported",
                            path);
    cfg->tie_head = 0; /* LlamaConfig's default; Llama-3.2-1B/3B tie the head to embed_tokens */
    DP_TRY(dpio_cfg_bool(path, root, "tie_word_embeddings", &cfg->tie_head));
    return DP_OK;
}

/* A folder with adapter_config.json but no config.json: a PEFT adapter as PEFT saves it, apart
 * from its base. The refusal says how to load it: with its base, the folder its
 * base_model_name_or_path names when that is a local checkpoint (PEFT reads a relative path from
 * the working directory too), else BASE for the caller to fill in. */
static int adapter_only(const char *dir, const char *adapter_path) {
    cJSON *root = NULL;
    const char *base = NULL;
    if (dpio_read_json(adapter_path, &root) != DP_OK) dp_error_clear();
    const cJSON *v = root ? cJSON_GetObjectItemCaseSensitive(root, "base_model_name_or_path") : NULL;
    if (cJSON_IsString(v) && *v->valuestring) base = v->valuestring;
    char config[4096];
    int local = 0;
    struct stat st;
    if (base && dpio_join(config, sizeof config, base, "config.json") == DP_OK) local = stat(config, &st) == 0;
    if (!local) dp_error_clear();
    char named[4200] = "BASE", why[4400] = "";
    if (local)
        snprintf(named, sizeof named, "\"%s\"", base);
    else if (base && stat(base, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(why, sizeof why, "; its base_model_name_or_path '%s' is a folder without config.json", base);
    else if (base)
        snprintf(why, sizeof why,
                 "; its base_model_name_or_path '%s' is no local checkpoint folder (a hub name: "
                 "download it first)",
                 base);
    else
        snprintf(why, sizeof why,
                 "; its base_model_name_or_path does not name the base: BASE is the folder of the "
                 "base model's config.json and model.safetensors");
    int rc = dp_error_set(DP_EIO,
                          "%s holds a PEFT adapter (adapter_config.json) but no config.json: load it with its base "
                          "model, as model = {path = %s, adapter = \"%s\"} in an experiment or "
                          "dpprof.model.load(%s, {adapter = \"%s\"})%s",
                          dir, named, dir, named, dir, why);
    cJSON_Delete(root);
    return rc;
}

int dp_model_config_read(const char *dir, dp_model_config *cfg) {
    char path[4096], adapter[4096];
    DP_TRY(dpio_join(path, sizeof path, dir, "config.json"));
    DP_TRY(dpio_join(adapter, sizeof adapter, dir, "adapter_config.json"));
    if (!dpio_name_taken(path) && dpio_name_taken(adapter)) return adapter_only(dir, adapter);
    cJSON *root;
    DP_TRY(dpio_read_json(path, &root));
    const char *type;
    int rc = dpio_cfg_str(path, root, "model_type", NULL, &type);
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

/* ---- the origin: what a checkpoint says that a save passes on ------------------------------ */

/* The token ids config.json carries for generation (transformers' PretrainedConfig keys). */
static const char *const TOKEN_KEYS[3] = {"bos_token_id", "eos_token_id", "pad_token_id"};

/* j printed into a malloc'd string (freed with free, as dp_model_origin's are), NULL when out of
 * memory. */
static char *print_owned(const cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    char *copy = text ? strdup(text) : NULL;
    cJSON_free(text);
    return copy;
}

void dpio_origin_clear(dp_model_origin *o) {
    free(o->dir);
    free(o->tokens);
    free(o->generation);
    memset(o, 0, sizeof *o);
}

int dpio_origin_read(const char *dir, dp_model_origin *o) {
    memset(o, 0, sizeof *o);
    char path[4096];
    DP_TRY(dpio_join(path, sizeof path, dir, "config.json"));
    cJSON *root;
    DP_TRY(dpio_read_json(path, &root));
    cJSON *tokens = cJSON_CreateObject();
    for (int i = 0; tokens && i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, TOKEN_KEYS[i]);
        if (v) cJSON_AddItemToObject(tokens, TOKEN_KEYS[i], cJSON_Duplicate(v, 1));
    }
    cJSON_Delete(root);
    o->tokens = tokens ? print_owned(tokens) : NULL;
    cJSON_Delete(tokens);
    o->dir = realpath(dir, NULL);
    int rc = !o->tokens ? dp_error_set(DP_EOOM, "%s: out of host memory", dir)
             : !o->dir  ? dp_error_set(DP_EIO, "%s: cannot resolve the path: %s", dir, strerror(errno))
                        : DP_OK;
    if (rc == DP_OK) rc = dpio_join(path, sizeof path, dir, "generation_config.json");
    if (rc == DP_OK && dpio_name_taken(path)) { /* refused by name when it is no JSON object */
        rc = dpio_read_json(path, &root);
        if (rc == DP_OK) {
            o->generation = print_owned(root);
            cJSON_Delete(root);
            if (!o->generation) rc = dp_error_set(DP_EOOM, "%s: out of host memory", path);
        }
    }
    if (rc != DP_OK) dpio_origin_clear(o);
    return rc;
}

void dp_model_save_opts_default(dp_model_save_opts *opts) {
    opts->bos_token_id = opts->eos_token_id = opts->pad_token_id = -1;
}

/* The token ids a save writes, {bos_token_id, eos_token_id, pad_token_id}: the caller's, else the
 * origin's as it gives them, else null (a missing key would be transformers' default, GPT-2's
 * 50256 or Llama's 1 and 2, whatever the vocabulary). *given gets a bit per key the caller set. */
static int save_tokens(dp_model *m, const dp_model_save_opts *opts, cJSON **out, unsigned *given) {
    const dp_model_origin *o = dp_model_origin_of(m);
    const int64_t ids[3] = {opts->bos_token_id, opts->eos_token_id, opts->pad_token_id};
    const int64_t V = dp_model_config_of(m)->vocab;
    *out = NULL;
    *given = 0;
    for (int i = 0; i < 3; i++)
        if (ids[i] < -1 || ids[i] >= V)
            return dp_error_set(DP_EINVAL, "'%s' must be a token id from 0 to %lld (the vocabulary of %lld; got %lld)",
                                TOKEN_KEYS[i], (long long)V - 1, (long long)V, (long long)ids[i]);
    cJSON *src = o->tokens ? cJSON_Parse(o->tokens) : NULL, *j = cJSON_CreateObject();
    for (int i = 0; j && i < 3; i++) {
        const cJSON *v = src ? cJSON_GetObjectItemCaseSensitive(src, TOKEN_KEYS[i]) : NULL;
        cJSON *item = ids[i] >= 0 ? cJSON_CreateNumber((double)ids[i]) : v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull();
        cJSON_AddItemToObject(j, TOKEN_KEYS[i], item);
        if (ids[i] >= 0) *given |= 1u << i;
    }
    cJSON_Delete(src);
    if (!j) return dp_error_set(DP_EOOM, "out of host memory");
    *out = j;
    return DP_OK;
}

/* generation_config.json: the origin's (with the ids the caller gave in place of its own), else
 * what transformers' GenerationConfig.from_model_config makes of config.json: its token ids. */
static cJSON *generation_json(dp_model *m, const cJSON *tokens, unsigned given) {
    const dp_model_origin *o = dp_model_origin_of(m);
    cJSON *j = o->generation ? cJSON_Parse(o->generation) : NULL;
    if (j) {
        for (int i = 0; i < 3; i++)
            if (given & (1u << i)) {
                cJSON_DeleteItemFromObjectCaseSensitive(j, TOKEN_KEYS[i]);
                cJSON_AddItemToObject(j, TOKEN_KEYS[i],
                                      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tokens, TOKEN_KEYS[i]), 1));
            }
        return j;
    }
    j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "_from_model_config", 1);
    for (int i = 0; i < 3; i++)
        cJSON_AddItemToObject(j, TOKEN_KEYS[i],
                              cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tokens, TOKEN_KEYS[i]), 1));
    return j;
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

static cJSON *config_json(dp_model *m, const cJSON *tokens) {
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
    for (int i = 0; i < 3; i++)
        cJSON_AddItemToObject(j, TOKEN_KEYS[i],
                              cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tokens, TOKEN_KEYS[i]), 1));
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    return j;
}

/* ---- PEFT (LoRA adapters) ----------------------------------------------------------------- */

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

static cJSON *adapter_config_json(dp_model *m, const char *base) {
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
    cJSON_AddStringToObject(j, "base_model_name_or_path", base);
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
    if (p->part.alloc.live) /* fsdp: only this rank's part exists between the passes over its block */
        return dp_error_set(DP_EINVAL,
                            "'%s' is held in parts across the ranks (fsdp): gather the whole model first "
                            "(priv:unshard(), or an experiment's on.finished)",
                            p->name);
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
        if (dpio_is_lora(p) != lora) continue;
        if (p->value.ndim > DP_ST_MAX_DIMS || (p->hf_transposed && p->value.ndim != 2)) {
            rc = dp_error_set(DP_EINTERNAL, "%s: parameter '%s' has an unexpected shape", path, p->name);
            goto done;
        }
        if (lora)
            dpio_peft_key(p, keys[k], sizeof keys[k]);
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

int dp_model_save(dp_model *m, const char *dir) { return dp_model_save_with(m, dir, NULL); }

int dp_model_save_with(dp_model *m, const char *dir, const dp_model_save_opts *opts) {
    dp_model_save_opts defaults;
    if (!opts) {
        dp_model_save_opts_default(&defaults);
        opts = &defaults;
    }
    if (dp_model_device(m)->kind == DP_DEV_PLAN)
        return dp_error_set(DP_ENOTSUP, "%s: a model on the plan device has no values to save", dir);
    cJSON *tokens; /* bad ids are refused before anything is made */
    unsigned given;
    DP_TRY(save_tokens(m, opts, &tokens, &given));
    int rc = DP_OK;
    struct stat st;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        rc = dp_error_set(DP_EIO, "%s: cannot create the directory: %s", dir, strerror(errno));
    else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        rc = dp_error_set(DP_EIO, "%s: not a directory", dir);
    char path[4096];
    if (rc == DP_OK) rc = dpio_join(path, sizeof path, dir, "config.json");
    if (rc == DP_OK) rc = write_json(path, config_json(m, tokens));
    if (rc == DP_OK) rc = dpio_join(path, sizeof path, dir, "generation_config.json");
    if (rc == DP_OK) rc = write_json(path, generation_json(m, tokens, given));
    cJSON_Delete(tokens);
    DP_TRY(rc);
    DP_TRY(dpio_join(path, sizeof path, dir, "model.safetensors"));
    DP_TRY(save_weights(m, path, 0));

    int lora = dp_model_config_of(m)->lora_rank > 0;
    DP_TRY(dpio_join(path, sizeof path, dir, "adapter_model.safetensors"));
    if (lora)
        DP_TRY(save_weights(m, path, 1));
    else if (unlink(path) != 0 && errno != ENOENT) /* stale adapters would be loaded with this model */
        return dp_error_set(DP_EIO, "%s: cannot remove: %s", path, strerror(errno));
    DP_TRY(dpio_join(path, sizeof path, dir, "adapter_config.json"));
    if (lora) { /* the base: the checkpoint it was loaded from, else this directory's own files */
        const char *from = dp_model_origin_of(m)->dir;
        char *here = from ? NULL : realpath(dir, NULL);
        if (!from && !here) return dp_error_set(DP_EIO, "%s: cannot resolve the path: %s", dir, strerror(errno));
        rc = write_json(path, adapter_config_json(m, from ? from : here));
        free(here);
        DP_TRY(rc);
    } else if (unlink(path) != 0 && errno != ENOENT)
        return dp_error_set(DP_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return DP_OK;
}
