/* test_cpu_sums.c: the CPU backend's double dot products (cpu_sums.h). The result is the stated
 * order (element j into partial sum j % 16 over the whole groups of 16, the partials added in
 * order, then the tail), bit for bit, for lengths around the group edge; within double rounding
 * of a long double sum; y = NULL is x with itself; the element offset is honoured; bf16 operands
 * give the bits of the same values widened to f32. */
#include "check.h"
#include "cpu_sums.h"
#include "philox.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* the documented order, written out */
static double in_order(const float *x, const float *y, int64_t n) {
    double acc[16] = {0}, s = 0;
    int64_t whole = n / 16 * 16;
    for (int64_t j = 0; j < whole; j++) acc[j % 16] += (double)x[j] * (double)y[j];
    for (int l = 0; l < 16; l++) s += acc[l];
    for (int64_t j = whole; j < n; j++) s += (double)x[j] * (double)y[j];
    return s;
}

int main(void) {
    const int64_t lengths[] = {0, 1, 15, 16, 17, 31, 33, 100, 4099};
    const int64_t most = 4099 + 5;
    float *x = malloc(most * sizeof *x), *y = malloc(most * sizeof *y);
    uint16_t *xh = malloc(most * sizeof *xh), *yh = malloc(most * sizeof *yh);
    for (int64_t i = 0; i < most; i++) {
        x[i] = dp_philox_normal(9, 1, (uint64_t)i), y[i] = dp_philox_normal(9, 2, (uint64_t)i);
        xh[i] = dp_f32_to_bf16(x[i]), yh[i] = dp_f32_to_bf16(y[i]);
    }
    float *xw = malloc(most * sizeof *xw), *yw = malloc(most * sizeof *yw);
    for (int64_t i = 0; i < most; i++) xw[i] = dp_bf16_to_f32(xh[i]), yw[i] = dp_bf16_to_f32(yh[i]);
    printf("dot in 16 fixed partial sums\n");
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
        const int64_t n = lengths[k], at = 5;
        const double d = dp_cpu_dot(DP_F32, x, DP_F32, y, at, n);
        CHECK(d == in_order(x + at, y + at, n));
        long double exact = 0, mag = 0;
        for (int64_t j = 0; j < n; j++) {
            exact += (long double)x[at + j] * y[at + j];
            mag += fabsl((long double)x[at + j] * y[at + j]);
        }
        CHECK(fabsl(d - exact) <= 1e-15L * (long double)(n + 1) * mag);
        CHECK(dp_cpu_dot(DP_F32, x, DP_F32, NULL, at, n) == in_order(x + at, x + at, n));
        CHECK(dp_cpu_dot(DP_BF16, xh, DP_BF16, yh, at, n) == in_order(xw + at, yw + at, n));
        CHECK(dp_cpu_dot(DP_BF16, xh, DP_F32, y, at, n) == in_order(xw + at, y + at, n));
        CHECK(dp_cpu_dot(DP_BF16, xh, DP_BF16, NULL, at, n) == in_order(xw + at, xw + at, n));
        printf("  n = %4lld: |dot - exact| / sum |terms| = %.2e\n", (long long)n,
               mag > 0 ? (double)(fabsl(d - exact) / mag) : 0.0);
    }
    free(x), free(y), free(xh), free(yh), free(xw), free(yw);
    return check_report("test_cpu_sums");
}
