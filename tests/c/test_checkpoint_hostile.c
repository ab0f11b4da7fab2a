/* test_checkpoint_hostile.c: checkpoints and adapters a hostile or careless user hands the loader
 * (issue 26 items 3, 4, 7, 8, 9 and 11's loader messages).
 *   - config.json's 2^31 positions are no default seq_len: without one the load takes at most
 *     DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX (it took 2147483647, and dp.batch then grew to 5.8 GB).
 *   - A config.json whose sizes the weights do not have (hidden_size 4096 over a 32-wide model)
 *     fails on the headers, before the model is allocated: the CPU allocator's peak stays where it
 *     was (it allocated and filled 1.2 GB first). Parameters larger than the device fail naming
 *     both sizes, before allocating.
 *   - adapter_config.json is read as PEFT reads it: target_modules (a list, a regex, null, bogus
 *     names, an empty list, numbers, a per-block selection), fan_in_fan_out, layers_to_transform,
 *     modules_to_save, a rank past 2^31; the targets must be the adapter tensors present. Weights
 *     holding NaN or inf are refused naming the tensor. adapter_model.safetensors without its
 *     config (missing, a dangling link, a directory) is refused (it loaded as a plain model that
 *     trained every parameter).
 *   - checkpoint = 3 on a 2-layer model is refused naming the valid range.
 *   - Messages: a NaN or 1e999 in config.json, model.safetensors linked to /dev/urandom, an index
 *     with an empty weight_map each say what is wrong and where. */
#include "check.h"
#include "test_hf_ref.h"
#include "test_util.h"

#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "memory.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fixtures[1024];
static char tmpdir[64];
static dp_device *cpu;

static void path_in(char *out, size_t n, const char *dir, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* dir/name gets fixtures/from. */
static void copy_in(const char *dir, const char *name, const char *from) {
    char src[1200], dst[512];
    snprintf(src, sizeof src, "%s/%s", fixtures, from);
    path_in(dst, sizeof dst, dir, name);
    copy_file(src, dst);
}

/* A fresh directory tmpdir/name holding the llama fixture (and its PEFT adapters with adapters). */
static void llama_dir(char *dir, size_t n, const char *name, int adapters) {
    snprintf(dir, n, "%s/%s", tmpdir, name);
    CHECK(mkdir(dir, 0777) == 0);
    copy_in(dir, "config.json", "llama/config.json");
    copy_in(dir, "model.safetensors", "llama/model.safetensors");
    if (adapters) {
        copy_in(dir, "adapter_config.json", "peft/llama/adapter_config.json");
        copy_in(dir, "adapter_model.safetensors", "peft/llama/adapter_model.safetensors");
    }
}

/* dir/name with text */
static void write_in(const char *dir, const char *name, const char *text) {
    char path[512];
    path_in(path, sizeof path, dir, name);
    write_file(path, text);
}

/* dir's config.json with one key's value replaced (the key must be in it). */
static void llama_config_with(const char *dir, const char *key, const char *value) {
    char src[1200], *text = NULL;
    snprintf(src, sizeof src, "%s/config.json", dir);
    FILE *fp = fopen(src, "rb");
    CHECK(fp != NULL);
    if (!fp) return;
    text = calloc(1, 8192);
    size_t n = fread(text, 1, 8191, fp);
    fclose(fp);
    text[n] = 0;
    char pattern[128], *out = calloc(1, 8192);
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    char *at = strstr(text, pattern);
    CHECK(at != NULL);
    if (at) {
        char *end = at + strlen(pattern);
        while (*end && *end != ',' && *end != '\n') end++;
        snprintf(out, 8192, "%.*s%s%s%s", (int)(at - text), text, pattern, value, end);
        write_in(dir, "config.json", out);
    }
    free(out);
    free(text);
}

/* Loads dir with opts; must fail with code and a message holding w1 (and w2), leaving no model. */
static void expect_error(const char *dir, const dp_model_load_opts *opts, int code, const char *w1, const char *w2) {
    dp_model *m = NULL;
    int rc = dp_model_load(cpu, dir, opts, &m);
    const char *msg = dp_error_message();
    if (rc != code || m || !strstr(msg, w1) || (w2 && !strstr(msg, w2))) {
        fprintf(stderr, "load of %s: status %d (want %d), message '%s' (want '%s', '%s')\n", dir, rc, code,
                rc ? msg : "", w1, w2 ? w2 : "");
        check_failures++;
    }
    dp_model_free(m);
}

/* ---- item 3: a bounded default seq_len ----------------------------------------------------- */

static void test_seq_len_default(void) {
    char dir[256];
    llama_dir(dir, sizeof dir, "positions", 0);
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(cpu, dir, NULL, &m));
    if (m) CHECK_EQ_U64(dp_model_config_of(m)->seq_len, 16); /* the file's 16 positions, under the cap */
    dp_model_free(m);
    llama_config_with(dir, "max_position_embeddings", "2147483647");
    m = NULL;
    CHECK_OK(dp_model_load(cpu, dir, NULL, &m));
    if (m) {
        CHECK_EQ_U64(DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX, 4096);
        CHECK_EQ_U64(dp_model_config_of(m)->seq_len, DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX);
        CHECK_EQ_U64(dp_model_config_of(m)->max_positions, 2147483647);
    }
    dp_model_free(m);
    /* asked for, the positions are the user's to take */
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 100000;
    m = NULL;
    CHECK_OK(dp_model_load(cpu, dir, &o, &m));
    if (m) CHECK_EQ_U64(dp_model_config_of(m)->seq_len, 100000);
    dp_model_free(m);
}

