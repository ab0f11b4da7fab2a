/* model_load.c: building a model from a Hugging Face checkpoint (model_io.h's dp_model_load):
 * the weight files (one or the shards of an index), adapter_config.json as PEFT reads it, every
 * tensor header checked against config.json before anything is allocated, then the values. */
#include "model_io.h"
#include "model_io_internal.h"

#include "error.h"
#include "peft_targets.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_model_load_opts_default(dp_model_load_opts *opts) {
    memset(opts, 0, sizeof *opts);
    opts->dtype = DP_F32;
    opts->master_weights = 1;
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
    DP_TRY(dpio_join(path, sizeof path, dir, file));
    if (dpio_name_taken(path)) {
        int rc = weights_add(w, path);
        if (rc != DP_OK) weights_close(w);
        return rc;
    }
    char index[4200];
    snprintf(index, sizeof index, "%s.index.json", path);
    if (!dpio_name_taken(index))
        return dp_error_set(DP_EIO, "%s: no weights (neither %s nor %s.index.json)", dir, file, file);
    cJSON *root;
    DP_TRY(dpio_read_json(index, &root));
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
        rc = dpio_join(path, sizeof path, dir, e->valuestring);
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
static int load_param(const dp_model *m, weight_files *w, dp_param *p, const char *key, const char *prefix) {
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
    if (rc == DP_OK && !p->part.alloc.live) {
        rc = dp_tensor_from_host_f32(&p->value, src, v->numel); /* a bf16 parameter rounds once */
    } else if (rc == DP_OK) { /* built in parts: the tensor whole in a temporary, this rank's part cut from it */
        const dp_model_config *c = dp_model_config_of(m);
        dp_tensor whole = {0};
        rc = dp_tensor_init_module(&whole, v->dev, v->dtype, v->ndim, v->shape, DP_CAT_TEMP, p->module);
        if (rc == DP_OK) rc = dp_tensor_from_host_f32(&whole, src, v->numel);
        if (rc == DP_OK) rc = dp_param_part_from(p, &whole, c->parts_world, c->parts_rank);
        dp_tensor_release(&whole);
    }
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

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* layers_to_transform: null, a layer index or a list of them; dpprof adapts every block, so the
 * list must name them all. Memory in the list's length (the file's), never in config.json's
 * layers. */
static int adapter_layers(const char *path, const cJSON *root, int64_t layers) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "layers_to_transform");
    if (!v || cJSON_IsNull(v)) return DP_OK;
    const cJSON *one = cJSON_IsNumber(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v))
        return dp_error_set(DP_EINVAL, "%s: 'layers_to_transform' must be null, a layer index or a list of them", path);
    size_t items = one ? 1 : (size_t)cJSON_GetArraySize(v), k = 0;
    int64_t *at = malloc((items ? items : 1) * sizeof *at);
    if (!at) return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    int rc = DP_OK;
    for (const cJSON *e = one ? one : v->child; e && rc == DP_OK; e = one ? NULL : e->next) {
        double d = e->valuedouble;
        if (!cJSON_IsNumber(e) || !(d >= 0) || d >= (double)layers || floor(d) != d)
            rc = dp_error_set(DP_EINVAL, "%s: 'layers_to_transform' holds %s, not a layer index (0..%lld)", path,
                              cJSON_IsNumber(e) ? "a number out of range" : "a value that is not a number",
                              (long long)layers - 1);
        else
            at[k++] = (int64_t)d;
    }
    int64_t n = 0; /* distinct indices */
    if (rc == DP_OK) {
        qsort(at, k, sizeof *at, by_value);
        for (size_t i = 0; i < k; i++) n += i == 0 || at[i] != at[i - 1];
    }
    free(at);
    if (rc == DP_OK && n != layers)
        rc = dp_error_set(DP_ENOTSUP,
                          "%s: 'layers_to_transform' adapts %lld of the %lld layers; dpprof adapts every layer (give "
                          "null)",
                          path, (long long)n, (long long)layers);
    return rc;
}

/* The PEFT keys of adapter_config.json that decide what the adapters are (rank, alpha; the
 * targets are read_adapter_config's) and what dpprof does not model (refused naming the key). */
