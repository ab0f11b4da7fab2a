/* test_util.h: what several C test programs need besides checks: the fixtures folder, token ids,
 * writing and copying files, and the skip of a GPU test without a device. */
#ifndef DP_TEST_UTIL_H
#define DP_TEST_UTIL_H

#include "check.h"
#include "device.h"
#include "error.h"
#include "model.h"
#include "tensor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* 1 when a CUDA device can run the test; else prints "skipped: ..." (the reason test.sh shows)
 * and returns 0, and the program exits 77. */
static inline int test_cuda_or_skip(void) {
    if (dp_cuda_available()) return 1;
    printf("skipped: no CUDA device%s\n", dp_cuda_compiled() ? "" : " (built without CUDA)");
    return 0;
}

#endif
