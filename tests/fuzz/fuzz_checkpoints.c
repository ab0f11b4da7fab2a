/* fuzz_checkpoints: mutates the Hugging Face fixtures (tests/fixtures/hf: gpt2, llama and the PEFT
 * adapters in peft/) thousands of times and loads each mutant checkpoint with dp_model_load, the
 * path every checkpoint named from outside takes. A mutant is one of
 *   - config.json              its JSON tree mutated, or its text damaged;
 *   - model.safetensors        its header's JSON tree mutated (names, dtypes, shapes, offsets,
 *                              __metadata__) and re-encoded, its header length replaced, its text
 *                              damaged, or its data section cut, grown or flipped;
 *   - model.safetensors.index.json (a checkpoint split into two shards at start-up) its tree
 *                              mutated or text damaged, sometimes with a shard's header mutated;
 *   - adapter_config.json / adapter_model.safetensors of a PEFT adapter beside its base: the
 *                              config's tree (target_modules as lists, regexes, numbers, PEFT's
 *                              other keys: fan_in_fan_out, layers_to_transform, modules_to_save,
 *                              ...), the weights' header or data (NaN-filled too), or the files
 *                              themselves (the config missing, a directory, a dangling link, a
 *                              device).
 * Each load (on the CPU, and one in four on the plan device too) must return a status the API
 * names (OK, EINVAL, EIO, ENOTSUP, EOOM) with no model on failure and a message of one line; a
 * model that loads on the CPU runs a forward and a backward of one sample. Run under
 * AddressSanitizer (scripts/test.sh's build-asan) a crash, leak or overflow fails it too. The
 * devices' memory is capped (CPU 64 MiB, plan 1 GiB) so that a mutated size fails as an
 * allocation, as it would on a card, instead of exhausting the machine.
 *
 * Mutations are seeded: a failure is reproduced by its seed and iteration, and the failing
 * checkpoint directory is kept as <out>/fail_<iteration>/.
 *
 *   fuzz_checkpoints FIXTURES_HF_DIR OUT_DIR [ITERATIONS [SEED]]    (default 3000, seed 1) */
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "fuzz_mutate.h"
#include "memory.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A huge size read from a mutant is an allocation failure to report, not a reason to abort. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

#define MEMORY_CAP (64ull << 20)
#define PLAN_CAP (1ull << 30)

/* Names a renamed member may get: every key the loader reads, and some it must not trip on. */
static const char *const key_names[] = {"model_type",
                                        "vocab_size",
                                        "n_embd",
                                        "n_layer",
                                        "n_head",
                                        "n_positions",
                                        "n_ctx",
                                        "n_inner",
                                        "activation_function",
                                        "layer_norm_epsilon",
                                        "initializer_range",
                                        "tie_word_embeddings",
                                        "scale_attn_weights",
                                        "scale_attn_by_inverse_layer_idx",
                                        "hidden_size",
                                        "intermediate_size",
                                        "num_hidden_layers",
                                        "num_attention_heads",
                                        "num_key_value_heads",
                                        "head_dim",
                                        "max_position_embeddings",
                                        "rms_norm_eps",
                                        "rope_theta",
                                        "rope_scaling",
                                        "rope_parameters",
                                        "rope_type",
                                        "type",
                                        "hidden_act",
                                        "attention_bias",
                                        "mlp_bias",
                                        "dtype",
                                        "shape",
                                        "data_offsets",
                                        "__metadata__",
                                        "format",
                                        "weight_map",
                                        "metadata",
                                        "peft_type",
                                        "r",
                                        "lora_alpha",
                                        "use_rslora",
                                        "use_dora",
                                        "bias",
                                        "lora_bias",
                                        "rank_pattern",
                                        "alpha_pattern",
                                        "target_modules",
                                        "fan_in_fan_out",
                                        "layers_to_transform",
                                        "layers_pattern",
                                        "modules_to_save",
                                        "exclude_modules",
                                        "layer_replication",
                                        "target_parameters",
                                        "transformer.wte.weight",
                                        "lm_head.weight",
                                        ""};

