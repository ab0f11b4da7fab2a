/* cpu_philox.c: Philox4x32-10 over consecutive blocks. The rounds need the high and low halves
 * of a 32 x 32 -> 64-bit product; a compiler's vectorised loop widens every lane to 64 bits and
 * spends most of its time shuffling (2.4 ns a normal on a 2-core EPYC). With AVX2 the even and
 * odd lanes go through vpmuludq directly and blends put the halves back: eight blocks per
 * instruction (0.84 ns a normal), the same integer arithmetic, so the same words. */
#include "cpu_philox.h"

#include "philox.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define DP_PHILOX_AVX2 1
#endif

/* The portable loop, inlined into each caller so that each compiles it for its own target. */
static inline __attribute__((always_inline)) void words_loop(uint64_t seed, uint64_t stream, uint64_t block0,
                                                             int64_t nb, uint32_t *w, int64_t ld) {
    for (int64_t j = 0; j < nb; j++) {
        dp_philox_out o = dp_philox4x32(seed, stream, block0 + (uint64_t)j);
        for (int k = 0; k < 4; k++) w[k * ld + j] = o.v[k];
    }
}

#ifdef DP_PHILOX_AVX2
/* With AVX-512 the compiler's loop has 64-bit lanes and multiplies of its own and ran the noise
 * at ~1.75 ns a normal (13 ms for 7.4 M parameters on an AVX-512 EPYC, 2026-11-24): that CPU
 * keeps it. */
__attribute__((target("avx512f"))) static void philox_words_avx512(uint64_t seed, uint64_t stream, uint64_t block0,
                                                                    int64_t nb, uint32_t *w, int64_t ld) {
    words_loop(seed, stream, block0, nb, w, ld);
}

/* lo and hi halves of a * m per 32-bit lane */
__attribute__((target("avx2"))) static inline void mulhilo8(__m256i a, __m256i m, __m256i *lo, __m256i *hi) {
    __m256i even = _mm256_mul_epu32(a, m);                                           /* lanes 0, 2, 4, 6 */
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(m, 32)); /* lanes 1, 3, 5, 7 */
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

__attribute__((target("avx2"))) static void philox_words_avx2(uint64_t seed, uint64_t stream, uint64_t block0,
                                                               int64_t nb, uint32_t *w, int64_t ld) {
    const __m256i m0 = _mm256_set1_epi32((int)DP_PHILOX_M0), m1 = _mm256_set1_epi32((int)DP_PHILOX_M1);
    const __m256i s2 = _mm256_set1_epi32((int)(uint32_t)stream), s3 = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int64_t j = 0;
    for (; j + 8 <= nb; j += 8) {
        const uint64_t b = block0 + (uint64_t)j;
        /* the low words of b + lane wrap within the eight when b's low word is near 2^32: the high
         * word then steps for the lanes past the wrap */
        __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)b), lane);
        __m256i wrapped = _mm256_cmpgt_epi32(_mm256_xor_si256(_mm256_set1_epi32((int)(uint32_t)b), _mm256_set1_epi32(INT32_MIN)),
                                             _mm256_xor_si256(c0, _mm256_set1_epi32(INT32_MIN)));
        __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32((int)(uint32_t)(b >> 32)), wrapped); /* -(-1) = +1 */
        __m256i c2 = s2, c3 = s3;
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int r = 0; r < 10; r++) { /* dp_philox4x32's round, eight lanes at once */
            __m256i lo0, hi0, lo1, hi1;
            mulhilo8(c0, m0, &lo0, &hi0);
            mulhilo8(c2, m1, &lo1, &hi1);
            __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
            __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
            c0 = n0;
            c1 = lo1;
            c2 = n2;
            c3 = lo0;
            k0 += DP_PHILOX_W0;
            k1 += DP_PHILOX_W1;
        }
        _mm256_storeu_si256((__m256i *)(w + j), c0);
        _mm256_storeu_si256((__m256i *)(w + ld + j), c1);
        _mm256_storeu_si256((__m256i *)(w + 2 * ld + j), c2);
        _mm256_storeu_si256((__m256i *)(w + 3 * ld + j), c3);
    }
    if (j < nb) words_loop(seed, stream, block0 + (uint64_t)j, nb - j, w + j, ld);
}
#endif

int dp_cpu_philox_words_avx2(uint64_t seed, uint64_t stream, uint64_t block0, int64_t nb, uint32_t *w, int64_t ld) {
#ifdef DP_PHILOX_AVX2
    if (__builtin_cpu_supports("avx2")) {
        philox_words_avx2(seed, stream, block0, nb, w, ld);
        return 1;
    }
#endif
    (void)seed, (void)stream, (void)block0, (void)nb, (void)w, (void)ld;
    return 0;
}

void dp_cpu_philox_words(uint64_t seed, uint64_t stream, uint64_t block0, int64_t nb, uint32_t *w, int64_t ld) {
#ifdef DP_PHILOX_AVX2
    if (__builtin_cpu_supports("avx512f")) {
        philox_words_avx512(seed, stream, block0, nb, w, ld);
        return;
    }
#endif
    if (!dp_cpu_philox_words_avx2(seed, stream, block0, nb, w, ld)) words_loop(seed, stream, block0, nb, w, ld);
}
