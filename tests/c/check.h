/* check.h: tiny assertion helpers for the C tests. A failed check prints where and what, and
 * the test exits non-zero at the end (checks keep going so one run shows every failure). */
#ifndef DP_TEST_CHECK_H
#define DP_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            check_failures++;                                                                                          \
        }                                                                                                              \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                                             \
    do {                                                                                                               \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);                                 \
        if (a_ != b_) {                                                                                                \
            fprintf(stderr, "%s:%d: %s == %llu, expected %s == %llu\n", __FILE__, __LINE__, #a, a_, #b, b_);           \
            check_failures++;                                                                                          \
        }                                                                                                              \
    } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_CLOSE(a, b, tol)                                                                                         \
    do {                                                                                                               \
        double a_ = (double)(a), b_ = (double)(b);                                                                     \
        double s_ = fabs(b_) > 1.0 ? fabs(b_) : 1.0;                                                                   \
        if (!(fabs(a_ - b_) <= (tol)*s_)) {                                                                            \
            fprintf(stderr, "%s:%d: %s = %.9g, expected %s = %.9g (tol %g)\n", __FILE__, __LINE__, #a, a_, #b, b_,     \
                    (double)(tol));                                                                                    \
            check_failures++;                                                                                          \
        }                                                                                                              \
    } while (0)

#define CHECK_OK(expr)                                                                                                 \
    do {                                                                                                               \
        int rc_ = (expr);                                                                                              \
        if (rc_ != 0) {                                                                                                \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr, rc_, dp_error_message());        \
            check_failures++;                                                                                          \
        }                                                                                                              \
    } while (0)

static inline int check_report(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
