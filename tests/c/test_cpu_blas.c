/* test_cpu_blas.c: the OpenBLAS kernel chosen from a CPU's flags when the library falls back to a
 * generic one (cpu_blas.h): the table, the generic names, the library's version. */
#include "check.h"
#include "cpu_blas.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static dp_cpu_features avx512(int bf16, int amd) {
    dp_cpu_features f = {.x86 = 1, .amd = amd, .ssse3 = 1, .sse4_2 = 1, .avx = 1, .avx2 = 1, .fma = 1,
                         .avx512f = 1, .avx512dq = 1, .avx512cd = 1, .avx512bw = 1, .avx512vl = 1, .avx512bf16 = bf16};
    return f;
}

static int same(const char *a, const char *b) { return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0); }

int main(void) {
    /* Intel family 6 model 207 (Emerald Rapids): AVX-512 with BF16, unknown to OpenBLAS 0.3.21 */
    dp_cpu_features f = avx512(1, 0);
    CHECK(same(dp_cpu_blas_core_for(&f), "Cooperlake"));
    f = avx512(0, 0); /* Skylake-SP, Ice Lake */
    CHECK(same(dp_cpu_blas_core_for(&f), "SkylakeX"));
    f = avx512(1, 1); /* Zen 4 */
    CHECK(same(dp_cpu_blas_core_for(&f), "Cooperlake"));
    f = avx512(0, 0);
    f.avx512bw = 0; /* Knights Landing: no BW/VL, so not SkylakeX's kernels; AVX2 ones */
    CHECK(same(dp_cpu_blas_core_for(&f), "Haswell"));
    f.amd = 1;
    CHECK(same(dp_cpu_blas_core_for(&f), "Zen"));
    dp_cpu_features sandy = {.x86 = 1, .ssse3 = 1, .sse4_2 = 1, .avx = 1};
    CHECK(same(dp_cpu_blas_core_for(&sandy), "Sandybridge"));
    dp_cpu_features nehalem = {.x86 = 1, .ssse3 = 1, .sse4_2 = 1};
    CHECK(same(dp_cpu_blas_core_for(&nehalem), "Nehalem"));
    dp_cpu_features core2 = {.x86 = 1, .ssse3 = 1};
    CHECK(same(dp_cpu_blas_core_for(&core2), "Core2"));
    dp_cpu_features old = {.x86 = 1};
    CHECK(dp_cpu_blas_core_for(&old) == NULL);
    dp_cpu_features arm = {0};
    arm.avx2 = arm.fma = 1; /* flags without x86 mean nothing */
    CHECK(dp_cpu_blas_core_for(&arm) == NULL);
    /* AVX2 without FMA (some VIA/Zhaoxin parts): Sandybridge's kernels, never Haswell's FMA code */
    dp_cpu_features nofma = {.x86 = 1, .ssse3 = 1, .sse4_2 = 1, .avx = 1, .avx2 = 1};
    CHECK(same(dp_cpu_blas_core_for(&nofma), "Sandybridge"));

    CHECK(dp_cpu_blas_core_is_generic("Prescott"));
    CHECK(dp_cpu_blas_core_is_generic("prescott"));
    CHECK(dp_cpu_blas_core_is_generic("Katmai"));
    CHECK(dp_cpu_blas_core_is_generic(""));
    CHECK(dp_cpu_blas_core_is_generic(NULL));
    CHECK(!dp_cpu_blas_core_is_generic("SkylakeX"));
    CHECK(!dp_cpu_blas_core_is_generic("Zen"));
    CHECK(!dp_cpu_blas_core_is_generic("Cooperlake"));

    /* the library's version: digits and dots, as openblas_get_config() reports it */
    char v[32];
    dp_cpu_blas_version(v, sizeof v);
    CHECK(isdigit((unsigned char)v[0]));
    CHECK(strchr(v, '.') != NULL);
    for (const char *p = v; *p; p++) CHECK(isdigit((unsigned char)*p) || *p == '.');
    CHECK(strcmp(dp_cpu_blas_core(), "unknown") != 0);

    /* who chose: the user's variable is never overridden, ours is recognised */
    unsetenv("DPPROF_BLAS_CORETYPE");
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    CHECK(same(dp_cpu_blas_chosen_by(), "OPENBLAS_CORETYPE"));
    CHECK(dp_cpu_blas_reexec_core() == NULL);
    setenv("DPPROF_BLAS_CORETYPE", "Prescott", 1);
    CHECK(same(dp_cpu_blas_chosen_by(), "dpprof"));
    CHECK(dp_cpu_blas_reexec_core() == NULL); /* already re-executed once: never a loop */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("DPPROF_BLAS_CORETYPE");
    CHECK(same(dp_cpu_blas_chosen_by(), "openblas"));
    return check_report("cpu_blas");
}
