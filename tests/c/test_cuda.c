/* test_cuda.c: the CUDA backend against the CPU. Philox fills are bit-identical, and are the
 * distribution asked for (moments within 5 standard errors: two devices writing zeros would agree
 * too); GEMM (plain, transposed, batched, bf16), element-wise ops and sums of squares agree within
 * float rounding; the allocator tags the workspace and reports the pool's reserved bytes; an
 * allocation larger than the card is an out-of-memory error, not an abort, that leaves the
 * allocator's figures as they were. Skips where no GPU is usable. */
#include "check.h"
#include "test_util.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ops.h"
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static dp_device *cpu, *gpu;

/* a tensor on the GPU with the same contents as the CPU one */
static void mirror(dp_tensor *g, const dp_tensor *c) {
    CHECK_OK(dp_tensor_init(g, gpu, c->dtype, c->ndim, c->shape, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_copy(g, c));
}

static double max_rel_diff(const dp_tensor *g, const dp_tensor *c) {
    size_t n = (size_t)c->numel;
    float *h = malloc(n * sizeof *h), *ref = malloc(n * sizeof *ref);
    dp_tensor hc;
    CHECK_OK(dp_tensor_init(&hc, cpu, DP_F32, c->ndim, c->shape, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_copy(&hc, c)); /* widen bf16 if needed */
    memcpy(ref, hc.data, n * sizeof *ref);
    dp_tensor hg;
    CHECK_OK(dp_tensor_init(&hg, cpu, g->dtype, g->ndim, g->shape, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_copy(&hg, g));
    CHECK_OK(dp_tensor_copy(&hc, &hg));
    memcpy(h, hc.data, n * sizeof *h);
    double worst = 0, norm = 0;
    for (size_t i = 0; i < n; i++) norm = fmax(norm, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(h[i] - ref[i]) / fmax(norm, 1e-30));
    dp_tensor_release(&hc);
    dp_tensor_release(&hg);
    free(h);
    free(ref);
    return worst;
}

/* The sample mean and variance of x[0..n) within 5 standard errors of mean and var (the
 * variance's standard error for a normal sample; the uniform's is smaller). */
static void check_moments(const float *x, int64_t n, double mean, double var, const char *what) {
    double sum = 0.0, sq = 0.0;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    double m = sum / (double)n;
    for (int64_t i = 0; i < n; i++) sq += (x[i] - m) * (x[i] - m);
    double v = sq / (double)(n - 1);
    printf("philox %s: mean %.5f (want %.5f), variance %.5f (want %.5f)\n", what, m, mean, v, var);
    CHECK(fabs(m - mean) <= 5.0 * sqrt(var / (double)n));
    CHECK(fabs(v - var) <= 5.0 * var * sqrt(2.0 / (double)(n - 1)));
}

static void test_rand_bit_identical(void) {
    int64_t n = 1000003;
    for (int dist = 0; dist < 2; dist++) {
        dp_tensor c, g, back;
        CHECK_OK(dp_tensor_init(&c, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
        CHECK_OK(dp_tensor_init(&g, gpu, DP_F32, 1, &n, DP_CAT_TEMP));
        CHECK_OK(dp_tensor_init(&back, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
        dp_rand_dist d = dist ? DP_RAND_NORMAL : DP_RAND_UNIFORM;
        CHECK_OK(dp_tensor_rand(&c, d, -0.5f, 2.0f, 1234, 99));
        CHECK_OK(dp_tensor_rand(&g, d, -0.5f, 2.0f, 1234, 99));
        CHECK_OK(dp_tensor_copy(&back, &g));
        int diff = memcmp(c.data, back.data, (size_t)n * 4);
        printf("philox %s: CPU and CUDA bits %s\n", dist ? "normal" : "uniform", diff ? "DIFFER" : "identical");
        CHECK(diff == 0);
        /* uniform on [-0.5, 2): mean 0.75, variance 2.5^2 / 12; normal: mean -0.5, variance 4 */
        if (dist)
            check_moments(back.data, n, -0.5, 4.0, "normal");
        else
            check_moments(back.data, n, 0.75, 2.5 * 2.5 / 12.0, "uniform");
        /* noise added in place at an offset, as DP does */
        CHECK_OK(cpu->ops->rand(cpu, DP_F32, c.data, (size_t)n - 5, d, 0, 1, 7, 3, 5, 1, 1.0f));
        CHECK_OK(gpu->ops->rand(gpu, DP_F32, g.data, (size_t)n - 5, d, 0, 1, 7, 3, 5, 1, 1.0f));
        CHECK_OK(dp_tensor_copy(&back, &g));
        CHECK(memcmp(c.data, back.data, (size_t)n * 4) == 0);
        /* and divided in the same pass, as DP's noise is */
        CHECK_OK(cpu->ops->rand(cpu, DP_F32, c.data, (size_t)n - 5, d, 0, 1, 7, 4, 5, 1, 1.0f / 48.0f));
        CHECK_OK(gpu->ops->rand(gpu, DP_F32, g.data, (size_t)n - 5, d, 0, 1, 7, 4, 5, 1, 1.0f / 48.0f));
        CHECK_OK(dp_tensor_copy(&back, &g));
        CHECK(memcmp(c.data, back.data, (size_t)n * 4) == 0);
        dp_tensor_release(&c);
        dp_tensor_release(&g);
        dp_tensor_release(&back);
    }
}

static void test_gemm(dp_dtype dt, double tol) {
    const int64_t m = 67, n = 45, k = 129, batch = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t sa[3] = {batch, ta ? k : m, ta ? m : k}, sb[3] = {batch, tb ? n : k, tb ? k : n};
            int64_t sc[3] = {batch, m, n};
            dp_tensor A, B, C, Ag, Bg, Cg, A16, B16;
            CHECK_OK(dp_tensor_init(&A, cpu, DP_F32, 3, sa, DP_CAT_TEMP));
            CHECK_OK(dp_tensor_init(&B, cpu, DP_F32, 3, sb, DP_CAT_TEMP));
            CHECK_OK(dp_tensor_init(&C, cpu, DP_F32, 3, sc, DP_CAT_TEMP));
            CHECK_OK(dp_tensor_rand(&A, DP_RAND_NORMAL, 0, 1, 5, 1));
            CHECK_OK(dp_tensor_rand(&B, DP_RAND_NORMAL, 0, 1, 5, 2));
            CHECK_OK(dp_tensor_rand(&C, DP_RAND_NORMAL, 0, 1, 5, 3));
            if (dt == DP_BF16) { /* round the inputs once so both devices see the same bf16 values */
                CHECK_OK(dp_tensor_init(&A16, cpu, DP_BF16, 3, sa, DP_CAT_TEMP));
                CHECK_OK(dp_tensor_init(&B16, cpu, DP_BF16, 3, sb, DP_CAT_TEMP));
                CHECK_OK(dp_tensor_copy(&A16, &A));
                CHECK_OK(dp_tensor_copy(&B16, &B));
                mirror(&Ag, &A16);
                mirror(&Bg, &B16);
                mirror(&Cg, &C);
                CHECK_OK(dp_matmul(&C, &A16, ta, &B16, tb, 1.5f, 0.5f));
                dp_tensor_release(&A16);
                dp_tensor_release(&B16);
            } else {
                mirror(&Ag, &A);
                mirror(&Bg, &B);
                mirror(&Cg, &C);
                CHECK_OK(dp_matmul(&C, &A, ta, &B, tb, 1.5f, 0.5f));
            }
            CHECK_OK(dp_matmul(&Cg, &Ag, ta, &Bg, tb, 1.5f, 0.5f));
            double d = max_rel_diff(&Cg, &C);
            printf("gemm %s ta=%d tb=%d batched: max diff / max |C| = %.3g (tol %.0e)\n", dp_dtype_name(dt), ta, tb, d,
                   tol);
            CHECK(d < tol);
            dp_tensor ts[6] = {A, B, C, Ag, Bg, Cg};
            for (int i = 0; i < 6; i++) dp_tensor_release(&ts[i]);
        }
}

static void test_elementwise_and_sumsq(void) {
    int64_t shape[2] = {5, 200001};
    dp_tensor x, y, xg, yg;
    CHECK_OK(dp_tensor_init(&x, cpu, DP_F32, 2, shape, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&y, cpu, DP_F32, 2, shape, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_rand(&x, DP_RAND_NORMAL, 0, 1, 1, 1));
    CHECK_OK(dp_tensor_rand(&y, DP_RAND_NORMAL, 0, 1, 1, 2));
    mirror(&xg, &x);
    mirror(&yg, &y);
    CHECK_OK(dp_add(&x, &x, &y));
    CHECK_OK(dp_add(&xg, &xg, &yg));
    CHECK_OK(dp_axpy(&x, -0.75f, &y));
    CHECK_OK(dp_axpy(&xg, -0.75f, &yg));
    CHECK_OK(dp_scale(&x, 3.0f));
    CHECK_OK(dp_scale(&xg, 3.0f));
    CHECK(max_rel_diff(&xg, &x) == 0.0); /* unfused IEEE operations: bit-identical */
    int64_t rows = 5;
    dp_tensor r, rg;
    CHECK_OK(dp_tensor_init(&r, cpu, DP_F32, 1, &rows, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&rg, gpu, DP_F32, 1, &rows, DP_CAT_TEMP));
    CHECK_OK(dp_sumsq_rows(&r, &x, 0));
    CHECK_OK(dp_sumsq_rows(&rg, &xg, 0));
    double d = max_rel_diff(&rg, &r);
    printf("sumsq_rows: max relative diff %.3g\n", d);
    CHECK(d < 1e-5);
    dp_tensor ts[6] = {x, y, xg, yg, r, rg};
    for (int i = 0; i < 6; i++) dp_tensor_release(&ts[i]);
}

static void test_memory_and_oom(void) {
    dp_mem_stats s, after;
    dp_mem_get_stats(gpu->mem, &s);
    CHECK_EQ_U64(s.current[DP_CAT_WORKSPACE], DP_CUDA_CUBLAS_WORKSPACE_BYTES + DP_CUDA_SCRATCH_BYTES);
    CHECK(s.reserved_current >= s.total_current);
    int64_t huge[2] = {1ll << 20, 1ll << 20}; /* 4 TiB */
    dp_tensor t;
    int rc = dp_tensor_init(&t, gpu, DP_F32, 2, huge, DP_CAT_ACTIVATIONS);
    CHECK(rc == DP_EOOM);
    printf("OOM message: %s\n", dp_error_message());
    CHECK(strstr(dp_error_message(), "requested 4398046511104 bytes") != NULL);
    CHECK(strstr(dp_error_message(), "workspace=") != NULL);
    /* the failed allocation left nothing allocated: every category as before, activations 0 */
    dp_mem_get_stats(gpu->mem, &after);
    CHECK_EQ_U64(after.current[DP_CAT_ACTIVATIONS], 0);
    for (int c = 0; c < DP_CAT_COUNT; c++) CHECK_EQ_U64(after.current[c], s.current[c]);
    CHECK_EQ_U64(after.total_current, s.total_current);
    /* the device still works after the failed allocation */
    int64_t n = 1024;
    CHECK_OK(dp_tensor_init(&t, gpu, DP_F32, 1, &n, DP_CAT_ACTIVATIONS));
    CHECK_OK(dp_tensor_fill(&t, 2.0));
    double ss;
    CHECK_OK(dp_sumsq(&t, &ss));
    CHECK_CLOSE(ss, 4096.0, 1e-6);
    dp_tensor_release(&t);
    dp_mem_get_stats(gpu->mem, &after);
    CHECK_EQ_U64(after.current[DP_CAT_ACTIVATIONS], 0);
    CHECK_EQ_U64(after.total_current, s.total_current);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    if (!test_cuda_or_skip()) return 77;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK_OK(dp_device_get(DP_DEV_CUDA, &gpu));
    printf("device: %s, %d SMs, %.1f GiB\n", gpu->info.name, gpu->info.cores,
           (double)gpu->info.total_memory / (1 << 30));
    test_rand_bit_identical();
    test_gemm(DP_F32, 1e-5);
    test_gemm(DP_BF16, 1e-5); /* same bf16 inputs, f32 accumulation and output on both */
    test_elementwise_and_sumsq();
    test_memory_and_oom();
    dp_engine_shutdown();
    return check_report("test_cuda");
}