/* Values meaningful to the loader, beside the generic hostile ones. */
static const char *const extra_values[] = {"\"gpt2\"",
                                           "\"llama\"",
                                           "\"F32\"",
                                           "\"BF16\"",
                                           "\"F16\"",
                                           "\"I64\"",
                                           "\"F8_E4M3\"",
                                           "\"LORA\"",
                                           "\"silu\"",
                                           "\"gelu_new\"",
                                           "\"none\"",
                                           "\"default\"",
                                           "\"yarn\"",
                                           "\"model-1.safetensors\"",
                                           "\"model-2.safetensors\"",
                                           "\"../gpt2/model.safetensors\"",
                                           "\"/etc/passwd\"",
                                           "\".\"",
                                           "\"..\"",
                                           "\"\"",
                                           "\"model.safetensors\"",
                                           "1",
                                           "2",
                                           "4",
                                           "8",
                                           "16",
                                           "32",
                                           "64",
                                           "96",
                                           "88",
                                           "1000000",
                                           "2147483648",
                                           "4294967296",
                                           "1e9",
                                           "0.5",
                                           "-3",
                                           "[0, 0]",
                                           "[0, 4]",
                                           "[4, 0]",
                                           "[96, 32]",
                                           "[32, 96]",
                                           "[1, 1, 1, 1, 1]",
                                           "[3, 9007199254740993]",
                                           "{\"rope_type\": \"default\"}",
                                           "{\"rope_type\": 7}",
                                           "{\"q_proj\": 8}",
                                           /* adapter_config.json's target_modules, layers, modules */
                                           "[\"q_proj\", \"v_proj\"]",
                                           "[\"c_attn\", \"c_fc\"]",
                                           "[\"c_proj\"]",
                                           "[\"lm_head\"]",
                                           "[\"bogus\"]",
                                           "[]",
                                           "[1, 2]",
                                           "[0, 1]",
                                           "[0]",
                                           "[[0, 2]]",
                                           "\"all-linear\"",
                                           "\"q_proj\"",
                                           "\".*\\\\.(q_proj|k_proj|v_proj|o_proj|down_proj)\"",
                                           "\".*\\\\.(attn\\\\.c_attn|mlp\\\\.c_fc)\"",
                                           "\"model\\\\.layers\\\\.0\\\\..*\"",
                                           "\"(unclosed\"",
                                           "\"(a*)*(b|c)*\"",
                                           "\"((((a{1,100}){1,100}){1,100}){1,100})\"",
                                           "\"[[:alpha:]\"",
                                           "\"model\\\\.layers\\\\.\\\\d+\\\\.(?:self_attn\\\\.[qkvo]_proj)\"",
                                           "\"(?=x)\\\\w*\\\\\"",
                                           "\"[]\\\\d]\"",
                                           "true",
                                           "false",
                                           "null"};

#define N_KEYS (sizeof key_names / sizeof *key_names)
#define N_EXTRA (sizeof extra_values / sizeof *extra_values)

typedef struct blob {
    char *data;
    size_t len;
} blob;

/* The fixtures, read once. */
static blob config[2], weights[2], adapter_config[2], adapter_weights[2], shards[2], index_json;
static const char *const models[2] = {"gpt2", "llama"};
static dp_device *cpu, *plan;
static int failures;

static blob read_blob(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    blob b = {0};
    b.data = fuzz_read_file(path, &b.len);
    if (!b.data) fprintf(stderr, "fuzz_checkpoints: cannot read %s\n", path);
    return b;
}

/* ---- safetensors as header JSON + data -------------------------------------------------------- */

