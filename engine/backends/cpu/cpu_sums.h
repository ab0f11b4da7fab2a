/* cpu_sums.h: the CPU backend's dot products and sums of squares in double, in a fixed order of
 * partial sums that depends on the length alone (cpu_sums.c), so the loops vectorise and results
 * do not depend on the thread count or the instruction set. */
#ifndef DP_CPU_SUMS_H
#define DP_CPU_SUMS_H

#include "dtype.h"

#include <stdint.h>

/* sum over j < n of x[at + j] * y[at + j] in double (y NULL: of x[at + j]^2); x and y f32 or
 * bf16. Sixteen partial sums over consecutive elements, added in order, then the tail. */
double dp_cpu_dot(dp_dtype tx, const void *x, dp_dtype ty, const void *y, int64_t at, int64_t n);

#endif