static int adapter_keys(const char *path, const cJSON *root, dp_model_config *cfg) {
    int64_t rank = 0;
    int rslora = 0, dora = 0, lora_bias = 0, fan_in_fan_out = cfg->arch == DP_ARCH_GPT;
    const char *type, *bias = "none";
    DP_TRY(dpio_cfg_str(path, root, "peft_type", "", &type));
    if (strcmp(type, "LORA") != 0)
        return dp_error_set(DP_ENOTSUP, "%s: peft_type '%s' is not supported (valid: LORA)", path, type);
    DP_TRY(dpio_cfg_int(path, root, "r", 1, &rank));
    if (rank > LORA_RANK_MAX)
        return dp_error_set(DP_EINVAL, "%s: 'r' must be an integer in 1..%d (got %lld)", path, LORA_RANK_MAX,
                            (long long)rank);
    float alpha = (float)rank;
    DP_TRY(dpio_cfg_num(path, root, "lora_alpha", &alpha));
    DP_TRY(dpio_cfg_bool(path, root, "use_rslora", &rslora));
    DP_TRY(dpio_cfg_bool(path, root, "use_dora", &dora));
    if (rslora || dora)
        return dp_error_set(DP_ENOTSUP, "%s: use_rslora and use_dora are not supported (plain LoRA, scale alpha/r)",
                            path);
    DP_TRY(dpio_cfg_str(path, root, "bias", "none", &bias));
    if (strcmp(bias, "none") != 0)
        return dp_error_set(DP_ENOTSUP, "%s: trained biases (bias != \"none\") are not supported", path);
    DP_TRY(dpio_cfg_bool(path, root, "lora_bias", &lora_bias));
    if (lora_bias) return dp_error_set(DP_ENOTSUP, "%s: lora_bias (a bias on lora_B) is not supported", path);
    /* fan_in_fan_out says the base weights are stored in x out: GPT-2's Conv1D, never Llama's
     * nn.Linear (PEFT resets a wrong value with a warning; a file that says otherwise was not
     * written for this model) */
    DP_TRY(dpio_cfg_bool(path, root, "fan_in_fan_out", &fan_in_fan_out));
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
    DP_TRY(dpio_join(path, sizeof path, dir, "adapter_config.json"));
    DP_TRY(dpio_join(weights, sizeof weights, dir, "adapter_model.safetensors"));
    if (!dpio_name_taken(path)) {
        if (dpio_name_taken(weights))
            return dp_error_set(DP_EINVAL,
                                "%s: adapter_model.safetensors is there but adapter_config.json is not: the adapters' "
                                "rank, alpha and targets are unknown (add PEFT's adapter_config.json, or remove the "
                                "adapters to load the base model alone)",
                                dir);
        return DP_OK;
    }
    cJSON *root;
    DP_TRY(dpio_read_json(path, &root)); /* refuses a directory, a device or a dangling link by name */
    int rc = adapter_keys(path, root, cfg);
    dp_st_file *f = NULL;
    if (rc == DP_OK) rc = dp_st_open(weights, &f);
    /* an adapted linear has 2 tensors in every layer: config.json's layers (up to 2^53) are
     * bounded by the file before target_modules is matched against every block */
    if (rc == DP_OK && cfg->layers > dp_st_count(f) / 2)
        rc = dp_error_set(DP_EINVAL,
                          "%s: holds %d tensors, too few for adapters on %lld layers (config.json's "
                          "num_hidden_layers / n_layer; 2 per adapted linear per layer)",
                          weights, dp_st_count(f), (long long)cfg->layers);
    unsigned named = 0;
    if (rc == DP_OK)
        rc = dp_peft_targets(path, cJSON_GetObjectItemCaseSensitive(root, "target_modules"), cfg->arch, cfg->layers,
                             &named);
    cJSON_Delete(root);
    if (rc != DP_OK) {
        dp_st_close(f);
        return rc;
    }

    /* the targets the weights hold: they must be the ones target_modules selects */
    unsigned targets = 0;
    const char *suffix = ".lora_A.weight";
    size_t pl = strlen(PEFT_PREFIX), sl = strlen(suffix);
    for (int i = 0; i < dp_st_count(f) && rc == DP_OK; i++) {
        const char *name = dp_st_at(f, i)->name;
        size_t len = strlen(name);
        if (len <= pl + sl || strcmp(name + len - sl, suffix) != 0) continue;
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)(len - pl - sl), name + pl);
        unsigned t = strncmp(name, PEFT_PREFIX, pl) == 0 ? dp_peft_target_of(cfg->arch, module) : 0;
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

