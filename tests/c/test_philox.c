/* test_philox.c: the counter-based generator. Philox4x32-10 against Random123's known-answer
 * vectors; the deterministic log and sin/cos against libm; and the moments of the uniform and
 * normal streams against their sampling error. */
#include "check.h"
#include "philox.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static void test_known_answers(void) {
    /* Random123 kat_vectors: counter words c0..c3, key k0 k1 -> 4 output words */
    static const uint32_t kat[3][10] = {{0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                        {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
                                         0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int i = 0; i < 3; i++) {
        const uint32_t *v = kat[i];
        uint64_t block = (uint64_t)v[1] << 32 | v[0], stream = (uint64_t)v[3] << 32 | v[2];
        uint64_t seed = (uint64_t)v[5] << 32 | v[4];
        dp_philox_out o = dp_philox4x32(seed, stream, block);
        for (int k = 0; k < 4; k++) CHECK_EQ_U64(o.v[k], v[6 + k]);
    }
}

/* FNV-1a over the bits of the normals of 2^18 blocks and of log / sin / cos at the uniforms' edges:
 * the value the branchy first version gave. The CUDA kernels compile the same header and test_cuda
 * compares them with the CPU, so a changed hash means the noise changed on every device. */
static void test_golden_bits(void) {
    uint64_t h = 1469598103934665603ull;
    float z[4];
    for (uint64_t b = 0; b < (1u << 18); b++) {
        dp_philox_normal4(0x1234abcd5678ull, 0x4450000000000007ull, b * 977 + 3, z);
        for (int k = 0; k < 4; k++) {
            uint32_t u;
            memcpy(&u, &z[k], 4);
            h = (h ^ u) * 1099511628211ull;
        }
    }
    static const uint32_t words[] = {0u, 1u, 511u, 512u, 0xffffffffu, 0x80000000u, 0x7fffffffu, 0xb504f333u};
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            float u1 = dp_philox_uniform_word(words[i]), u2 = dp_philox_uniform_word(words[j]), s, c;
            float r = DP_SQRT(DP_MUL(-2.0f, dp_det_log(u1)));
            dp_det_sincos_turn(u2, &s, &c);
            float o[3] = {r, s, c};
            for (int k = 0; k < 3; k++) {
                uint32_t u;
                memcpy(&u, &o[k], 4);
                h = (h ^ u) * 1099511628211ull;
            }
        }
    printf("golden bits: 0x%016llx\n", (unsigned long long)h);
    CHECK_EQ_U64(h, 0xd9f4df6697f4a6e8ull);
}

static void test_deterministic_math(void) {
    double max_log = 0, max_trig = 0;
    for (int i = 1; i <= 200000; i++) {
        float u = dp_philox_uniform_word((uint32_t)i * 2654435761u);
        double e = fabs(dp_det_log(u) - log((double)u));
        double rel = e / fmax(fabs(log((double)u)), 1e-3);
        if (rel > max_log) max_log = rel;
        float s, c;
        dp_det_sincos_turn(u, &s, &c);
        double a = 6.283185307179586 * (double)u;
        double et = fmax(fabs(s - sin(a)), fabs(c - cos(a)));
        if (et > max_trig) max_trig = et;
    }
    printf("deterministic log: max relative error %.3g; sin/cos: max absolute error %.3g\n", max_log, max_trig);
    CHECK(max_log < 4e-7); /* a few f32 ulps */
    CHECK(max_trig < 1e-6);
    CHECK(dp_det_log(1.0f) == 0.0f);
}

static void test_moments(void) {
    const int n = 1 << 20;
    double su = 0, suu = 0, sz = 0, szz = 0, sz4 = 0;
    float z4[4];
    for (int i = 0; i < n; i++) {
        double u = dp_philox_uniform(42, 7, (uint64_t)i);
        CHECK(u > 0.0 && u < 1.0);
        su += u;
        suu += u * u;
        double z = dp_philox_normal(42, 7, (uint64_t)i);
        if ((i & 3) == 0) dp_philox_normal4(42, 7, (uint64_t)i >> 2, z4);
        if (z != z4[i & 3]) {
            CHECK(z == z4[i & 3]);
            break;
        }
        sz += z;
        szz += z * z;
        sz4 += z * z * z * z;
    }
    double mu = su / n, vu = suu / n - mu * mu;
    double mz = sz / n, vz = szz / n - mz * mz, kurt = sz4 / n;
    printf("uniform mean %.5f var %.5f; normal mean %.5f var %.5f E[z^4] %.4f (n = %d)\n", mu, vu, mz, vz, kurt, n);
    /* tolerances: 5 standard errors of each estimate for n = 2^20 samples */
    CHECK(fabs(mu - 0.5) < 5 * sqrt(1.0 / 12 / n));
    CHECK(fabs(vu - 1.0 / 12) < 5 * sqrt(1.0 / 180 / n));
    CHECK(fabs(mz) < 5 * sqrt(1.0 / n));
    CHECK(fabs(vz - 1.0) < 5 * sqrt(2.0 / n));
    CHECK(fabs(kurt - 3.0) < 5 * sqrt(96.0 / n));
    /* different streams and seeds give different numbers */
    CHECK(dp_philox_normal(42, 7, 0) != dp_philox_normal(42, 8, 0));
    CHECK(dp_philox_normal(42, 7, 0) != dp_philox_normal(43, 7, 0));
}

int main(void) {
    test_known_answers();
    test_golden_bits();
    test_deterministic_math();
    test_moments();
    return check_report("test_philox");
}
