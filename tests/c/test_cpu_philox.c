/* test_cpu_philox.c: the CPU's batched Philox (cpu_philox.c: eight blocks per AVX2 instruction
 * where the CPU has AVX2 but not AVX-512) gives the words of dp_philox4x32 for every block: lengths that are and
 * are not multiples of eight, block counters whose low word wraps inside a group of eight (the
 * high word must step for the lanes past the wrap) and whose 64 bits wrap, seeds and streams
 * with every bit set; and the backend's rand, built on it, gives dp_philox_normal's and
 * dp_philox_uniform's values element by element at any offset. */
#include "check.h"
#include "cpu_philox.h"
#include "device.h"
#include "dpprof_engine.h"
#include "philox.h"
#include "tensor.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* how many of the words, or of the guard words past each row, are not what they should be */
static int compare_words(uint64_t seed, uint64_t stream, uint64_t block0, int64_t nb, const uint32_t *w, int64_t ld) {
    int bad = 0;
    for (int64_t j = 0; j < nb; j++) {
        dp_philox_out o = dp_philox4x32(seed, stream, block0 + (uint64_t)j);
        for (int k = 0; k < 4; k++) bad += w[k * ld + j] != o.v[k];
    }
    for (int k = 0; k < 4; k++)
        for (int64_t j = nb; j < ld; j++) bad += w[k * ld + j] != 0xA5A5A5A5u; /* nothing past the rows */
    return bad;
}

/* the dispatched words and (where the CPU has AVX2) the AVX2 path's, against dp_philox4x32 */
static void check_words(uint64_t seed, uint64_t stream, uint64_t block0, int64_t nb) {
    const int64_t ld = nb + 3; /* a row stride wider than the rows */
    uint32_t *w = malloc((size_t)(4 * ld) * sizeof *w);
    memset(w, 0xA5, (size_t)(4 * ld) * sizeof *w);
    dp_cpu_philox_words(seed, stream, block0, nb, w, ld);
    int bad = compare_words(seed, stream, block0, nb, w, ld);
    memset(w, 0xA5, (size_t)(4 * ld) * sizeof *w);
    if (dp_cpu_philox_words_avx2(seed, stream, block0, nb, w, ld)) bad += compare_words(seed, stream, block0, nb, w, ld);
    if (bad) fprintf(stderr, "seed %llx stream %llx block0 %llx nb %lld: %d words differ\n", (unsigned long long)seed,
                     (unsigned long long)stream, (unsigned long long)block0, (long long)nb, bad);
    CHECK(bad == 0);
    free(w);
}

static void test_words(void) {
    const uint64_t seeds[] = {0, 20240611, ~0ull, 0x243f6a8885a308d3ull};
    const uint64_t streams[] = {0, 0x4450000000000007ull, ~0ull};
    const uint64_t starts[] = {0, 1, 7, (1ull << 32) - 5, (1ull << 32) - 8, (1ull << 32) - 1, (5ull << 32) - 3,
                               ~0ull - 4};
    const int64_t lengths[] = {1, 7, 8, 9, 16, 23, 256};
    for (size_t a = 0; a < sizeof seeds / sizeof *seeds; a++)
        for (size_t b = 0; b < sizeof streams / sizeof *streams; b++)
            for (size_t c = 0; c < sizeof starts / sizeof *starts; c++)
                for (size_t d = 0; d < sizeof lengths / sizeof *lengths; d++)
                    check_words(seeds[a], streams[b], starts[c], lengths[d]);
}

/* the backend's rand at element offsets that start mid-block, over several batches */
static void test_rand(void) {
    dp_device *cpu;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    const int64_t n = 4 * 256 * 3 + 5;
    const uint64_t offsets[] = {0, 1, 3, 4 * ((1ull << 32) - 9) + 2};
    dp_tensor x;
    CHECK_OK(dp_tensor_init(&x, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    for (size_t o = 0; o < sizeof offsets / sizeof *offsets; o++)
        for (int normal = 0; normal < 2; normal++) {
            CHECK_OK(cpu->ops->rand(cpu, DP_F32, x.data, (size_t)n, normal ? DP_RAND_NORMAL : DP_RAND_UNIFORM, 0.0f, 1.0f,
                                    77, 5, offsets[o], 0, 1.0f));
            const float *v = x.data;
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                uint64_t e = offsets[o] + (uint64_t)i;
                float want = normal ? dp_philox_normal(77, 5, e) : dp_philox_uniform(77, 5, e);
                bad += memcmp(&v[i], &want, sizeof want) != 0;
            }
            if (bad) fprintf(stderr, "rand %s at offset %llu: %d of %lld differ\n", normal ? "normal" : "uniform",
                             (unsigned long long)offsets[o], bad, (long long)n);
            CHECK(bad == 0);
        }
    dp_tensor_release(&x);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    printf("batched Philox: %s\n", __builtin_cpu_supports("avx512f") ? "AVX-512 path (the compiler's loop)"
                                    : __builtin_cpu_supports("avx2") ? "AVX2 path"
                                                                     : "portable path (no AVX2 here)");
    printf("AVX2 path tested on its own too: %s\n", __builtin_cpu_supports("avx2") ? "yes" : "no (no AVX2 here)");
    test_words();
    test_rand();
    dp_engine_shutdown();
    return check_report("test_cpu_philox");
}
