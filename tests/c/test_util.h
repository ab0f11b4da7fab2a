/* test_util.h: what several C test programs need besides checks: the fixtures folder, token ids,
 * reading, writing and copying files, the skip of a GPU test without a device, and a malloc-backed raw
 * allocator for allocator tests. */
#ifndef DP_TEST_UTIL_H
#define DP_TEST_UTIL_H

#include "check.h"
#include "device.h"
#include "dpsgd.h"
#include "error.h"
#include "model.h"
#include "optim.h"
#include "tensor.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A dp_raw_allocator's alloc over malloc (for tests of the tagged allocator alone). */
static inline int test_raw_alloc(void *ctx, size_t bytes, void **ptr) {
    (void)ctx;
    *ptr = bytes ? malloc(bytes) : NULL;
    return bytes && !*ptr ? DP_EOOM : DP_OK;
}

/* Its free. */
static inline void test_raw_free(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    (void)bytes;
    free(ptr);
}

/* The whole file at path, malloc'd with a NUL after its *len bytes (len may be NULL); NULL when it
 * cannot be read. */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    size_t got = text ? fread(text, 1, (size_t)n, fp) : 0;
    fclose(fp);
    if (!text) return NULL;
    text[got] = '\0';
    if (len) *len = got;
    return text;
}

/* The JSON file at path parsed, any value and any size (the caller cJSON_Deletes it), or NULL
 * with a failure counted and named (test_hf_ref.h's test_read_json: an object of at most 64 KiB). */
static inline cJSON *test_json_file(const char *path) {
    char *text = test_read_file(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!j) {
        fprintf(stderr, "%s: %s\n", path, text ? "not JSON" : "cannot read");
        check_failures++;
    }
    free(text);
    return j;
}

/* buf = $DPPROF_FIXTURES/sub, else <repo>/tests/fixtures/sub (found from this header's path). */
static inline void test_fixture_dir(char *buf, size_t n, const char *sub) {
    const char *env = getenv("DPPROF_FIXTURES");
    if (env && *env) {
        snprintf(buf, n, "%s/%s", env, sub);
        return;
    }
    snprintf(buf, n, "%s", __FILE__); /* <repo>/tests/c/test_util.h */
    for (int k = 0; k < 2; k++) {
        char *slash = strrchr(buf, '/');
        if (slash) *slash = '\0';
    }
    size_t used = strlen(buf);
    snprintf(buf + used, n - used, "/fixtures/%s", sub);
}

/* A B x T i32 tensor on dev (a host device) of ids in [0, V), from an FNV-style hash of salt. */
static inline dp_tensor *test_ids(dp_device *dev, int64_t B, int64_t T, int64_t V, uint32_t salt) {
    int64_t shape[2] = {B, T};
    dp_tensor *x = dp_tensor_new(dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    if (!x) return NULL;
    int32_t *p = x->data;
    uint32_t h = 2166136261u ^ salt;
    for (int64_t i = 0; i < B * T; i++) {
        h = (h ^ (uint32_t)i) * 16777619u;
        p[i] = (int32_t)((h >> 7) % (uint32_t)V);
    }
    return x;
}

/* Writes text to path (replacing it); a failed check when it cannot. */
static inline void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK(fputs(text, fp) >= 0);
    CHECK(fclose(fp) == 0);
}

/* Copies the file from to the file to; a failed check when it cannot. */
static inline void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    CHECK(in && out);
    char buf[65536];
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) CHECK(fwrite(buf, 1, n, out) == n);
    if (in) fclose(in);
    if (out) CHECK(fclose(out) == 0);
}

/* want[k * B + i]: the squared norm of parameter tp[k]'s gradient of sample i alone, from the
 * model run once per sample with B = 1 and scale 1 (the explicit per-sample gradients every DP
 * method's norms are held to). Returns DP_OK or the first failing call's status. */
static inline int test_explicit_norms(dp_model *m, const dp_tensor *inputs, const dp_tensor *targets, dp_param **tp,
                                      int n_tp, double *want) {
    int64_t B = inputs->shape[0], T = inputs->shape[1];
    for (int64_t i = 0; i < B; i++) {
        int64_t one[2] = {1, T};
        dp_tensor in1, tg1;
        int rc = dp_tensor_view(&in1, inputs, i * T, 2, one);
        if (rc == DP_OK) rc = dp_tensor_view(&tg1, targets, i * T, 2, one);
        float loss, s = 1.0f;
        if (rc == DP_OK) rc = dp_model_forward(m, &in1, &tg1, &loss, NULL);
        dp_backward_opts o = {.sample_scale = &s, .weight_grads = 1, .retain = 0, .hooks = NULL};
        if (rc == DP_OK) rc = dp_model_backward(m, &o);
        if (rc != DP_OK) return rc;
        for (int k = 0; k < n_tp; k++) {
            double v = 0.0;
            if (tp[k]->grad.numel)
                for (int64_t j = 0; j < tp[k]->grad.numel; j++) {
                    double g = ((float *)tp[k]->grad.data)[j];
                    v += g * g;
                }
            want[k * B + i] = v;
        }
        if ((rc = dp_model_zero_grad(m, 1)) != DP_OK) return rc;
    }
    return DP_OK;
}

/* The DP step the update tests share: cfg (its method already chosen) gets C, sigma, an expected
 * logical batch of 5 from a dataset of 1000, physical batches of at most `physical` and seed 42;
 * then DP-SGD over m and plain SGD at lr 0.5. DP_OK or the first failing call's status. */
static inline int test_dp_sgd(dp_model *m, dpsgd_config *cfg, double C, double sigma, int64_t physical, dpsgd **dp,
                              dp_optimizer **opt) {
    cfg->max_grad_norm = C;
    cfg->noise_multiplier = sigma;
    cfg->expected_batch_size = 5;
    cfg->max_physical_batch_size = physical;
    cfg->dataset_size = 1000;
    cfg->seed = 42;
    dp_optim_opts oo;
    dp_optim_opts_default(&oo, DP_OPTIM_SGD);
    oo.lr = 0.5;
    int rc = dpsgd_new(m, cfg, dp);
    return rc == DP_OK ? dp_optim_new(m, DP_OPTIM_SGD, &oo, opt) : rc;
}

/* 1 when a CUDA device can run the test; else prints "skipped: ..." (the reason test.sh shows)
 * and returns 0, and the program exits 77. */
static inline int test_cuda_or_skip(void) {
    if (dp_cuda_available()) return 1;
    printf("skipped: no CUDA device%s\n", dp_cuda_compiled() ? "" : " (built without CUDA)");
    return 0;
}

#endif
