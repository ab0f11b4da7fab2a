/* cpu_sums.c: dot products and sums of squares in double (cpu_sums.h). */
#include "cpu_sums.h"

#include "cpu_util.h"

#define LANES 16 /* partial sums: element j goes to lane j % LANES */

/* The f32 loop: no dtype test per element, compiled per instruction set (the same bits on each). */
DP_CPU_CLONES static double dot_f32(const float *x, const float *y, int64_t n) {
    double acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += (double)x[j + l] * (double)y[j + l];
    double s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; j < n; j++) s += (double)x[j] * (double)y[j];
    return s;
}

/* The same order for bf16 operands, widened element by element. */
static double dot_any(dp_dtype tx, const void *x, dp_dtype ty, const void *y, int64_t at, int64_t n) {
    double acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += (double)dp_cpu_ld(tx, x, at + j + l) * (double)dp_cpu_ld(ty, y, at + j + l);
    double s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; j < n; j++) s += (double)dp_cpu_ld(tx, x, at + j) * (double)dp_cpu_ld(ty, y, at + j);
    return s;
}

double dp_cpu_dot(dp_dtype tx, const void *x, dp_dtype ty, const void *y, int64_t at, int64_t n) {
    if (!y) y = x, ty = tx;
    if (tx == DP_F32 && ty == DP_F32) return dot_f32((const float *)x + at, (const float *)y + at, n);
    return dot_any(tx, x, ty, y, at, n);
}
