/* cpu_philox.h: Philox4x32-10 (common/philox.h) for many consecutive blocks at once on the CPU,
 * eight blocks per AVX2 instruction where the CPU has it: the same words as dp_philox4x32. */
#ifndef DP_CPU_PHILOX_H
#define DP_CPU_PHILOX_H

#include <stdint.h>

/* The 4 words of blocks block0 .. block0 + nb - 1 of (seed, stream): word k of block block0 + j
 * into w[k * ld + j] (ld >= nb). */
void dp_cpu_philox_words(uint64_t seed, uint64_t stream, uint64_t block0, int64_t nb, uint32_t *w, int64_t ld);

/* The AVX2 path alone (what dp_cpu_philox_words takes on a CPU with AVX2 but not AVX-512), for
 * the tests on any CPU with AVX2; 0 and nothing written without it. */
int dp_cpu_philox_words_avx2(uint64_t seed, uint64_t stream, uint64_t block0, int64_t nb, uint32_t *w, int64_t ld);

#endif
