/* test_checkpoint_files.c: what a checkpoint directory holds that could hang, exhaust or fool the
 * loader (issue 13 items 10 and 12).
 *   - A sharded checkpoint (model.safetensors.index.json) loads the same tensors, bit for bit, as
 *     the single file it was split from, with a weight_map of 300,000 entries (HF's index of a
 *     large model has tens of thousands; the loader once compared every entry with every earlier
 *     one: 100k entries took 29.6 s, 300k would take about 270 s, past this test's 120 s limit;
 *     a sort takes well under a second).
 *   - A shard that is a FIFO, a directory or a device is refused without blocking (the open used
 *     to wait for a writer forever; an alarm ends the test after 120 s instead of hanging it).
 *   - A load that fails frees what it took (each failed dp_model_load leaked 16 bytes when the
 *     single weights file did not open: LeakSanitizer fails the ASan build's run).
 *   - config.json and adapter_config.json keys of the wrong type are refused naming the key (a
 *     non-string hidden_act, rope_type, model_type or peft_type used to fall back silently to the
 *     default).
 *   - What a save writes for others to load (issue 38.7): config.json's bos/eos/pad_token_id and
 *     generation_config.json as transformers reads them (tests/fixtures/hf/saved/expect.json, made
 *     by gen_saved.py from the fixtures' configs), the source's generation_config.json carried
 *     over, and for a model made from a shape the ids present and null (absent, transformers fills
 *     in GPT-2's 50256, outside a small vocabulary: generation no longer stopped). */
#include "check.h"
#include "test_hf_ref.h"
#include "test_util.h"

#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAP_ENTRIES 300000

static char fixtures[1024];
static char tmpdir[64];
static dp_device *cpu;

static void path_in(char *out, size_t n, const char *dir, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* ---- shards --------------------------------------------------------------------------------- */

/* Writes the tensors [from, to) of f to path as an F32 safetensors file. */
static void write_shard(dp_st_file *f, int from, int to, const char *path) {
    int n = to - from;
    dp_st_entry *e = calloc((size_t)n, sizeof *e);
    float **data = calloc((size_t)n, sizeof *data);
    for (int i = 0; i < n; i++) {
        const dp_st_tensor *t = dp_st_at(f, from + i);
        data[i] = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        CHECK_OK(dp_st_read_f32(f, t, data[i], t->numel));
        e[i].name = t->name;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof t->shape);
        e[i].get = dp_st_get_host_f32;
        e[i].ctx = data[i];
    }
    CHECK_OK(dp_st_write_f32(path, e, n, NULL));
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(e);
}

/* The index: every real tensor mapped to its shard, then `filler` made-up names alternating
 * between the shards (the loader opens each file once, in order of first appearance). */
static void write_index(const char *path, dp_st_file *f, int split, int filler, const char *extra_shard) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    fputs("{\"metadata\": {\"total_size\": 0}, \"weight_map\": {\n", fp);
    for (int i = 0; i < dp_st_count(f); i++)
        fprintf(fp, "  \"%s\": \"%s\",\n", dp_st_at(f, i)->name,
                i < split ? "model-1.safetensors" : "model-2.safetensors");
    if (extra_shard) fprintf(fp, "  \"extra.weight\": \"%s\",\n", extra_shard);
    for (int i = 0; i < filler; i++) fprintf(fp, "  \"filler.%d.weight\": \"model-%d.safetensors\",\n", i, 1 + (i & 1));
    fputs("  \"last.weight\": \"model-1.safetensors\"\n}}\n", fp);
    fclose(fp);
}

static void check_same_params(dp_model *a, dp_model *b) {
    CHECK_EQ_U64(dp_model_param_count(a), dp_model_param_count(b));
    for (int i = 0; i < dp_model_param_count(a) && i < dp_model_param_count(b); i++) {
        const dp_tensor *x = &dp_model_param(a, i)->value, *y = &dp_model_param(b, i)->value;
        CHECK(x->numel == y->numel && memcmp(x->data, y->data, (size_t)x->numel * sizeof(float)) == 0);
    }
}