int dp_model_adapter_read(const char *dir, dp_model_config *cfg) {
    char path[4096];
    DP_TRY(dpio_join(path, sizeof path, dir, "adapter_config.json"));
    int present = 0;
    if (dpio_name_taken(path)) DP_TRY(read_adapter_config(dir, cfg, &present));
    if (!present)
        return dp_error_set(DP_EIO,
                            "%s: no adapter_config.json: adapter = DIR names a PEFT adapter folder "
                            "(adapter_config.json and adapter_model.safetensors, as PeftModel.save_pretrained writes)",
                            dir);
    return DP_OK;
}

/* Whether dir holds file or its shards' index. */
static int weights_present(const char *dir, const char *file) {
    char path[4096], index[4200];
    if (dpio_join(path, sizeof path, dir, file) != DP_OK) return 0;
    snprintf(index, sizeof index, "%s.index.json", path);
    return dpio_name_taken(path) || dpio_name_taken(index);
}

/* ---- the files' headers against the configuration, before anything is allocated ------------- */

/* One parameter cfg gives a model, as the files hold it: name, shape (in x out for GPT-2's
 * Conv1D weights), and whether it is a LoRA tensor and trained. */
typedef struct expected {
    const char *name;
    int ndim;
    int64_t shape[2];
    int lora, trainable;
    int64_t copies; /* how many blocks it stands for (each_expected's `blocks` walk) */
} expected;

typedef int (*expect_fn)(void *ctx, const expected *e);

typedef struct expect_walk {
    const dp_model_config *c;
    expect_fn fn;
    void *ctx;
    int rc;
    int64_t copies; /* of the tensors expected now: the layers per walked block, or 1 */
} expect_walk;

static void expect(expect_walk *w, const char *name, int64_t rows, int64_t cols, int lora) {
    if (w->rc != DP_OK) return;
    expected e = {name, cols ? 2 : 1, {rows, cols}, lora, w->c->lora_rank > 0 ? lora : 1, w->copies};
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
 * unnoticed). every_block 0 walks block 0 alone, its tensors standing for all layers' copies:
 * a sum over config.json's layers (up to 2^53) without a file to bound them. */