/* ---- item 9: the headers before the allocation; the device's memory before the allocation ---- */

static void test_headers_first(void) {
    char dir[256];
    llama_dir(dir, sizeof dir, "claims", 0);
    /* 4096 wide with the 88-wide MLP: embed_tokens alone would be 96 x 4096 f32 and every
     * projection 4096 x 4096 or 88 x 4096; the file's are 32 wide */
    llama_config_with(dir, "hidden_size", "4096");
    llama_config_with(dir, "head_dim", "1024");
    dp_mem_stats before, after;
    dp_mem_reset_peak(cpu->mem);
    dp_mem_get_stats(cpu->mem, &before);
    expect_error(dir, NULL, DP_EINVAL, "model.embed_tokens.weight' has shape [96x32]", "needs [96x4096]");
    dp_mem_get_stats(cpu->mem, &after);
    CHECK(after.total_peak - before.total_current < 4096); /* nothing of the 2.3 MB the model would take */
    CHECK_EQ_U64(after.n_allocs, before.n_allocs);

    /* parameters that cannot fit the device: refused naming both sizes, nothing allocated */
    llama_dir(dir, sizeof dir, "toolarge", 0);
    dp_mem_set_limit(cpu->mem, before.total_current + 65536);
    dp_mem_get_stats(cpu->mem, &before);
    expect_error(dir, NULL, DP_EOOM, "the model's parameters need 0.000 GiB (125568 bytes", "cpu device has");
    dp_mem_get_stats(cpu->mem, &after);
    CHECK_EQ_U64(after.n_allocs, before.n_allocs);
    dp_model *m = NULL;
    /* sizes whose product passes 2^64 (vocab 2^31 x hidden 2^40) saturate: refused, not wrapped */
    llama_config_with(dir, "vocab_size", "2147483647");
    llama_config_with(dir, "hidden_size", "1099511627776");
    llama_config_with(dir, "head_dim", "8");
    char weights[512];
    path_in(weights, sizeof weights, dir, "model.safetensors");
    CHECK(unlink(weights) == 0); /* config.json alone, on the plan device (its limit: 1 GiB) */
    dp_device *plan = NULL;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    dp_mem_set_limit(plan->mem, 1ull << 30);
    m = NULL;
    CHECK(dp_model_load(plan, dir, NULL, &m) == DP_EOOM && m == NULL);
    CHECK(strstr(dp_error_message(), "(18446744073709551615 bytes, from config.json's sizes) but the plan device has "
                                     "1.000 GiB") != NULL);
    dp_mem_set_limit(plan->mem, 0);
    /* 2^40 layers and no file to bound them: refused at once (the header walk went through every
     * block on the plan device: hours) */
    llama_config_with(dir, "vocab_size", "96");
    llama_config_with(dir, "hidden_size", "32");
    llama_config_with(dir, "num_hidden_layers", "1099511627776");
    m = NULL;
    CHECK(dp_model_load(plan, dir, NULL, &m) == DP_EINVAL && m == NULL);
    CHECK(strstr(dp_error_message(), "'layers' 1099511627776 is too many (at most 100000)") != NULL);
    llama_config_with(dir, "num_hidden_layers", "100000"); /* the most: block 0 stands for them all */
    CHECK_OK(dp_model_load(plan, dir, NULL, &m));
    dp_model_free(m);
    copy_in(dir, "config.json", "llama/config.json");
    copy_in(dir, "model.safetensors", "llama/model.safetensors");
    dp_mem_set_limit(cpu->mem, 0);
    CHECK_OK(dp_model_load(cpu, dir, NULL, &m)); /* the same checkpoint, the limit lifted */
    dp_model_free(m);
}

