/* cpu_dpsgd.h: the CPU implementation of the per-sample DP kernels (dpsgd_ops.h), the
 * specification the CUDA kernels are compared against. */
#ifndef DP_CPU_DPSGD_H
#define DP_CPU_DPSGD_H

#include "dpsgd_ops.h"

/* The CPU DP table (C + OpenMP; deterministic whatever the thread count). */
extern const dpsgd_ops dpsgd_cpu_ops;

#endif
