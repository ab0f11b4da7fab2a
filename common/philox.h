/* philox.h: the counter-based generator shared by the engine (CPU backend, data, sampling) and
 * the CUDA kernels. It lives in common/, which both may include: plain inline C, system headers
 * only, compiled as C by the engine and as CUDA by kernels/.
 *
 * Philox4x32-10 (Salmon et al., SC'11) keyed by a 64-bit seed; the counter is the element's
 * block index (64 bits) and a 64-bit stream (the caller derives it from the step and tensor),
 * so element i of a tensor gets the same bits on every device whatever the launch shape.
 * Uniforms are (2k+1)/2^24 for the top 23 bits k of a word, exact in f32. Normals use Box-Muller with log, sin and cos
 * written here from IEEE-rounded +, -, *, / and sqrt only (never fused, never libm), so they are bit-identical on the
 * CPU and the GPU. Accuracy is a few ulp, plenty for noise. */
#ifndef DP_PHILOX_H
#define DP_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define DP_HD __host__ __device__ __forceinline__
#else
#define DP_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define DP_MUL(a, b) __fmul_rn((a), (b))
#define DP_ADD(a, b) __fadd_rn((a), (b))
#define DP_SUB(a, b) __fsub_rn((a), (b))
#define DP_DIV(a, b) __fdiv_rn((a), (b))
#define DP_SQRT(a) __fsqrt_rn(a)
#else
/* Host code is compiled with -ffp-contract=off (ISO C mode), so these are separate roundings. */
#define DP_MUL(a, b) ((a) * (b))
#define DP_ADD(a, b) ((a) + (b))
#define DP_SUB(a, b) ((a) - (b))
#define DP_DIV(a, b) ((a) / (b))
#define DP_SQRT(a) sqrtf(a) /* IEEE correctly rounded */
#endif
#include <math.h>

typedef struct {
    uint32_t v[4];
} dp_philox_out;

/* Philox4x32's round multipliers and key increments (Weyl constants); the CPU's vector rounds
 * (cpu_philox.c) use them too. */
#define DP_PHILOX_M0 0xD2511F53u
#define DP_PHILOX_M1 0xCD9E8D57u
#define DP_PHILOX_W0 0x9E3779B9u
#define DP_PHILOX_W1 0xBB67AE85u

DP_HD uint32_t dp_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* The 4 random words of block `block` in stream `stream` under key `seed`. */
DP_HD dp_philox_out dp_philox4x32(uint64_t seed, uint64_t stream, uint64_t block) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = dp_philox_mulhilo(DP_PHILOX_M0, c0, &hi0);
        uint32_t lo1 = dp_philox_mulhilo(DP_PHILOX_M1, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += DP_PHILOX_W0;
        k1 += DP_PHILOX_W1;
    }
    dp_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

/* A word as a uniform in (0, 1): (2k+1) / 2^24 for the top 23 bits k. Exact. */
DP_HD float dp_philox_uniform_word(uint32_t w) {
    return (float)(((w >> 9) << 1) | 1u) * 5.9604644775390625e-08f; /* 2^-24 */
}

/* log(x) for x in (0, 1], from IEEE-rounded operations only. */
DP_HD float dp_det_log(float x) {
    union {
        float f;
        uint32_t u;
    } b;
    b.f = x;
    int e = (int)((b.u >> 23) & 0xffu) - 127;
    b.u = (b.u & 0x7fffffu) | 0x3f800000u; /* mantissa in [1, 2) */
    float m = b.f;
    int big = m > 1.41421356f;     /* selects, not branches: the CPU loop over blocks vectorises */
    m = big ? DP_MUL(m, 0.5f) : m; /* exact */
    e += big;
    float f = DP_SUB(m, 1.0f); /* exact (Sterbenz) */
    float s = DP_DIV(f, DP_ADD(2.0f, f));
    float z = DP_MUL(s, s);
    /* log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), |s| <= 0.1716 */
    float p = 0.181818181818f;                 /* 2/11 */
    p = DP_ADD(0.222222222222f, DP_MUL(z, p)); /* 2/9 */
    p = DP_ADD(0.285714285714f, DP_MUL(z, p)); /* 2/7 */
    p = DP_ADD(0.4f, DP_MUL(z, p));            /* 2/5 */
    p = DP_ADD(0.666666666667f, DP_MUL(z, p)); /* 2/3 */
    p = DP_ADD(2.0f, DP_MUL(z, p));
    float logm = DP_MUL(s, p);
    float ef = (float)e;
    /* e * ln2 split into a part exact in f32 and a small correction */
    return DP_ADD(DP_MUL(ef, 0.693145751953125f), DP_ADD(DP_MUL(ef, 1.428606765330187e-06f), logm));
}

