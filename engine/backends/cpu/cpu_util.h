/* cpu_util.h: element access shared by the CPU backend's files (backend_cpu.c, cpu_layers.c,
 * cpu_dpsgd.c, cpu_attention.c): f32 or bf16 values loaded as f32 and stored with
 * round-to-nearest-even, and blocks of either seen as f32. */
#ifndef DP_CPU_UTIL_H
#define DP_CPU_UTIL_H

#include "dtype.h"
#include "error.h"

#include <stdint.h>

/* Compiles a hot loop for AVX-512, AVX2 and the baseline, the loader picking the best the CPU has
 * (GCC's target_clones, x86-64 with ifunc). Contraction stays off and only IEEE-rounded
 * operations are used, so every variant gives the same bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define DP_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DP_CPU_CLONES
#endif

/* Element i of x (f32 or bf16) as f32. */
static inline float dp_cpu_ld(dp_dtype t, const void *x, int64_t i) {
    return t == DP_BF16 ? dp_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* Stores v into element i of x (f32, or bf16 rounded to nearest even). */
static inline void dp_cpu_st(dp_dtype t, void *x, int64_t i, float v) {
    if (t == DP_BF16)
        ((uint16_t *)x)[i] = dp_f32_to_bf16(v);
    else
        ((float *)x)[i] = v;
}

/* rows x cols block at element offset `at` of a row-major matrix x (row stride ld) as f32: a
 * pointer into x itself when t is f32 (*ld_out = ld), else the block widened into buf (rows * cols
 * floats, *ld_out = cols). */
static inline const float *dp_cpu_f32_block(dp_dtype t, const void *x, int64_t ld, int64_t at, int64_t rows,
                                            int64_t cols, float *buf, int64_t *ld_out) {
    if (t == DP_F32) {
        *ld_out = ld;
        return (const float *)x + at;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) buf[r * cols + c] = dp_cpu_ld(t, x, at + r * ld + c);
    *ld_out = cols;
    return buf;
}

/* DP_OK for f32 and bf16; DP_ENOTSUP naming op and the dtype otherwise. */
static inline int dp_cpu_need_float(dp_dtype t, const char *op) {
    if (t == DP_F32 || t == DP_BF16) return DP_OK;
    return dp_error_set(DP_ENOTSUP, "%s: dtype %s is not supported (f32 or bf16)", op, dp_dtype_name(t));
}

#endif
