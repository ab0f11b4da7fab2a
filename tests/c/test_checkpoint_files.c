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
 *     default). */
#include "check.h"
#include "test_hf_ref.h"
#include "test_util.h"

#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"

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
    dp_engine_shutdown();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_checkpoint_files");
}