static int each_expected(const dp_model_config *c, int every_block, expect_fn fn, void *ctx) {
    const int64_t d = c->hidden, F = dp_model_config_ffn(c), V = c->vocab;
    const int64_t L = every_block || c->layers < 1 ? c->layers : 1;
    expect_walk w = {c, fn, ctx, DP_OK, 1};
    char hf[96];
    if (c->arch == DP_ARCH_GPT) {
        expect(&w, "transformer.wte.weight", V, d, 0);
        expect(&w, "transformer.wpe.weight", c->max_positions ? c->max_positions : c->seq_len, d, 0);
        w.copies = every_block ? 1 : c->layers;
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
        w.copies = 1;
        expect_norm(&w, "transformer.ln_f", 1);
    } else {
        const int64_t H = c->heads, Hkv = c->kv_heads > 0 ? c->kv_heads : H;
        const int64_t hd = c->head_dim > 0 ? c->head_dim : d / H, dq = H * hd, dkv = Hkv * hd;
        expect(&w, "model.embed_tokens.weight", V, d, 0);
        w.copies = every_block ? 1 : c->layers;
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
        w.copies = 1;
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
    /* saturating: config.json's sizes go up to 2^53 each, their products past 2^64 */
    uint64_t rows = (uint64_t)e->shape[0], cols = (uint64_t)(e->ndim > 1 ? e->shape[1] : 1), size = bf16_only ? 2 : 4;
    uint64_t bytes = rows && cols > UINT64_MAX / size / rows ? UINT64_MAX : rows * cols * size;
    uint64_t copies = (uint64_t)e->copies;
    bytes = copies && bytes > UINT64_MAX / copies ? UINT64_MAX : bytes * copies;
    hc->bytes = bytes > UINT64_MAX - hc->bytes ? UINT64_MAX : hc->bytes + bytes;
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
    /* with weights, every block is checked (the file's tensors bound the walk: a block it lacks
     * fails); without (the plan device), block 0 stands for them all */
    DP_TRY(each_expected(cfg, base->n > 0, check_header, &hc));
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
        if (!dpio_is_lora(p))
            rc = load_param(m, base, p, p->name, prefix);
        else if (adapters->n)
            dpio_peft_key(p, key, sizeof key), rc = load_param(m, adapters, p, key, "");
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
    /* the adapters: dir's own, or the folder opts->adapter names (PEFT keeps them apart), never both */
    const char *adir = opts->adapter && strcmp(opts->adapter, dir) != 0 ? opts->adapter : dir;
    int adapters = 0;
    if (adir != dir) {
        char own[4096], own_weights[4096];
        DP_TRY(dpio_join(own, sizeof own, dir, "adapter_config.json"));
        DP_TRY(dpio_join(own_weights, sizeof own_weights, dir, "adapter_model.safetensors"));
        if (dpio_name_taken(own) || dpio_name_taken(own_weights))
            return dp_error_set(DP_EINVAL,
                                "%s holds LoRA adapters of its own (adapter_config.json, adapter_model.safetensors) "
                                "and adapter = \"%s\" names others: give one (drop adapter to load %s's, or load "
                                "from a base folder without adapters)",
                                dir, adir, dir);
        DP_TRY(dp_model_adapter_read(adir, &cfg));
        adapters = 1;
    } else {
        DP_TRY(read_adapter_config(dir, &cfg, &adapters));
    }
    if (adapters && opts->lora_rank && opts->lora_rank != cfg.lora_rank)
        return dp_error_set(DP_EINVAL, "%s: holds LoRA adapters of rank %d; lora rank %d was asked for", adir,
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
    cfg.parts_world = opts->parts_world;
    cfg.parts_rank = opts->parts_rank;
    if (opts->seed) cfg.seed = opts->seed;
    if (opts->rope_theta != 0.0f) cfg.rope_theta = opts->rope_theta; /* a bad one: the check below says so */
    DP_TRY(dp_model_config_check(&cfg));
    dp_model_origin origin; /* read before anything is allocated: a malformed generation_config.json fails here */
    DP_TRY(dpio_origin_read(dir, &origin));
    int have_weights = weights_present(dir, "model.safetensors");
    if (dev->kind != DP_DEV_PLAN && !have_weights) { /* before allocating the model */
        dpio_origin_clear(&origin);
        return dp_error_set(DP_EIO,
                            "%s: no weights (neither model.safetensors nor model.safetensors.index.json; "
                            "the plan device, or weights = \"random\" in an experiment, needs config.json "
                            "alone)",
                            dir);
    }
    /* the plan device holds no values: config.json alone will do, and weights that are there are
     * still checked against its shapes (adapters with them) */
    weight_files base = {0}, adapt = {0};
    int rc = have_weights ? weights_open(dir, "model.safetensors", &base) : DP_OK;
    if (rc == DP_OK && adapters && have_weights) rc = weights_open(adir, "adapter_model.safetensors", &adapt);
    if (rc == DP_OK) rc = check_headers(dev, dir, &cfg, &base, &adapt);
    dp_model *m = NULL;
    if (rc == DP_OK) rc = dp_model_new(dev, &cfg, &m);
    if (rc == DP_OK) rc = load_all(m, &base, &adapt);
    weights_close(&base);
    weights_close(&adapt);
    if (rc == DP_OK) rc = dp_model_sync_compute_weights(m);
    if (rc != DP_OK) {
        dpio_origin_clear(&origin);
        dp_model_free(m);
        return rc;
    }
    *dp_model_origin_of(m) = origin; /* the model owns its strings from here */
    *out = m;
    return DP_OK;
}
