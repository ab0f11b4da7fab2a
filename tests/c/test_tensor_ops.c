/* test_tensor_ops.c: tensors and the basic ops on the CPU against naive references, the ledger's
 * exact flop and byte counts, the plan device's accounting, and clear errors for bad input. */
#include "check.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"
#include "tensor.h"

#include <string.h>

static dp_device *cpu;

static float *host(const dp_tensor *t) { return (float *)t->data; }

static const dp_ledger_entry *ledger(const char *op) {
    for (size_t i = 0; i < dp_ledger_count(); i++)
        if (strcmp(dp_ledger_at(i)->op, op) == 0) return dp_ledger_at(i);
    return NULL;
}

/* C = op(A) op(B) computed naively in double */
static void ref_gemm(int ta, int tb, int m, int n, int k, const float *A, const float *B, double *C) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? A[p * m + i] : A[i * k + p];
                double b = tb ? B[j * k + p] : B[p * n + j];
                s += a * b;
            }
            C[i * n + j] = s;
        }
}

static void test_gemm(void) {
    const int m = 5, n = 7, k = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n}, sc[2] = {m, n};
            dp_tensor A, B, C;
            CHECK_OK(dp_tensor_init(&A, cpu, DP_F32, 2, sa, DP_CAT_TEMP));
            CHECK_OK(dp_tensor_init(&B, cpu, DP_F32, 2, sb, DP_CAT_TEMP));
            CHECK_OK(dp_tensor_init(&C, cpu, DP_F32, 2, sc, DP_CAT_TEMP));
            CHECK_OK(dp_tensor_rand(&A, DP_RAND_NORMAL, 0, 1, 1, 1));
            CHECK_OK(dp_tensor_rand(&B, DP_RAND_NORMAL, 0, 1, 1, 2));
            CHECK_OK(dp_tensor_fill(&C, 1.0));
            CHECK_OK(dp_matmul(&C, &A, ta, &B, tb, 2.0f, 0.5f));
            double ref[35];
            ref_gemm(ta, tb, m, n, k, host(&A), host(&B), ref);
            for (int i = 0; i < m * n; i++) CHECK_CLOSE(host(&C)[i], 2.0 * ref[i] + 0.5, 1e-5);
            dp_tensor_release(&A);
            dp_tensor_release(&B);
            dp_tensor_release(&C);
        }
    /* batched, with B shared by every batch item (stride 0) */
    int64_t sa[3] = {4, m, k}, sb[2] = {k, n}, sc[3] = {4, m, n};
    dp_tensor A, B, C;
    CHECK_OK(dp_tensor_init(&A, cpu, DP_F32, 3, sa, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&B, cpu, DP_F32, 2, sb, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&C, cpu, DP_F32, 3, sc, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_rand(&A, DP_RAND_UNIFORM, -1, 1, 3, 0));
    CHECK_OK(dp_tensor_rand(&B, DP_RAND_UNIFORM, -1, 1, 4, 0));
    dp_ledger_reset();
    CHECK_OK(dp_matmul(&C, &A, 0, &B, 0, 1.0f, 0.0f));
    for (int b = 0; b < 4; b++) {
        double ref[35];
        ref_gemm(0, 0, m, n, k, host(&A) + b * m * k, host(&B), ref);
        for (int i = 0; i < m * n; i++) CHECK_CLOSE(host(&C)[b * m * n + i], ref[i], 1e-5);
    }
    const dp_ledger_entry *e = ledger("gemm_batched");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_U64(e->calls, 1);
        CHECK_CLOSE(e->flops, 2.0 * 4 * m * n * k, 0);
        CHECK_CLOSE(e->bytes, 4.0 * (4 * m * k + k * n + 4 * m * n), 0); /* beta = 0: C written once */
    }
    /* shape errors name the problem */
    CHECK(dp_matmul(&C, &A, 1, &B, 0, 1.0f, 0.0f) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "shapes do not agree") != NULL);
    dp_tensor_release(&A);
    dp_tensor_release(&B);
    dp_tensor_release(&C);
}

