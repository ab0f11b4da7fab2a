/* test_cpu_threads.c: the CPU backend's one thread pool (cpu_threads.h). The split GEMM against
 * a double reference for every transpose and odd shapes (a piece boundary lost or doubled is off
 * by O(1)), bit-identical whatever the thread count (pieces depend on the sizes alone), batched
 * items each as their own GEMM, beta respected, the same bits inside a parallel region as
 * outside; the thread count's setter and its refusal of 0. */
#include "check.h"
#include "cpu_threads.h"
#include "error.h"
#include "philox.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static float *randn(int64_t n, uint64_t stream) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = dp_philox_normal(3, stream, (uint64_t)i);
    return x;
}

/* element (r, c) of op(X), X stored row-major with row stride ld */
static double at(const float *X, int trans, int64_t ld, int64_t r, int64_t c) {
    return trans ? X[c * ld + r] : X[r * ld + c];
}

/* C (m x n, stride ldc) = alpha op(A) op(B) + beta C0 in double, to max |difference| / (k + 1) */
static double worst_error(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float beta, const float *C0, const float *C, int64_t ldc) {
    double worst = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            double s = 0;
            for (int64_t j = 0; j < k; j++) s += at(A, ta, lda, r, j) * at(B, tb, ldb, j, c);
            double want = alpha * s + beta * C0[r * ldc + c], err = fabs(C[r * ldc + c] - want) / (double)(k + 1);
            if (err > worst) worst = err;
        }
    return worst;
}

static void set_threads(int n) { CHECK_OK(dp_cpu_set_threads(n)); }

static void test_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k) {
    int64_t lda = ta ? m + 3 : k + 3, ldb = tb ? k + 5 : n + 5, ldc = n + 7;
    int64_t arows = ta ? k : m, brows = tb ? n : k;
    float *A = randn(arows * lda, 1), *B = randn(brows * ldb, 2), *C0 = randn(m * ldc, 3);
    float *C1 = malloc((size_t)(m * ldc) * sizeof *C1), *C2 = malloc((size_t)(m * ldc) * sizeof *C2);
    float *C3 = malloc((size_t)(m * ldc) * sizeof *C3);
    memcpy(C1, C0, (size_t)(m * ldc) * sizeof *C1);
    memcpy(C2, C0, (size_t)(m * ldc) * sizeof *C2);
    memcpy(C3, C0, (size_t)(m * ldc) * sizeof *C3);
    set_threads(1);
    dp_cpu_sgemm(ta, tb, m, n, k, 0.5f, A, lda, B, ldb, 0.25f, C1, ldc);
    set_threads(3);
    dp_cpu_sgemm(ta, tb, m, n, k, 0.5f, A, lda, B, ldb, 0.25f, C2, ldc);
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        dp_cpu_sgemm(ta, tb, m, n, k, 0.5f, A, lda, B, ldb, 0.25f, C3, ldc);
    }
    /* f32 products of k O(1) terms: error ~ k * 6e-8 relative to sqrt(k); 1e-5 per term is 100x that */
    double err = worst_error(ta, tb, m, n, k, 0.5f, A, lda, B, ldb, 0.25f, C0, C1, ldc);
    printf("  gemm %c%c %4lld x %4lld x %4lld: max error / (k+1) %.2e\n", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m,
           (long long)n, (long long)k, err);
    CHECK(err < 1e-5);
    /* the padding between rows untouched, every element the same bits on 1 and 3 threads */
    CHECK(memcmp(C1, C2, (size_t)(m * ldc) * sizeof *C1) == 0);
    CHECK(memcmp(C1, C3, (size_t)(m * ldc) * sizeof *C1) == 0);
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = n; c < ldc; c++) CHECK(C1[r * ldc + c] == C0[r * ldc + c]);
    free(A), free(B), free(C0), free(C1), free(C2), free(C3);
}

static void test_batched(void) {
    const int64_t m = 200, n = 72, k = 130, batch = 5, sa = m * k + 11, sb = k * n + 13, sc = m * n + 17;
    float *A = randn(batch * sa, 4), *B = randn(batch * sb, 5), *C = calloc((size_t)(batch * sc), sizeof *C);
    float *one = calloc((size_t)(m * n), sizeof *one);
    set_threads(2);
    dp_cpu_sgemm_batched(0, 0, m, n, k, 1.0f, A, k, sa, B, n, sb, 0.0f, C, n, sc, batch);
    for (int64_t b = 0; b < batch; b++) {
        set_threads(1);
        dp_cpu_sgemm(0, 0, m, n, k, 1.0f, A + b * sa, k, B + b * sb, n, 0.0f, one, n);
        CHECK(memcmp(one, C + b * sc, (size_t)(m * n) * sizeof *one) == 0);
        for (int64_t j = m * n; j < sc && b + 1 < batch; j++) CHECK(C[b * sc + j] == 0.0f); /* gaps untouched */
    }
    free(A), free(B), free(C), free(one);
}

int main(void) {
    printf("split GEMM\n");
    int64_t shapes[][3] = {{1, 1, 1}, {37, 5, 3}, {513, 300, 70}, {130, 2100, 64}, {1024, 256, 256}, {64, 64, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) test_gemm(t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2]);
    test_batched();
    printf("thread count\n");
    CHECK_OK(dp_cpu_set_threads(2));
#ifdef _OPENMP
    CHECK(dp_cpu_threads() == 2);
#endif
    CHECK(dp_cpu_set_threads(0) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "threads: 0") != NULL);
    CHECK(dp_cpu_set_threads(-3) == DP_EINVAL);
    /* one pool: OpenBLAS's own pthreads stay at one whatever the team's size */
    CHECK(openblas_get_parallel() != 1 || openblas_get_num_threads() == 1);
#ifdef _OPENMP
    CHECK(dp_cpu_threads() == 2); /* a refused count changes nothing */
#endif
    return check_report("test_cpu_threads");
}