/* The header text (NUL-terminated copy) and the data section of a safetensors file. */
static char *split_st(const blob *b, const char **data, size_t *data_len) {
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | (unsigned char)b->data[i];
    char *text = malloc(h + 1);
    memcpy(text, b->data + 8, h);
    text[h] = '\0';
    *data = b->data + 8 + h;
    *data_len = b->len - 8 - h;
    return text;
}

/* header length (little-endian) + header + data */
static blob join_st(uint64_t hlen_field, const char *header, size_t header_len, const char *data, size_t data_len) {
    blob b;
    b.len = 8 + header_len + data_len;
    b.data = malloc(b.len ? b.len : 1);
    for (int i = 0; i < 8; i++) b.data[i] = (char)(hlen_field >> (8 * i));
    memcpy(b.data + 8, header, header_len);
    if (data_len) memcpy(b.data + 8 + header_len, data, data_len);
    return b;
}

/* A mutant of a safetensors file: its header tree or text, its length field, or its data. */
static blob mutate_st(const blob *b) {
    const char *data;
    size_t data_len;
    char *header = split_st(b, &data, &data_len);
    char *text = NULL;
    size_t kind = fuzz_below(10);
    if (kind < 6) { /* the header's tree */
        cJSON *root = cJSON_Parse(header);
        size_t rounds = 1 + fuzz_below(3);
        for (size_t r = 0; r < rounds && root; r++) fuzz_mutate_tree(root, key_names, N_KEYS, extra_values, N_EXTRA);
        text = root ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
    } else if (kind < 8) {
        text = fuzz_mutate_text(header);
    }
    if (!text) text = fuzz_strdup(header);
    size_t tl = strlen(text);
    uint64_t field = tl;
    if (kind == 8) { /* the length field */
        static const uint64_t odd[] = {0, 1, 2, 7, 8, 100000001ull, UINT64_MAX, UINT64_MAX / 2, 1ull << 32};
        size_t k = fuzz_below(sizeof odd / sizeof *odd + 3);
        field = k < sizeof odd / sizeof *odd ? odd[k] : k == sizeof odd / sizeof *odd ? tl + data_len : tl - 1;
    }
    size_t dl = data_len;
    char *d = malloc(data_len + 64);
    memcpy(d, data, data_len);
    if (kind == 9) { /* the data: cut, grown or flipped */
        switch (fuzz_below(3)) {
        case 0: dl = fuzz_below(data_len + 1); break;
        case 1:
            dl = data_len + 1 + fuzz_below(63);
            memset(d + data_len, 0x7f, dl - data_len);
            break;
        default:
            for (int i = 0; i < 16 && data_len; i++) d[fuzz_below(data_len)] = (char)0xff; /* NaNs */
        }
    }
    blob out = join_st(field, text, tl, d, dl);
    free(d);
    cJSON_free(text);
    free(header);
    return out;
}

/* A JSON file's mutant: its tree (1 to 3 mutations) or its text. */
static char *mutate_json(const blob *b) {
    if (fuzz_below(5) == 0) return fuzz_mutate_text(b->data);
    cJSON *root = cJSON_Parse(b->data);
    size_t rounds = 1 + fuzz_below(3);
    for (size_t r = 0; r < rounds && root; r++) fuzz_mutate_tree(root, key_names, N_KEYS, extra_values, N_EXTRA);
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    char *copy = fuzz_strdup(text ? text : b->data);
    cJSON_free(text);
    return copy;
}

/* ---- start-up: a sharded checkpoint ---------------------------------------------------------- */

