/* cpu_blas.h: which OpenBLAS kernel runs, and the right one when the library does not know the CPU.
 * OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU model when it loads; a model newer
 * than the library (Debian 12's 0.3.21 on Intel family 6 model 207, Sapphire/Emerald Rapids)
 * falls back to the generic Prescott kernels, about 4x slower GEMMs, in silence. dpprof then
 * chooses the kernel from the CPU's feature flags: the binary re-executes itself with
 * OPENBLAS_CORETYPE set before the library's choice matters (lua/bind/main.c), and a generic
 * kernel that still runs is reported once. */
#ifndef DP_CPU_BLAS_H
#define DP_CPU_BLAS_H

#include <stddef.h>

/* The feature flags the kernel choice reads (1 present, 0 absent); amd: the vendor is AMD. */
typedef struct dp_cpu_features {
    int x86, amd;
    int ssse3, sse4_2, avx, avx2, fma;
    int avx512f, avx512dq, avx512cd, avx512bw, avx512vl, avx512bf16;
} dp_cpu_features;

/* This CPU's flags, as the OS enables them (the compiler's CPU detection); all 0 off x86. */
void dp_cpu_features_detect(dp_cpu_features *f);

/* The OpenBLAS core type (an OPENBLAS_CORETYPE value 0.3.21 accepts) for these flags: Cooperlake,
 * SkylakeX, Zen, Haswell, Sandybridge, Nehalem or Core2; NULL when none beats the generic kernel. */
const char *dp_cpu_blas_core_for(const dp_cpu_features *f);

/* 1 when the named OpenBLAS core is one of its generic fallbacks (Prescott, Katmai, ...). */
int dp_cpu_blas_core_is_generic(const char *core);

/* The kernel OpenBLAS runs now (openblas_get_corename()), "unknown" if it says nothing. */
const char *dp_cpu_blas_core(void);

/* The library's version ("0.3.21") into buf (n bytes), from openblas_get_config(); buf. */
const char *dp_cpu_blas_version(char *buf, size_t n);

/* Who chose the running kernel: "openblas" (its own detection), "dpprof" (the re-execution with
 * DPPROF_BLAS_CORETYPE) or "OPENBLAS_CORETYPE" (the user's environment). */
const char *dp_cpu_blas_chosen_by(void);

/* The core type to re-execute with, or NULL to carry on: non-NULL only when OpenBLAS runs a
 * generic kernel, neither OPENBLAS_CORETYPE nor DPPROF_BLAS_CORETYPE is set and the flags name a
 * better one. */
const char *dp_cpu_blas_reexec_core(void);

/* Prints one warning on stderr, once a process, when a generic kernel runs; 1 if it runs. */
int dp_cpu_blas_warn_generic(void);

#endif
