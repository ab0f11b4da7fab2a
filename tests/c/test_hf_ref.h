/* test_hf_ref.h: the reference.json of a Hugging Face fixture (tests/fixtures/hf/<name>/, written by
 * gen_fixtures.py; peft/<name>/ by peft/gen_peft.py): the token batch and PyTorch's float64 loss,
 * per-sample losses and per-sample gradient norms; loading the fixture's checkpoint (or expecting
 * a load to fail) and checking the engine's figures against the reference's. */
#ifndef DP_TEST_HF_REF_H
#define DP_TEST_HF_REF_H

#include "check.h"
#include "dpsgd.h"
#include "error.h"
#include "model_io.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TEST_HF_MAX_B 8
#define TEST_HF_MAX_TOKENS 1024 /* the long fixtures: B 3 x T 300 */

typedef struct test_hf_ref {
    int B, T;
    int32_t inputs[TEST_HF_MAX_TOKENS], targets[TEST_HF_MAX_TOKENS]; /* B x T: tokens[:, :T], tokens[:, 1:] */
    double loss;                                                     /* the batch's mean loss */
    double per_sample_loss[TEST_HF_MAX_B], per_sample_grad_norm[TEST_HF_MAX_B];
} test_hf_ref;

/* A JSON file's object (up to 64 KiB), or NULL, a failure counted, when it is missing or no object. */
static inline cJSON *test_read_json(const char *path) {
    FILE *fp = fopen(path, "rb");
    static char text[1 << 16];
    size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
    if (fp) fclose(fp);
    text[n] = '\0';
    cJSON *j = cJSON_Parse(text);
    if (!cJSON_IsObject(j)) {
        fprintf(stderr, "%s: not a JSON object\n", path);
        check_failures++;
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* Reads dir/reference.json into r; 0, or -1 (with a line on stderr) when it is missing or too big. */
static inline int test_hf_ref_read(const char *dir, test_hf_ref *r) {
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    FILE *fp = fopen(path, "rb");
    static char text[1 << 16];
    size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
    if (fp) fclose(fp);
    text[n] = '\0';
    cJSON *j = fp ? cJSON_Parse(text) : NULL;
    if (!j) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    memset(r, 0, sizeof *r);
    r->B = cJSON_GetObjectItem(j, "batch")->valueint;
    r->T = cJSON_GetObjectItem(j, "seq_len")->valueint;
    r->loss = cJSON_GetObjectItem(j, "loss")->valuedouble;
    const cJSON *tokens = cJSON_GetObjectItem(j, "tokens"), *losses = cJSON_GetObjectItem(j, "per_sample_loss");
    const cJSON *norms = cJSON_GetObjectItem(j, "per_sample_grad_norm");
    int ok = r->B <= TEST_HF_MAX_B && r->B * r->T <= TEST_HF_MAX_TOKENS && cJSON_GetArraySize(tokens) == r->B;
    for (int i = 0; ok && i < r->B; i++) {
        const cJSON *row = cJSON_GetArrayItem(tokens, i);
        for (int t = 0; t < r->T; t++) {
            r->inputs[i * r->T + t] = cJSON_GetArrayItem(row, t)->valueint;
            r->targets[i * r->T + t] = cJSON_GetArrayItem(row, t + 1)->valueint;
        }
        r->per_sample_loss[i] = cJSON_GetArrayItem(losses, i)->valuedouble;
        if (norms) r->per_sample_grad_norm[i] = cJSON_GetArrayItem(norms, i)->valuedouble;
    }
    cJSON_Delete(j);
    if (!ok) fprintf(stderr, "%s: batch larger than the tests hold\n", path);
    return ok ? 0 : -1;
}

/* The checkpoint in dir loaded on dev for r's batch (seq_len T, batch B) in dtype; NULL (a failed
 * check) when it does not load. */
static inline dp_model *test_hf_load(dp_device *dev, const char *dir, const test_hf_ref *r, dp_dtype dtype) {
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = r->T;
    o.batch = r->B;
    o.dtype = dtype;
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(dev, dir, &o, &m));
    return m;
}

/* max |got - want| over max |want| (elementwise ratios of near-zero entries are noise). */
static inline double test_rel_to_max(const float *got, const float *want, int64_t n) {
    double max_diff = 0, max_ref = 0;
    for (int64_t k = 0; k < n; k++) {
        double d = (double)got[k] - want[k];
        max_diff = d > max_diff ? d : -d > max_diff ? -d : max_diff;
        double w = want[k] < 0 ? -(double)want[k] : want[k];
        max_ref = w > max_ref ? w : max_ref;
    }
    return max_diff / (max_ref > 1e-30 ? max_ref : 1e-30);
}

/* r's batch as two B x T i32 tensors on dev (inputs, targets); free with dp_tensor_free. */
static inline void test_hf_batch(dp_device *dev, const test_hf_ref *r, dp_tensor **inputs, dp_tensor **targets) {
    int64_t shape[2] = {r->B, r->T};
    *inputs = dp_tensor_new(dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    *targets = dp_tensor_new(dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    CHECK(*inputs && *targets);
    uint64_t bytes = (uint64_t)(r->B * r->T) * sizeof(int32_t);
    if (*inputs) CHECK_OK(dp_tensor_from_host(*inputs, r->inputs, bytes));
    if (*targets) CHECK_OK(dp_tensor_from_host(*targets, r->targets, bytes));
}

/* Every DP method on m over r's batch, nothing clipped: each sample's gradient norm within tol
 * (relative) of r's per_sample_grad_norm. The methods: the presets, then flash in two passes with
 * its tile kernels (flash_clip's bk materializes narrow-input linears instead) and with Gram
 * strips, flash + bk with strips, materialized norms in two passes. Returns the worst relative
 * error; *forms (when not NULL) gets the formulations the methods' layers used, bit f for
 * dpsgd_formulation f, so that a caller can check that the kernels it means to test ran. */
static inline double test_hf_check_dp_norms_forms(dp_model *m, const test_hf_ref *r, double tol, const char *what,
                                                  unsigned *forms) {
    dp_tensor *in, *tg;
    test_hf_batch(dp_model_device(m), r, &in, &tg);
    static const struct {
        const char *preset;
        dpsgd_norms_method norms;
        dpsgd_clip_method clip;
        dpsgd_flash_impl impl;
    } methods[] = {
        {"flat", 0, 0, 0},
        {"ghost", 0, 0, 0},
        {"mixed_ghost", 0, 0, 0},
        {"bk", 0, 0, 0},
        {"flash_clip", 0, 0, 0},
        {NULL, DPSGD_NORMS_FLASH, DPSGD_CLIP_TWOPASS, DPSGD_FLASH_TILES},
        {NULL, DPSGD_NORMS_FLASH, DPSGD_CLIP_TWOPASS, DPSGD_FLASH_STRIPS},
        {NULL, DPSGD_NORMS_FLASH, DPSGD_CLIP_BK, DPSGD_FLASH_STRIPS},
        {NULL, DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_TWOPASS, DPSGD_FLASH_TILES},
    };
    double worst = 0;
    unsigned seen = 0;
    for (size_t k = 0; k < sizeof methods / sizeof *methods && in && tg; k++) {
        dpsgd_config cfg;
        dpsgd_config_default(&cfg);
        cfg.max_grad_norm = 1e9;
        if (methods[k].preset)
            CHECK_OK(dpsgd_method_preset(methods[k].preset, &cfg.norms, &cfg.clip));
        else
            cfg.norms = methods[k].norms, cfg.clip = methods[k].clip, cfg.flash_impl = methods[k].impl;
        dpsgd *dp = NULL;
        CHECK_OK(dpsgd_new(m, &cfg, &dp));
        if (!dp) continue;
        float loss;
        CHECK_OK(dpsgd_forward(dp, in, tg, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        size_t ns;
        const float *norms = dpsgd_norms(dp, &ns);
        CHECK_EQ_U64(ns, r->B);
        for (int i = 0; i < r->B && ns == (size_t)r->B; i++) {
            double want = r->per_sample_grad_norm[i], err = fabs(norms[i] - want) / want;
            worst = err > worst ? err : worst;
            if (!(err <= tol)) {
                fprintf(stderr, "  %s [%s+%s, %s] sample %d: norm %.9g, PyTorch's %.9g (rel %.3g)\n", what,
                        dpsgd_norms_name(cfg.norms), dpsgd_clip_name(cfg.clip),
                        cfg.norms == DPSGD_NORMS_FLASH ? dpsgd_flash_impl_name(cfg.flash_impl) : "-", i, norms[i], want,
                        err);
                check_failures++;
            }
        }
        for (size_t l = 0; l < dpsgd_layer_count(dp); l++) seen |= 1u << dpsgd_layer(dp, l)->norms;
        dpsgd_free(dp);
        CHECK_OK(dp_model_zero_grad(m, 1));
    }
    dp_tensor_free(in);
    dp_tensor_free(tg);
    printf("%s: DP per-sample norms against PyTorch's, worst relative error %.2g (tol %g); formulations:", what, worst,
           tol);
    for (int f = 0; f < DPSGD_N_FORMULATIONS; f++)
        if (seen >> f & 1) printf(" %s", dpsgd_formulation_name((dpsgd_formulation)f));
    printf("\n");
    if (forms) *forms = seen;
    return worst;
}

/* test_hf_check_dp_norms_forms without the formulations. */
static inline double test_hf_check_dp_norms(dp_model *m, const test_hf_ref *r, double tol, const char *what) {
    return test_hf_check_dp_norms_forms(m, r, tol, what, NULL);
}

/* dp_model_load of dir on dev (default options) must fail with code and a message holding word1
 * (and word2 when not NULL), leaving no model. */
static inline void expect_load_error(dp_device *dev, const char *dir, int code, const char *word1, const char *word2) {
    dp_model *m = NULL;
    int rc = dp_model_load(dev, dir, NULL, &m);
    const char *msg = dp_error_message();
    if (rc != code || m != NULL || !strstr(msg, word1) || (word2 && !strstr(msg, word2))) {
        fprintf(stderr, "load of %s: status %d (want %d), message '%s' (want '%s', '%s')\n", dir, rc, code, msg, word1,
                word2 ? word2 : "");
        check_failures++;
    }
    dp_model_free(m);
}

#endif