/* Splits the gpt2 fixture's weights into two shards and writes the index that lists them. */
static int make_shards(const char *out) {
    char path[4200];
    snprintf(path, sizeof path, "%s/gpt2.safetensors", out);
    if (fuzz_write_file(path, weights[0].data, weights[0].len) != 0) return -1;
    dp_st_file *f;
    if (dp_st_open(path, &f) != DP_OK) return -1;
    int n = dp_st_count(f), split = n / 2;
    cJSON *index = cJSON_CreateObject(), *map = cJSON_CreateObject();
    cJSON_AddItemToObject(cJSON_AddObjectToObject(index, "metadata"), "total_size", cJSON_CreateNumber(0));
    cJSON_AddItemToObject(index, "weight_map", map);
    for (int s = 0; s < 2; s++) {
        int from = s ? split : 0, to = s ? n : split;
        dp_st_entry *e = calloc((size_t)(to - from), sizeof *e);
        float **vals = calloc((size_t)(to - from), sizeof *vals);
        char name[64];
        snprintf(name, sizeof name, "model-%d.safetensors", s + 1);
        for (int i = from; i < to; i++) {
            const dp_st_tensor *t = dp_st_at(f, i);
            vals[i - from] = malloc((size_t)t->numel * sizeof(float) + 1);
            dp_st_read_f32(f, t, vals[i - from], t->numel);
            e[i - from] = (dp_st_entry){t->name, t->ndim, {0}, dp_st_get_host_f32, vals[i - from]};
            memcpy(e[i - from].shape, t->shape, sizeof t->shape);
            cJSON_AddStringToObject(map, t->name, name);
        }
        snprintf(path, sizeof path, "%s/%s", out, name);
        int rc = dp_st_write_f32(path, e, to - from, NULL);
        for (int i = 0; i < to - from; i++) free(vals[i]);
        free(vals);
        free(e);
        if (rc != DP_OK) return -1;
        shards[s] = read_blob(out, name);
    }
    dp_st_close(f);
    index_json.data = cJSON_Print(index);
    index_json.len = strlen(index_json.data);
    cJSON_Delete(index);
    return 0;
}

/* ---- one mutant ------------------------------------------------------------------------------- */

static void clear_dir(const char *dir) {
    DIR *d = opendir(dir);
    char path[4600];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) rmdir(path); /* a directory planted as a file */
    }
    if (d) closedir(d);
}

static void put(const char *dir, const char *name, const void *data, size_t len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fuzz_write_file(path, data, len);
}

/* Writes one mutant checkpoint into dir; returns what was mutated (for the summary). */
static const char *write_mutant(const char *dir) {
    clear_dir(dir);
    size_t m = fuzz_below(2), kind = fuzz_below(10);
    const char *what;
    if (kind < 3) { /* config.json */
        char *text = mutate_json(&config[m]);
        put(dir, "config.json", text, strlen(text));
        put(dir, "model.safetensors", weights[m].data, weights[m].len);
        free(text);
        what = "config.json";
    } else if (kind < 6) { /* the weights */
        blob b = mutate_st(&weights[m]);
        put(dir, "config.json", config[m].data, config[m].len);
        put(dir, "model.safetensors", b.data, b.len);
        free(b.data);
        what = "model.safetensors";
    } else if (kind < 8) { /* the index of the gpt2 shards, maybe a shard too */
        char *text = mutate_json(&index_json);
        put(dir, "config.json", config[0].data, config[0].len);
        put(dir, "model.safetensors.index.json", text, strlen(text));
        size_t bad = fuzz_below(4);
        for (int s = 0; s < 2; s++) {
            blob b = (size_t)s == bad ? mutate_st(&shards[s]) : shards[s];
            put(dir, s ? "model-2.safetensors" : "model-1.safetensors", b.data, b.len);
            if ((size_t)s == bad) free(b.data);
        }
        free(text);
        what = "index.json";
    } else { /* a PEFT adapter beside its base */
        put(dir, "config.json", config[m].data, config[m].len);
        put(dir, "model.safetensors", weights[m].data, weights[m].len);
        size_t how = fuzz_below(8);
        if (how == 0) { /* the files themselves: the config missing, a directory, a link, a device */
            char path[4200];
            put(dir, "adapter_model.safetensors", adapter_weights[m].data, adapter_weights[m].len);
            snprintf(path, sizeof path, "%s/adapter_config.json", dir);
            switch (fuzz_below(4)) {
            case 0: break; /* missing */
            case 1: mkdir(path, 0777); break;
            case 2:
                if (symlink("/nonexistent/adapter_config.json", path) != 0) perror("symlink");
                break;
            default:
                if (symlink("/dev/null", path) != 0) perror("symlink");
            }
            what = "adapter files";
        } else if (how == 1) { /* every adapter value NaN, or one tensor's */
            const char *data;
            size_t data_len;
            char *header = split_st(&adapter_weights[m], &data, &data_len);
            char *d = malloc(data_len + 1);
            memcpy(d, data, data_len);
            size_t from = fuzz_below(2) ? 0 : fuzz_below(data_len);
            memset(d + from, 0xff, fuzz_below(2) ? data_len - from : (data_len - from < 64 ? data_len - from : 64));
            blob b = join_st(strlen(header), header, strlen(header), d, data_len);
            put(dir, "adapter_config.json", adapter_config[m].data, adapter_config[m].len);
            put(dir, "adapter_model.safetensors", b.data, b.len);
            free(b.data);
            free(d);
            free(header);
            what = "adapter_model.safetensors (NaN)";
        } else if (how < 5) {
            char *text = mutate_json(&adapter_config[m]);
            put(dir, "adapter_config.json", text, strlen(text));
            put(dir, "adapter_model.safetensors", adapter_weights[m].data, adapter_weights[m].len);
            free(text);
            what = "adapter_config.json";
        } else {
            blob b = mutate_st(&adapter_weights[m]);
            put(dir, "adapter_config.json", adapter_config[m].data, adapter_config[m].len);
            put(dir, "adapter_model.safetensors", b.data, b.len);
            free(b.data);
            what = "adapter_model.safetensors";
        }
    }
    return what;
}

