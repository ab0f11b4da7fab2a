/* dtype.h: element types of tensors and the bf16 <-> f32 conversions used on every device. */
#ifndef DP_DTYPE_H
#define DP_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { DP_F32 = 0, DP_BF16 = 1, DP_I32 = 2, DP_DTYPE_COUNT } dp_dtype;

/* Bytes per element of dtype (4, 2, 4). */
size_t dp_dtype_size(dp_dtype t);
/* The dtype's name: "f32", "bf16", "i32". */
const char *dp_dtype_name(dp_dtype t);
/* Parses a dtype name; returns 0 and sets *out, or -1 when the name is unknown. */
int dp_dtype_parse(const char *name, dp_dtype *out);

/* bf16 -> f32 (exact). */
static inline float dp_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f32 -> bf16, round to nearest even; NaN stays NaN (the same rule the CUDA kernels use). */
static inline uint16_t dp_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