static void test_shards(void) {
    char single[1100], dir[256], path[512], src[1200];
    snprintf(single, sizeof single, "%s/gpt2", fixtures);
    snprintf(dir, sizeof dir, "%s/sharded", tmpdir);
    CHECK(mkdir(dir, 0777) == 0);
    path_in(src, sizeof src, single, "config.json");
    path_in(path, sizeof path, dir, "config.json");
    copy_file(src, path);
    path_in(src, sizeof src, single, "model.safetensors");
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(src, &f));
    if (!f) return;
    int split = dp_st_count(f) / 2;
    path_in(path, sizeof path, dir, "model-1.safetensors");
    write_shard(f, 0, split, path);
    path_in(path, sizeof path, dir, "model-2.safetensors");
    write_shard(f, split, dp_st_count(f), path);
    char index[512];
    path_in(index, sizeof index, dir, "model.safetensors.index.json");
    write_index(index, f, split, MAP_ENTRIES, NULL);

    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 8;
    dp_model *a = NULL, *b = NULL;
    CHECK_OK(dp_model_load(cpu, single, &o, &a));
    CHECK_OK(dp_model_load(cpu, dir, &o, &b));
    if (a && b) check_same_params(a, b);
    dp_model_free(b);

    /* a shard that is not a regular file: refused, never waited on */
    char fifo[512];
    path_in(fifo, sizeof fifo, dir, "fifo.safetensors");
    CHECK(mkfifo(fifo, 0600) == 0);
    write_index(index, f, split, 10, "fifo.safetensors");
    expect_load_error(cpu, dir, DP_EIO, "fifo.safetensors", "a FIFO");
    path_in(path, sizeof path, dir, "subdir.safetensors");
    CHECK(mkdir(path, 0777) == 0);
    write_index(index, f, split, 10, "subdir.safetensors");
    expect_load_error(cpu, dir, DP_EIO, "subdir.safetensors", "a directory");
    write_index(index, f, split, 10, "../gpt2.safetensors");
    expect_load_error(cpu, dir, DP_EINVAL, "'extra.weight' maps to a bad file name", NULL);
    write_index(index, f, split, 10, "");
    expect_load_error(cpu, dir, DP_EINVAL, "'extra.weight' maps to a bad file name", NULL);
    /* the single weights file as a FIFO: refused without blocking, naming what it is (it used to
     * read "no weights", as if nothing were there; issue 26 item 11) */
    unlink(index);
    path_in(path, sizeof path, dir, "model.safetensors");
    CHECK(mkfifo(path, 0600) == 0);
    expect_load_error(cpu, dir, DP_EIO, "model.safetensors", "a FIFO, not a regular file");
    unlink(path);
    /* a single weights file that does not open: nothing leaks (LeakSanitizer) */
    write_file(path, "short");
    expect_load_error(cpu, dir, DP_EINVAL, "too short for a safetensors file", NULL);
    unlink(path);
    dp_st_close(f);
    dp_model_free(a);
}

/* ---- key types ------------------------------------------------------------------------------ */