static void fail(const char *out, const char *dir, size_t iter, const char *what, const char *why) {
    failures++;
    char kept[1100], cmd[4000];
    snprintf(kept, sizeof kept, "%s/fail_%zu", out, iter);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", kept, dir, kept);
    if (system(cmd) != 0) snprintf(kept, sizeof kept, "(could not be kept)");
    fprintf(stderr, "FAIL at mutant %zu (%s, kept in %s): %s\n", iter, what, kept, why);
}

/* Loads dir on dev; checks the status and message; on the CPU, loads a model that loads in parts
 * too (fsdp) and runs a step of it whole. Returns the status. */
static int load_and_run(dp_device *dev, const char *out, const char *dir, size_t iter, const char *what) {
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 4;
    dp_model *m = (dp_model *)&o; /* must come back NULL on failure */
    int rc = dp_model_load(dev, dir, &o, &m);
    const char *msg = dp_error_message();
    char why[1200];
    if (rc != DP_OK && rc != DP_EINVAL && rc != DP_EIO && rc != DP_ENOTSUP && rc != DP_EOOM) {
        snprintf(why, sizeof why, "status %d: %s", rc, msg);
        fail(out, dir, iter, what, why);
    }
    if (rc != DP_OK && m != NULL) {
        fail(out, dir, iter, what, "a failed load left a model");
        m = NULL;
    }
    if (rc != DP_OK && (!*msg || strchr(msg, '\n'))) {
        snprintf(why, sizeof why, "the message is not one line: '%s'", msg);
        fail(out, dir, iter, what, why);
    }
    if (rc != DP_OK || dev != cpu) {
        if (rc == DP_OK) dp_model_free(m);
        return rc;
    }
    /* what loads whole loads in parts too (fsdp: each tensor read whole into a temporary, its part cut) */
    dp_model *parted = NULL;
    o.parts_world = 3, o.parts_rank = (int64_t)(iter % 3);
    int r3 = dp_model_load(dev, dir, &o, &parted);
    if (r3 != DP_OK && r3 != DP_EOOM) {
        snprintf(why, sizeof why, "loaded whole but not in parts: %s", dp_error_message());
        fail(out, dir, iter, what, why);
    }
    dp_model_free(parted);
    int64_t shape[2] = {1, 4};
    dp_tensor *in = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
    dp_tensor *tg = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
    if (in && tg) {
        const int64_t V = dp_model_config_of(m)->vocab;
        for (int t = 0; t < 4; t++) ((int32_t *)in->data)[t] = (int32_t)((t * 7) % V), ((int32_t *)tg->data)[t] = 0;
        float loss;
        int r2 = dp_model_forward(m, in, tg, &loss, NULL);
        if (r2 == DP_OK) r2 = dp_model_backward(m, NULL);
        if (r2 != DP_OK && r2 != DP_EOOM) {
            snprintf(why, sizeof why, "a loaded model's step failed: %s", dp_error_message());
            fail(out, dir, iter, what, why);
        }
    }
    dp_tensor_free(in);
    dp_tensor_free(tg);
    dp_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fuzz_checkpoints FIXTURES_HF_DIR OUT_DIR [ITERATIONS [SEED]]\n");
        return 2;
    }
    const char *hf = argv[1], *out = argv[2];
    size_t iterations = argc > 3 ? (size_t)strtoull(argv[3], NULL, 10) : 3000;
    fuzz_seed(argc > 4 ? strtoull(argv[4], NULL, 10) : 1);
    mkdir(out, 0777);
    if (dp_engine_init() != DP_OK || dp_device_get(DP_DEV_CPU, &cpu) != DP_OK ||
        dp_device_get(DP_DEV_PLAN, &plan) != DP_OK) {
        fprintf(stderr, "fuzz_checkpoints: %s\n", dp_error_message());
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", hf, models[i]);
        config[i] = read_blob(dir, "config.json");
        weights[i] = read_blob(dir, "model.safetensors");
        snprintf(dir, sizeof dir, "%s/peft/%s", hf, models[i]);
        adapter_config[i] = read_blob(dir, "adapter_config.json");
        adapter_weights[i] = read_blob(dir, "adapter_model.safetensors");
        if (!config[i].data || !weights[i].data || !adapter_config[i].data || !adapter_weights[i].data) return 1;
    }
    if (make_shards(out) != 0) {
        fprintf(stderr, "fuzz_checkpoints: cannot split the gpt2 fixture: %s\n", dp_error_message());
        return 1;
    }
    dp_mem_set_limit(cpu->mem, MEMORY_CAP);
    dp_mem_set_limit(plan->mem, PLAN_CAP);

    char dir[1024];
    snprintf(dir, sizeof dir, "%s/mutant", out);
    mkdir(dir, 0777);
    size_t loaded = 0, by_status[8] = {0};
    clock_t t0 = clock();
    for (size_t iter = 0; iter < iterations; iter++) {
        const char *what = write_mutant(dir);
        int rc = load_and_run(cpu, out, dir, iter, what);
        if (fuzz_below(4) == 0) load_and_run(plan, out, dir, iter, what);
        loaded += rc == DP_OK;
        if (rc >= 0 && rc < 8) by_status[rc]++;
    }
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("fuzz_checkpoints: %zu mutants, %zu loaded and ran, refused: %zu EINVAL, %zu EIO, %zu ENOTSUP, %zu EOOM; "
           "%.1f s CPU, %d failure(s)\n",
           iterations, loaded, by_status[DP_EINVAL], by_status[DP_EIO], by_status[DP_ENOTSUP], by_status[DP_EOOM], s,
           failures);
    clear_dir(dir);
    rmdir(dir);
    for (int i = 0; i < 2; i++) {
        free(config[i].data), free(weights[i].data), free(adapter_config[i].data), free(adapter_weights[i].data);
        free(shards[i].data);
    }
    cJSON_free(index_json.data);
    dp_engine_shutdown();
    return failures ? 1 : 0;
}
