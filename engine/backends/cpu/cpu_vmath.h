/* cpu_vmath.h: exp, tanh and the logistic function for the CPU backend's element-wise loops,
 * branch-free and without a libm call, so the compiler vectorises the loops they sit in.
 *
 * Accuracy (tests/c/test_cpu_vmath.c checks it against libm over the whole f32 range):
 * - dp_vexp: within 2 ulp of expf for x in [-87.3, 88.7] (Cody-Waite reduction by ln 2 in two
 *   parts, Cephes's degree-6 polynomial on [-ln2/2, ln2/2]); 0 below -87.34 (where expf is
 *   subnormal: an absolute error under 2^-126), +inf above 88.72, NaN for NaN.
 * - dp_vtanh: within 3 ulp of tanhf (Cephes's odd polynomial for |x| < 0.625, else
 *   1 - 2 / (e^{2|x|} + 1) with the sign put back); +-1 beyond |x| = 9.02.
 * - dp_vsigmoid: 1 / (1 + e^{-x}), within 3 ulp of the libm formula.
 * Only IEEE-rounded +, -, *, / and integer operations on the bits (the build never contracts to
 * fused multiply-adds), so a vector lane and the scalar fallback give the same bits. */
#ifndef DP_CPU_VMATH_H
#define DP_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t dp_vbits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float dp_vfloat(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* e^x; see the header for its accuracy. */
static inline float dp_vexp(float x) {
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x < -87.34f ? -87.34f : x > 88.72f ? 88.72f : x;
    float t = xc * 1.44269504088896341f + shifter;
    float n = t - shifter;                                   /* round(x / ln 2), exact */
    int32_t ni = (int32_t)(dp_vbits(t) - dp_vbits(shifter)); /* the same as an integer */
    float r = xc - n * 0.693359375f;                         /* ln 2's upper bits: n * them is exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * (r * r) + r + 1.0f;
    /* 2^n in two factors, so n = 128 (x near 88.72) does not overflow the exponent field */
    int32_t h = ni / 2;
    float s1 = dp_vfloat((uint32_t)(h + 127) << 23), s2 = dp_vfloat((uint32_t)(ni - h + 127) << 23);
    float y = e * s1 * s2;
    y = x < -87.34f ? 0.0f : y;
    y = x > 88.72f ? INFINITY : y;
    return x != x ? x : y;
}

/* tanh(x); see the header for its accuracy. */
static inline float dp_vtanh(float x) {
    float a = x < 0.0f ? -x : x;
    a = a > 10.0f ? 10.0f : a;
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    float big = 1.0f - 2.0f / (dp_vexp(a + a) + 1.0f);
    big = x < 0.0f ? -big : big;
    return a < 0.625f ? small : big;
}

/* 1 / (1 + e^{-x}). */
static inline float dp_vsigmoid(float x) { return 1.0f / (1.0f + dp_vexp(-x)); }

#endif
