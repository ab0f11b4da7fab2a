/* test_rope_scaling.c: the rotary embedding's inverse frequencies and cos/sin scale for every
 * rope configuration in tests/fixtures/hf/rope_inv_freq.json (made by gen_llama3.py with
 * transformers: default, linear, llama3 as Llama-3.1 and Llama-3.2 ship it, yarn with and
 * without truncation, mscale and an explicit attention factor; in the older `rope_scaling` form
 * and transformers 5's `rope_parameters`), read from config.json as a checkpoint holds them.
 *
 * Tolerance: 5e-7 relative per frequency. transformers computes in f32 (a pow, a division, and
 * for llama3 and yarn a blend of up to 5 rounded operations); dpprof in double, rounded once:
 * at most a few f32 ulps (6e-8 each) apart (measured: 2.8e-7 at worst, llama3's blend). The attention factor to 1e-6
 * (transformers' is a Python double; dpprof's is rounded to f32). Plus the checks a bad rope configuration fails. */
#include "check.h"
#include "test_util.h"

#include "dpprof_engine.h"
#include "error.h"
#include "model.h"
#include "model_io.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FREQ_TOL 5e-7
#define SCALE_TOL 1e-6

static char tmpdir[64];

static cJSON *read_json(const char *path) {
    char *buf = test_read_file(path, NULL);
    cJSON *j = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    return j;
}

/* writes config.json into tmpdir and reads it as a checkpoint's */
static int read_config(const cJSON *config, dp_model_config *cfg) {
    char path[128], *text = cJSON_PrintUnformatted(config);
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    fputs(text, fp);
    fclose(fp);
    cJSON_free(text);
    return dp_model_config_read(tmpdir, cfg);
}

static void check_case(const cJSON *c) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    const cJSON *config = cJSON_GetObjectItem(c, "config"), *want = cJSON_GetObjectItem(c, "inv_freq");
    const double want_scale = cJSON_GetObjectItem(c, "attention_factor")->valuedouble;
    dp_model_config cfg;
    if (read_config(config, &cfg) != DP_OK) {
        fprintf(stderr, "%s: config.json refused: %s\n", name, dp_error_message());
        check_failures++;
        return;
    }
    const int64_t hd = cJSON_GetObjectItem(config, "head_dim")->valueint;
    CHECK_EQ_U64(cfg.head_dim, hd);
    CHECK_EQ_U64(cJSON_GetArraySize(want), hd / 2);
    float *inv_freq = malloc((size_t)(hd / 2) * sizeof *inv_freq), scale = 0;
    CHECK_OK(dp_rope_inv_freq(&cfg, hd, inv_freq, &scale));
    double worst = 0;
    for (int64_t j = 0; j < hd / 2 && j < cJSON_GetArraySize(want); j++) {
        double w = cJSON_GetArrayItem(want, (int)j)->valuedouble;
        worst = fmax(worst, fabs(inv_freq[j] - w) / w);
    }
    const double scale_err = fabs(scale - want_scale) / want_scale;
    printf("  %-28s %-7s hd %3lld: worst inv_freq error %.2g, cos/sin scale %.6g (transformers %.6g)\n", name,
           dp_rope_type_name(cfg.rope.type), (long long)hd, worst, (double)scale, want_scale);
    CHECK(worst <= FREQ_TOL);
    CHECK(scale_err <= SCALE_TOL);
    free(inv_freq);
}

static void expect_refused(const char *json, const char *word) {
    cJSON *config = cJSON_Parse(json);
    dp_model_config cfg;
    int rc = read_config(config, &cfg);
    cfg.seq_len = cfg.batch = 1; /* what a load adds */
    if (rc == DP_OK) rc = dp_model_config_check(&cfg);
    if (rc == DP_OK || !strstr(dp_error_message(), word)) {
        fprintf(stderr, "config %s: status %d, message '%s' (want '%s')\n", json, rc, dp_error_message(), word);
        check_failures++;
    }
    cJSON_Delete(config);
}

#define LLAMA                                                                                                          \
    "\"model_type\": \"llama\", \"vocab_size\": 32, \"hidden_size\": 64, \"intermediate_size\": 64, "                  \
    "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"max_position_embeddings\": 64, "

int main(void) {
    CHECK_OK(dp_engine_init());
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dpprof-rope-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[1200];
    test_fixture_dir(path, sizeof path, "hf/rope_inv_freq.json");
    cJSON *j = read_json(path);
    CHECK(j != NULL);
    const cJSON *cases = j ? cJSON_GetObjectItem(j, "cases") : NULL;
    printf("rope inverse frequencies against transformers %s\n",
           j ? cJSON_GetObjectItem(j, "transformers")->valuestring : "?");
    CHECK(cJSON_GetArraySize(cases) >= 10);
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next) check_case(c);
    cJSON_Delete(j);

    /* one line naming the type and the supported ones; bad values name the key */
    expect_refused("{" LLAMA "\"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 2}}",
                   "rope type 'longrope' is not supported (supported: default, linear, llama3, yarn)");
    expect_refused("{" LLAMA "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8}}",
                   "needs 'rope_parameters.low_freq_factor'");
    expect_refused("{" LLAMA "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
                   "\"high_freq_factor\": 1}}",
                   "'rope_scaling.high_freq_factor' (1) must exceed 'low_freq_factor' (4)");
    expect_refused("{" LLAMA "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": -2}}",
                   "'rope_scaling.factor' must be a positive number");
    expect_refused("{" LLAMA "\"rope_scaling\": {\"rope_type\": \"linear\"}}", "needs 'rope_scaling.factor'");
    expect_refused("{" LLAMA "\"rope_scaling\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}}",
                   "partial_rotary_factor");
    expect_refused("{" LLAMA "\"rope_scaling\": 3}", "'rope_scaling' must be an object");
    /* a model configuration (Lua's dpprof.model) without the original context */
    dp_model_config c;
    dp_model_config_default(&c, DP_ARCH_LLAMA);
    c.vocab = 8, c.hidden = 8, c.layers = 1, c.heads = 2, c.seq_len = 4, c.batch = 1;
    c.rope.type = DP_ROPE_YARN, c.rope.factor = 4;
    CHECK(dp_model_config_check(&c) == DP_EINVAL &&
          strstr(dp_error_message(), "'rope_scaling.original_max_position_embeddings'"));
    c.rope.original_max_positions = 16;
    CHECK_OK(dp_model_config_check(&c));
    dp_model_config_default(&c, DP_ARCH_GPT);
    c.vocab = 8, c.hidden = 8, c.layers = 1, c.heads = 2, c.seq_len = 4, c.batch = 1;
    c.rope.type = DP_ROPE_LINEAR, c.rope.factor = 2;
    CHECK(dp_model_config_check(&c) == DP_EINVAL && strstr(dp_error_message(), "is for llama"));

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    dp_engine_shutdown();
    return check_report("test_rope_scaling");
}