static void test_key_types(void) {
    char dir[256], path[512], src[1200];
    snprintf(dir, sizeof dir, "%s/types", tmpdir);
    CHECK(mkdir(dir, 0777) == 0);
    path_in(path, sizeof path, dir, "config.json");
    static const char *const llama =
        "{\"model_type\": \"llama\", \"vocab_size\": 96, \"hidden_size\": 32, \"intermediate_size\": 88,"
        "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 16";
    static const char *const gpt2 =
        "{\"model_type\": \"gpt2\", \"vocab_size\": 96, \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 4, "
        "\"n_positions\": 16";
    static const struct {
        const char *base, *extra, *key;
    } cases[] = {
        {llama, ", \"hidden_act\": 5}", "'hidden_act' must be a string"},
        {llama, ", \"hidden_act\": [\"silu\"]}", "'hidden_act' must be a string"},
        {llama, ", \"rope_scaling\": {\"rope_type\": 7, \"factor\": 4.0}}", "'rope_type' must be a string"},
        {llama, ", \"rope_scaling\": {\"type\": true}}", "'type' must be a string"},
        {llama, ", \"rope_parameters\": {\"rope_type\": {}}}", "'rope_type' must be a string"},
        {gpt2, ", \"activation_function\": 1}", "'activation_function' must be a string"},
        {"{\"model_type\": 2", "}", "'model_type' must be a string"},
    };
    char text[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(text, sizeof text, "%s%s", cases[i].base, cases[i].extra);
        write_file(path, text);
        expect_load_error(cpu, dir, DP_EINVAL, path, cases[i].key);
    }
    /* a valid config beside them loads (the cases fail for their key alone) */
    snprintf(text, sizeof text, "%s, \"hidden_act\": \"silu\", \"rope_scaling\": null}", llama);
    write_file(path, text);
    dp_model_config cfg;
    CHECK_OK(dp_model_config_read(dir, &cfg));

    /* adapter_config.json: peft_type and bias are strings */
    snprintf(src, sizeof src, "%s/gpt2/config.json", fixtures);
    copy_file(src, path);
    char adapter[512];
    path_in(adapter, sizeof adapter, dir, "adapter_config.json");
    write_file(adapter, "{\"peft_type\": 3, \"r\": 2}");
    expect_load_error(cpu, dir, DP_EINVAL, adapter, "'peft_type' must be a string");
    write_file(adapter, "{\"peft_type\": \"LORA\", \"r\": 2, \"bias\": false}");
    expect_load_error(cpu, dir, DP_EINVAL, adapter, "'bias' must be a string");
    unlink(adapter);
}

/* ---- what a save writes beside the weights ---------------------------------------------------- */


static const char *const TOKEN_KEYS[3] = {"bos_token_id", "eos_token_id", "pad_token_id"};

/* dir/file's key is present and equal to want (NULL: present and null); what names the case. */
static void expect_key(const char *what, const cJSON *file, const char *name, const char *key, const cJSON *want) {
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(file, key);
    int ok = got && (want ? cJSON_Compare(got, want, 1) : cJSON_IsNull(got));
    if (!ok) {
        char *g = got ? cJSON_PrintUnformatted(got) : NULL, *w = want ? cJSON_PrintUnformatted(want) : NULL;
        fprintf(stderr, "%s: %s's '%s' is %s, want %s\n", what, name, key, g ? g : "absent", w ? w : "null");
        cJSON_free(g);
        cJSON_free(w);
        check_failures++;
    }
}

/* The saved dir's config.json and generation_config.json token ids: config's as `config` (an
 * object of the three; NULL: all null), generation's as `generation` (HF's from_model_config
 * output: a key it omits, a None, must be null or absent; NULL: all null). */
static void expect_saved_ids(const char *what, const char *dir, const cJSON *config, const cJSON *generation) {
    char path[512];
    path_in(path, sizeof path, dir, "config.json");
    cJSON *c = test_read_json(path);
    path_in(path, sizeof path, dir, "generation_config.json");
    cJSON *g = test_read_json(path);
    for (int i = 0; c && g && i < 3; i++) {
        const cJSON *want = config ? cJSON_GetObjectItemCaseSensitive(config, TOKEN_KEYS[i]) : NULL;
        expect_key(what, c, "config.json", TOKEN_KEYS[i], want && !cJSON_IsNull(want) ? want : NULL);
        want = generation ? cJSON_GetObjectItemCaseSensitive(generation, TOKEN_KEYS[i]) : NULL;
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(g, TOKEN_KEYS[i]);
        if (want || (got && !cJSON_IsNull(got))) expect_key(what, g, "generation_config.json", TOKEN_KEYS[i], want);
    }
    cJSON_Delete(c);
    cJSON_Delete(g);
}

static dp_model *load8(const char *dir) {
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 8;
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(cpu, dir, &o, &m));
    return m;
}