static void test_elementwise_and_ledger(void) {
    int64_t n = 100003; /* odd, and over the parallel threshold */
    dp_tensor x, y, out;
    CHECK_OK(dp_tensor_init(&x, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&y, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&out, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    for (int64_t i = 0; i < n; i++) {
        host(&x)[i] = (float)(i % 17) - 8.0f;
        host(&y)[i] = 0.25f * (float)(i % 5);
    }
    dp_ledger_reset();
    CHECK_OK(dp_add(&out, &x, &y));
    for (int64_t i = 0; i < n; i += 997) CHECK_CLOSE(host(&out)[i], host(&x)[i] + host(&y)[i], 0);
    CHECK_OK(dp_scale(&out, -2.0f));
    for (int64_t i = 0; i < n; i += 997) CHECK_CLOSE(host(&out)[i], -2.0 * (host(&x)[i] + host(&y)[i]), 0);
    CHECK_OK(dp_axpy(&out, 2.0f, &x)); /* out = -2y */
    for (int64_t i = 0; i < n; i += 997) CHECK_CLOSE(host(&out)[i], -2.0 * host(&y)[i], 0);
    double ss, ref = 0;
    for (int64_t i = 0; i < n; i++) ref += (double)host(&x)[i] * host(&x)[i];
    CHECK_OK(dp_sumsq(&x, &ss));
    CHECK_CLOSE(ss, ref, 1e-7);
    const dp_ledger_entry *e = ledger("add");
    CHECK(e && e->calls == 1 && e->flops == (double)n && e->bytes == 12.0 * (double)n);
    e = ledger("axpy");
    CHECK(e && e->flops == 2.0 * (double)n && e->bytes == 12.0 * (double)n);
    e = ledger("scale");
    CHECK(e && e->bytes == 8.0 * (double)n);
    /* row sums of squares */
    int64_t rows = 7;
    dp_tensor r;
    CHECK_OK(dp_tensor_init(&r, cpu, DP_F32, 1, &rows, DP_CAT_NORM_SAMPLES));
    int64_t shape2[2] = {7, 14286}; /* 7 x 14286 = 100002 elements */
    dp_tensor v;
    CHECK_OK(dp_tensor_view(&v, &x, 1, 2, shape2));
    CHECK_OK(dp_sumsq_rows(&r, &v, 0));
    for (int i = 0; i < 7; i++) {
        double s = 0;
        for (int j = 0; j < 14286; j++) {
            double a = host(&x)[1 + i * 14286 + j];
            s += a * a;
        }
        CHECK_CLOSE(host(&r)[i], s, 1e-6);
    }
    CHECK(dp_sumsq_rows(&r, &x, 0) == DP_EINVAL); /* 100003 does not split into 7 rows */
    dp_tensor_release(&r);
    dp_tensor_release(&x);
    dp_tensor_release(&y);
    dp_tensor_release(&out);
}

static void test_bf16_and_copy(void) {
    /* bf16 round to nearest even */
    CHECK(dp_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(dp_bf16_to_f32(dp_f32_to_bf16(1.00390625f)) == 1.0f);      /* tie: down to even */
    CHECK(dp_bf16_to_f32(dp_f32_to_bf16(1.01171875f)) == 1.015625f); /* tie: up to even */
    int64_t n = 64;
    dp_tensor a, b, c;
    CHECK_OK(dp_tensor_init(&a, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&b, cpu, DP_BF16, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&c, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_rand(&a, DP_RAND_NORMAL, 0, 1, 9, 9));
    CHECK_OK(dp_tensor_copy(&b, &a)); /* casts */
    CHECK_OK(dp_tensor_copy(&c, &b));
    /* bf16 keeps 8 significant bits and rounds to nearest: a value moves by at most half a unit
     * in its last place, 2^-8 of its magnitude (2^-7 would let truncation pass) */
    for (int i = 0; i < n; i++) CHECK(fabs(host(&c)[i] - host(&a)[i]) <= ldexp(fabs(host(&a)[i]), -8));
    dp_tensor i32;
    CHECK_OK(dp_tensor_init(&i32, cpu, DP_I32, 1, &n, DP_CAT_INPUTS));
    CHECK(dp_tensor_copy(&i32, &a) == DP_EINVAL);
    CHECK_OK(dp_tensor_fill(&i32, 7));
    CHECK(((int32_t *)i32.data)[63] == 7);
    dp_tensor_release(&i32);
    dp_tensor_release(&a);
    dp_tensor_release(&b);
    dp_tensor_release(&c);
}

static void test_bad_shapes(void) {
    dp_tensor t;
    int64_t neg[2] = {3, -1};
    CHECK(dp_tensor_init(&t, cpu, DP_F32, 2, neg, DP_CAT_TEMP) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "negative") != NULL);
    int64_t five[5] = {1, 1, 1, 1, 1};
    CHECK(dp_tensor_init(&t, cpu, DP_F32, 5, five, DP_CAT_TEMP) == DP_EINVAL);
    int64_t huge[2] = {INT64_MAX / 2, 4};
    CHECK(dp_tensor_init(&t, cpu, DP_F32, 2, huge, DP_CAT_TEMP) == DP_EINVAL);
    dp_tensor_release(&t); /* safe on a failed init */
}

/* The plan device allocates the same bytes and records the same ledger, with no data. */
static void test_plan_device(void) {
    dp_device *plan;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    int64_t s[2] = {1 << 14, 1 << 14}; /* 1 GiB in f32: fine, nothing is touched */
    dp_tensor a, b;
    dp_ledger_reset();
    CHECK_OK(dp_tensor_init(&a, plan, DP_F32, 2, s, DP_CAT_ACTIVATIONS));
    CHECK_OK(dp_tensor_init(&b, plan, DP_F32, 2, s, DP_CAT_ACTIVATIONS));
    CHECK(a.data == NULL);
    CHECK_OK(dp_matmul(&b, &a, 0, &a, 1, 1.0f, 0.0f));
    CHECK_OK(dp_tensor_rand(&a, DP_RAND_NORMAL, 0, 1, 0, 0));
    dp_mem_stats st;
    dp_mem_get_stats(plan->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_ACTIVATIONS], 2ull << 30);
    const dp_ledger_entry *e = ledger("gemm");
    CHECK(e && e->flops == 2.0 * (double)(1 << 14) * (1 << 14) * (1 << 14));
    double ss = -1;
    CHECK_OK(dp_sumsq(&a, &ss));
    CHECK(ss == 0.0);
    dp_tensor_release(&a);
    dp_tensor_release(&b);
    dp_mem_get_stats(plan->mem, &st);
    CHECK_EQ_U64(st.total_current, 0);
    CHECK_EQ_U64(st.total_peak, (2ull << 30) + 4); /* + dp_sumsq's 4-byte result */
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_gemm();
    test_elementwise_and_ledger();
    test_bf16_and_copy();
    test_bad_shapes();
    test_plan_device();
    dp_engine_shutdown();
    return check_report("test_tensor_ops");
}