/* ---- item 4: adapter_config.json as PEFT reads it ------------------------------------------ */

/* adapter_config.json for the llama fixture's adapters (r 4 on q, k, v, o, down) with target
 * and extra keys (first: cJSON reads a key's first occurrence). */
static void adapter_config(const char *dir, const char *targets, const char *extra) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"target_modules\": %s%s, \"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"bias\": \"none\", "
             "\"fan_in_fan_out\": false}",
             targets, extra);
    write_in(dir, "adapter_config.json", text);
}

static void expect_adapters_load(const char *dir) {
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(cpu, dir, NULL, &m));
    if (m) {
        CHECK_EQ_U64(dp_model_config_of(m)->lora_rank, 4);
        CHECK_EQ_U64(dp_model_config_of(m)->lora_targets, DP_LORA_QKV | DP_LORA_O | DP_LORA_DOWN);
    }
    dp_model_free(m);
}

static void test_adapter_keys(void) {
    char dir[256], cfgpath[512];
    llama_dir(dir, sizeof dir, "peft", 1);
    path_in(cfgpath, sizeof cfgpath, dir, "adapter_config.json");
    expect_adapters_load(dir); /* PEFT's own file */
    const char *all = "[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", \"down_proj\"]";
    /* honoured: a regex PEFT full-matches, full module names, layers_to_transform naming every layer */
    adapter_config(dir, "\".*\\\\.(q_proj|k_proj|v_proj|o_proj|down_proj)\"", "");
    expect_adapters_load(dir);
    adapter_config(dir, "[\"self_attn.q_proj\", \"self_attn.k_proj\", \"v_proj\", \"o_proj\", \"mlp.down_proj\"]", "");
    expect_adapters_load(dir);
    /* Python's re as PEFT writes it: \d, \w, (?:...), a class */
    adapter_config(dir, "\"model\\\\.layers\\\\.\\\\d+\\\\.(?:self_attn\\\\.[qkvo]_proj|mlp\\\\.down_\\\\w+)\"", "");
    expect_adapters_load(dir);
    adapter_config(dir, all, ", \"layers_to_transform\": [1, 0], \"modules_to_save\": [], \"exclude_modules\": null");
    expect_adapters_load(dir);

    static const struct {
        const char *targets, *extra;
        int code;
        const char *w1, *w2;
    } cases[] = {
        {"[\"bogus\"]", "", DP_EINVAL, "'target_modules' names 'bogus'", "no module of this llama model"},
        {"[\"q_proj\", \"bogus\"]", "", DP_EINVAL, "'bogus'", NULL},
        {"[]", "", DP_EINVAL, "'target_modules' is an empty list", NULL},
        {"[1, 2]", "", DP_EINVAL, "'target_modules' entry 1 is not a module name", NULL},
        {"7", "", DP_EINVAL, "'target_modules' must be a list of module names", NULL},
        {"\"q_proj\"", "", DP_EINVAL, "'target_modules' selects no linear", NULL}, /* a regex: the whole name */
        {"\"(q_proj\"", "", DP_EINVAL, "is not a regular expression", NULL},
        /* nested counts compiled for 20 s into 4 GB before they were refused */
        {"\"((((a{1,100}){1,100}){1,100}){1,100})\"", "", DP_EINVAL, "has a {m,n} repetition count", NULL},
        {"\".*(?<!k)_proj\"", "", DP_EINVAL, "has a (?...) group other than (?:...)", NULL},
        {"\".*\\\\bq_proj\"", "", DP_EINVAL, "has an escape with no POSIX form", NULL},
        {"\".*[\\\\d]_proj\"", "", DP_EINVAL, "has an escape inside [...]", NULL},
        {"[\"q_proj\", \"v_proj\"]", "", DP_EINVAL, "'target_modules' selects q_proj, v_proj but",
         "holds adapters on q_proj, k_proj, v_proj, o_proj, down_proj"},
        {"null", "", DP_EINVAL, "selects q_proj, v_proj but", NULL}, /* PEFT's llama default */
        {"\"all-linear\"", "", DP_EINVAL, "selects q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", NULL},
        {"\"model\\\\.layers\\\\.0\\\\..*_proj\"", "", DP_ENOTSUP, "in block 0 but none in block 1", NULL},
        {"[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", \"down_proj\", \"lm_head\"]", "", DP_ENOTSUP,
         "selects 'lm_head', which dpprof cannot adapt", NULL},
        {NULL, ", \"fan_in_fan_out\": true", DP_EINVAL, "'fan_in_fan_out' must be false for llama", NULL},
        {NULL, ", \"fan_in_fan_out\": \"yes\"", DP_EINVAL, "'fan_in_fan_out' must be true or false", NULL},
        {NULL, ", \"layers_to_transform\": [0]", DP_ENOTSUP, "'layers_to_transform' adapts 1 of the 2 layers", NULL},
        {NULL, ", \"layers_to_transform\": 1", DP_ENOTSUP, "adapts 1 of the 2 layers", NULL},
        {NULL, ", \"layers_to_transform\": [0, 5]", DP_EINVAL, "not a layer index (0..1)", NULL},
        {NULL, ", \"layers_to_transform\": [1, 1, 1]", DP_ENOTSUP, "adapts 1 of the 2 layers", NULL},
        {NULL, ", \"layers_to_transform\": \"0\"", DP_EINVAL, "'layers_to_transform' must be null", NULL},
        {NULL, ", \"modules_to_save\": [\"lm_head\"]", DP_ENOTSUP, "'modules_to_save' is not supported", NULL},
        {NULL, ", \"exclude_modules\": [\"q_proj\"]", DP_ENOTSUP, "'exclude_modules' is not supported", NULL},
        {NULL, ", \"layer_replication\": [[0, 2]]", DP_ENOTSUP, "'layer_replication'", NULL},
        {NULL, ", \"r\": 2147483648", DP_EINVAL, "'r' must be an integer in 1..1048576 (got 2147483648)", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        adapter_config(dir, cases[i].targets ? cases[i].targets : all, cases[i].extra);
        expect_error(dir, NULL, cases[i].code, cases[i].w1, cases[i].w2);
        if (cases[i].code == DP_EINVAL || cases[i].code == DP_ENOTSUP) {
            const char *msg = dp_error_message();
            if (!strstr(msg, cfgpath)) fprintf(stderr, "case %zu: '%s' does not name %s\n", i, msg, cfgpath);
            CHECK(strstr(msg, "adapter_config.json") != NULL);
        }
    }
    copy_in(dir, "adapter_config.json", "peft/llama/adapter_config.json");
    expect_adapters_load(dir);
    /* 2^40 layers in config.json: the adapters' file bounds them before target_modules is
     * matched against every block (a loop of 2^40 blocks otherwise) */
    llama_config_with(dir, "num_hidden_layers", "1099511627776");
    expect_error(dir, NULL, DP_EINVAL, "holds 20 tensors, too few for adapters on 1099511627776 layers", NULL);
    copy_in(dir, "config.json", "llama/config.json");
}

/* Rewrites the safetensors file at path with tensor `name`'s values set to v (all of them). */
static void poison(const char *path, const char *name, float v) {
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    if (!f) return;
    int n = dp_st_count(f);
    dp_st_entry *e = calloc((size_t)n, sizeof *e);
    float **data = calloc((size_t)n, sizeof *data);
    int found = 0;
    for (int i = 0; i < n; i++) {
        const dp_st_tensor *t = dp_st_at(f, i);
        data[i] = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        CHECK_OK(dp_st_read_f32(f, t, data[i], t->numel));
        if (strcmp(t->name, name) == 0) {
            found = 1;
            for (int64_t k = 0; k < t->numel; k++) data[i][k] = v;
        }
        e[i].name = t->name;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof t->shape);
        e[i].get = dp_st_get_host_f32;
        e[i].ctx = data[i];
    }
    CHECK(found);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    CHECK_OK(dp_st_write_f32(tmp, e, n, NULL));
    dp_st_close(f);
    CHECK(rename(tmp, path) == 0);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(e);
}