static void test_saved_ids(void) {
    char path[1200], dir[256], src[1200];
    snprintf(path, sizeof path, "%s/saved/expect.json", fixtures);
    cJSON *expect = test_read_json(path);
    if (!expect) return;
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(expect, "models");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(expect, "shape");
    int64_t V = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(expect, "vocab"));
    CHECK(cJSON_GetArraySize(models) == 3 && cJSON_GetArraySize(shape) == 2 && V == 64);

    /* a fixture base (config.json from transformers): its ids carried over, generation_config.json
     * as save_pretrained would write it */
    for (const cJSON *e = models ? models->child : NULL; e; e = e->next) {
        char base[1100];
        snprintf(base, sizeof base, "%s/%s", fixtures, e->string);
        snprintf(dir, sizeof dir, "%s/saved-%s", tmpdir, e->string);
        dp_model *m = load8(base);
        if (!m) continue;
        CHECK_OK(dp_model_save(m, dir));
        dp_model_free(m);
        expect_saved_ids(e->string, dir, cJSON_GetObjectItemCaseSensitive(e, "config"),
                         cJSON_GetObjectItemCaseSensitive(e, "generation_config"));
        path_in(path, sizeof path, dir, "generation_config.json");
        cJSON *g = test_read_json(path);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "_from_model_config")));
        cJSON_Delete(g);
        m = load8(dir); /* and it loads back */
        dp_model_free(m);
    }

    /* a model made from a shape: the ids there and null; absent, transformers would fill in its
     * defaults (GPT-2's 50256, outside the vocabulary) */
    const cJSON *gpt_absent =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(shape, "gpt"), "absent");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(gpt_absent, "eos_token_id")) >= (double)V);
    static const struct {
        const char *name;
        dp_arch arch;
    } arches[] = {{"gpt", DP_ARCH_GPT}, {"llama", DP_ARCH_LLAMA}};
    for (size_t i = 0; i < 2; i++) {
        dp_model_config cfg;
        dp_model_config_default(&cfg, arches[i].arch);
        cfg.vocab = V;
        cfg.hidden = 16;
        cfg.layers = 1;
        cfg.heads = 2;
        cfg.seq_len = 8;
        cfg.batch = 1;
        cfg.lora_rank = 2;
        cfg.lora_alpha = 2;
        cfg.lora_targets = DP_LORA_QKV;
        dp_model *m = NULL;
        CHECK_OK(dp_model_new(cpu, &cfg, &m));
        if (!m) continue;
        snprintf(dir, sizeof dir, "%s/shape-%s", tmpdir, arches[i].name);
        CHECK_OK(dp_model_save(m, dir));
        const cJSON *null =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(shape, arches[i].name), "null");
        for (int k = 0; k < 3; k++) CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(null, TOKEN_KEYS[k])));
        expect_saved_ids(arches[i].name, dir, NULL, NULL);
        /* its adapters' base is this directory's own config.json and model.safetensors */
        path_in(path, sizeof path, dir, "adapter_config.json");
        cJSON *a = test_read_json(path);
        char *here = realpath(dir, NULL);
        const cJSON *named = cJSON_GetObjectItemCaseSensitive(a, "base_model_name_or_path");
        CHECK(here && cJSON_IsString(named) && strcmp(named->valuestring, here) == 0);
        free(here);
        cJSON_Delete(a);
        /* ids of the caller's (an experiment's documents' eos), within the vocabulary only */
        dp_model_save_opts so;
        dp_model_save_opts_default(&so);
        so.eos_token_id = 3;
        CHECK_OK(dp_model_save_with(m, dir, &so));
        cJSON *three = cJSON_CreateObject();
        cJSON_AddNullToObject(three, "bos_token_id");
        cJSON_AddNumberToObject(three, "eos_token_id", 3);
        expect_saved_ids(arches[i].name, dir, three, three);
        cJSON_Delete(three);
        so.eos_token_id = V;
        CHECK(dp_model_save_with(m, dir, &so) == DP_EINVAL &&
              strstr(dp_error_message(),
                     "'eos_token_id' must be a token id from 0 to 63 (the vocabulary of 64; got 64)"));
        char fresh[300];
        snprintf(fresh, sizeof fresh, "%s-refused", dir);
        CHECK(dp_model_save_with(m, fresh, &so) == DP_EINVAL && access(fresh, F_OK) != 0); /* nothing made */
        so.eos_token_id = -1;
        so.pad_token_id = -2;
        CHECK(dp_model_save_with(m, dir, &so) == DP_EINVAL && strstr(dp_error_message(), "'pad_token_id'"));
        dp_model_free(m);
    }

    /* the source's generation_config.json: carried over whole (a caller's id in place of its own) */
    char ck[256];
    snprintf(ck, sizeof ck, "%s/with-generation", tmpdir);
    CHECK(mkdir(ck, 0777) == 0);
    snprintf(src, sizeof src, "%s/gpt2/model.safetensors", fixtures);
    path_in(path, sizeof path, ck, "model.safetensors");
    copy_file(src, path);
    snprintf(src, sizeof src, "%s/gpt2/config.json", fixtures);
    cJSON *config = test_read_json(src);
    for (int k = 0; config && k < 3; k++) cJSON_DeleteItemFromObjectCaseSensitive(config, TOKEN_KEYS[k]);
    char *text = config ? cJSON_Print(config) : NULL;
    path_in(path, sizeof path, ck, "config.json");
    if (text) write_file(path, text);
    cJSON_free(text);
    cJSON_Delete(config);
    static const char *const generation =
        "{\"bos_token_id\": 95, \"eos_token_id\": [95, 7], \"max_new_tokens\": 5, \"do_sample\": false, "
        "\"transformers_version\": \"5.24.0\"}";
    path_in(path, sizeof path, ck, "generation_config.json");
    write_file(path, generation);
    cJSON *want = cJSON_Parse(generation);
    dp_model *m = load8(ck);
    snprintf(dir, sizeof dir, "%s/saved-with-generation", tmpdir);
    if (m) CHECK_OK(dp_model_save(m, dir));
    expect_saved_ids("no ids in config.json", dir, NULL, want); /* config.json's: there, null */
    path_in(path, sizeof path, dir, "generation_config.json");
    cJSON *got = test_read_json(path);
    CHECK(got && cJSON_Compare(got, want, 1));
    if (m) CHECK_OK(dp_model_save(m, ck)); /* over its own source: what was read at the load */
    path_in(path, sizeof path, ck, "generation_config.json");
    cJSON_Delete(got);
    got = test_read_json(path);
    CHECK(got && cJSON_Compare(got, want, 1));
    cJSON_Delete(got);
    dp_model_save_opts so;
    dp_model_save_opts_default(&so);
    so.eos_token_id = 7;
    if (m) CHECK_OK(dp_model_save_with(m, dir, &so));
    cJSON_ReplaceItemInObjectCaseSensitive(want, "eos_token_id", cJSON_CreateNumber(7));
    path_in(path, sizeof path, dir, "generation_config.json");
    got = test_read_json(path);
    CHECK(got && cJSON_Compare(got, want, 1));
    cJSON_Delete(got);
    cJSON_Delete(want);
    dp_model_free(m);

    /* a malformed one: refused naming it, before anything is built */
    path_in(path, sizeof path, ck, "generation_config.json");
    write_file(path, "[1, 2]");
    expect_load_error(cpu, ck, DP_EINVAL, "generation_config.json", "not a JSON object");
    cJSON_Delete(expect);
}

int main(void) {
    alarm(120); /* a hang (a FIFO opened for reading) or a quadratic index fails here, not in ctest */
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_fixture_dir(fixtures, sizeof fixtures, "hf");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dpprof-ckpt-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_shards();
    test_key_types();
    test_saved_ids();
    dp_engine_shutdown();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_checkpoint_files");
}