/* sin and cos of x in [0, pi/4] by Taylor series to x^10 (error < 2e-9). */
DP_HD void dp_det_sincos_small(float x, float *s, float *c) {
    float z = DP_MUL(x, x);
    float ps = DP_ADD(-1.0f / 5040.0f, DP_MUL(z, 1.0f / 362880.0f));
    ps = DP_ADD(1.0f / 120.0f, DP_MUL(z, ps));
    ps = DP_ADD(-1.0f / 6.0f, DP_MUL(z, ps));
    *s = DP_ADD(x, DP_MUL(DP_MUL(x, z), ps));
    float pc = DP_ADD(1.0f / 40320.0f, DP_MUL(z, -1.0f / 3628800.0f));
    pc = DP_ADD(-1.0f / 720.0f, DP_MUL(z, pc));
    pc = DP_ADD(1.0f / 24.0f, DP_MUL(z, pc));
    pc = DP_ADD(-0.5f, DP_MUL(z, pc));
    *c = DP_ADD(1.0f, DP_MUL(z, pc));
}

/* sin and cos of 2*pi*u for u in [0, 1). Branch-free (the quadrant picks by selects), so a CPU
 * loop over many of them vectorises; the same values as a branchy version. */
DP_HD void dp_det_sincos_turn(float u, float *s, float *c) {
    int q = (int)DP_MUL(u, 4.0f);                 /* quadrant; u*4 is exact */
    float r = DP_SUB(u, DP_MUL((float)q, 0.25f)); /* in [0, 0.25), exact */
    int flip = r > 0.125f;
    r = flip ? DP_SUB(0.25f, r) : r; /* exact */
    float x = DP_MUL(r, 6.28318530717958647692f);
    float sx, cx;
    dp_det_sincos_small(x, &sx, &cx);
    float sp = flip ? cx : sx, cp = flip ? sx : cx; /* sin, cos of the angle within the quadrant */
    /* quadrant 0: (sp, cp); 1: (cp, -sp); 2: (-sp, -cp); 3: (-cp, sp) */
    int odd = q & 1, neg_s = (q & 3) >= 2, neg_c = q == 1 || q == 2;
    float sv = odd ? cp : sp, cv = odd ? sp : cp;
    *s = neg_s ? -sv : sv;
    *c = neg_c ? -cv : cv;
}

/* Uniform in (0, 1) for element i of (seed, stream). */
DP_HD float dp_philox_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    dp_philox_out o = dp_philox4x32(seed, stream, i >> 2);
    return dp_philox_uniform_word(o.v[i & 3]);
}

/* Box-Muller: the two standard normals of random words w1 (radius) and w2 (angle). */
DP_HD void dp_philox_box_muller(uint32_t w1, uint32_t w2, float *z1, float *z2) {
    float u1 = dp_philox_uniform_word(w1);
    float u2 = dp_philox_uniform_word(w2);
    float r = DP_SQRT(DP_MUL(-2.0f, dp_det_log(u1)));
    float s, c;
    dp_det_sincos_turn(u2, &s, &c);
    *z1 = DP_MUL(r, c);
    *z2 = DP_MUL(r, s);
}

/* The 4 standard normals of block `block` (elements 4*block .. 4*block+3). */
DP_HD void dp_philox_normal4(uint64_t seed, uint64_t stream, uint64_t block, float out[4]) {
    dp_philox_out o = dp_philox4x32(seed, stream, block);
    dp_philox_box_muller(o.v[0], o.v[1], &out[0], &out[1]);
    dp_philox_box_muller(o.v[2], o.v[3], &out[2], &out[3]);
}

/* Standard normal for element i of (seed, stream). */
DP_HD float dp_philox_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    float z[4];
    dp_philox_normal4(seed, stream, i >> 2, z);
    return z[i & 3];
}

#endif