static void test_non_finite(void) {
    char dir[256], path[512];
    llama_dir(dir, sizeof dir, "nan", 1);
    path_in(path, sizeof path, dir, "adapter_model.safetensors");
    poison(path, "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight", NAN);
    expect_error(dir, NULL, DP_EINVAL, "tensor 'base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight' holds a "
                 "non-finite value (nan at element 0)", "adapter_model.safetensors");
    llama_dir(dir, sizeof dir, "inf", 0);
    path_in(path, sizeof path, dir, "model.safetensors");
    poison(path, "model.norm.weight", INFINITY);
    expect_error(dir, NULL, DP_EINVAL, "tensor 'model.norm.weight' holds a non-finite value (inf", NULL);
}

/* ---- item 8: adapters without their config -------------------------------------------------- */

static void test_adapters_without_config(void) {
    char dir[256], path[512];
    llama_dir(dir, sizeof dir, "noconfig", 1);
    path_in(path, sizeof path, dir, "adapter_config.json");
    CHECK(unlink(path) == 0);
    expect_error(dir, NULL, DP_EINVAL, "adapter_model.safetensors is there but adapter_config.json is not", NULL);
    CHECK(symlink("/nonexistent/adapter_config.json", path) == 0); /* dangling */
    expect_error(dir, NULL, DP_EIO, "adapter_config.json", NULL);
    CHECK(unlink(path) == 0);
    CHECK(mkdir(path, 0777) == 0);
    expect_error(dir, NULL, DP_EIO, "adapter_config.json", "directory");
    CHECK(rmdir(path) == 0);
    CHECK(symlink("/dev/null", path) == 0);
    expect_error(dir, NULL, DP_EIO, "adapter_config.json", NULL);
    CHECK(unlink(path) == 0);
    /* the weights as a dangling link, with or without the config: refused, not skipped */
    path_in(path, sizeof path, dir, "adapter_model.safetensors");
    CHECK(unlink(path) == 0);
    CHECK(symlink("/nonexistent/adapter_model.safetensors", path) == 0);
    expect_error(dir, NULL, DP_EINVAL, "adapter_config.json is not", NULL);
}

/* ---- item 7: checkpoint past the layers ----------------------------------------------------- */

static void test_checkpoint_range(void) {
    char dir[256];
    llama_dir(dir, sizeof dir, "ckpt", 0);
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.checkpoint = 3;
    expect_error(dir, &o, DP_EINVAL, "'checkpoint' 3 is more than the model's 2 layers",
                 "\"blocks\" or N in 1..2");
    o.checkpoint = 2;
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(cpu, dir, &o, &m));
    dp_model_free(m);
}

/* ---- item 11: messages ---------------------------------------------------------------------- */

static void test_messages(void) {
    char dir[256], path[512];
    llama_dir(dir, sizeof dir, "messages", 0);
    path_in(path, sizeof path, dir, "config.json");
    write_in(dir, "config.json", "{\"model_type\": \"llama\",\n  \"vocab_size\": NaN}");
    expect_error(dir, NULL, DP_EINVAL, "config.json: invalid JSON at line 2, column 17 (near 'NaN}')",
                 "JSON has no NaN or Infinity");
    copy_in(dir, "config.json", "llama/config.json");
    llama_config_with(dir, "hidden_size", "1e999");
    expect_error(dir, NULL, DP_EINVAL, "config.json: 'hidden_size' is a number above 1.8e308", "must be finite");
    write_in(dir, "config.json", "[1, 2]");
    expect_error(dir, NULL, DP_EINVAL, "config.json: the top level is not a JSON object", NULL);
    copy_in(dir, "config.json", "llama/config.json");

    path_in(path, sizeof path, dir, "model.safetensors");
    CHECK(unlink(path) == 0);
    CHECK(symlink("/dev/urandom", path) == 0);
    expect_error(dir, NULL, DP_EIO, "model.safetensors", "not a regular file");
    CHECK(unlink(path) == 0);
    write_in(dir, "model.safetensors.index.json", "{\"metadata\": {}, \"weight_map\": {}}");
    expect_error(dir, NULL, DP_EINVAL, "model.safetensors.index.json: 'weight_map' is empty", NULL);
}

int main(void) {
    alarm(120); /* a walk over config.json's layers fails here, not in ctest */
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_fixture_dir(fixtures, sizeof fixtures, "hf");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dpprof-hostile-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_seq_len_default();
    test_headers_first();
    test_adapter_keys();
    test_non_finite();
    test_adapters_without_config();
    test_checkpoint_range();
    test_messages();
    dp_engine_shutdown();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_checkpoint_hostile");
}
