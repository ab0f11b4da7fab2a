/* cpu_blas.c: the OpenBLAS kernel that runs and the one the CPU's flags call for (cpu_blas.h). */
#include "cpu_blas.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void dp_cpu_features_detect(dp_cpu_features *f) {
    memset(f, 0, sizeof *f);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f->x86 = 1;
    f->amd = __builtin_cpu_is("amd") != 0;
    f->ssse3 = __builtin_cpu_supports("ssse3") != 0;
    f->sse4_2 = __builtin_cpu_supports("sse4.2") != 0;
    f->avx = __builtin_cpu_supports("avx") != 0;
    f->avx2 = __builtin_cpu_supports("avx2") != 0;
    f->fma = __builtin_cpu_supports("fma") != 0;
    f->avx512f = __builtin_cpu_supports("avx512f") != 0;
    f->avx512dq = __builtin_cpu_supports("avx512dq") != 0;
    f->avx512cd = __builtin_cpu_supports("avx512cd") != 0;
    f->avx512bw = __builtin_cpu_supports("avx512bw") != 0;
    f->avx512vl = __builtin_cpu_supports("avx512vl") != 0;
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
    f->avx512bf16 = __builtin_cpu_supports("avx512bf16") != 0;
#endif
#endif
}

const char *dp_cpu_blas_core_for(const dp_cpu_features *f) {
    if (!f->x86) return NULL;
    /* OpenBLAS's SkylakeX kernels need AVX-512 F, DQ, CD, BW and VL; Cooperlake adds BF16 */
    if (f->avx512f && f->avx512dq && f->avx512cd && f->avx512bw && f->avx512vl)
        return f->avx512bf16 ? "Cooperlake" : "SkylakeX";
    if (f->avx2 && f->fma) return f->amd ? "Zen" : "Haswell";
    if (f->avx) return "Sandybridge";
    if (f->sse4_2) return "Nehalem";
    if (f->ssse3) return "Core2";
    return NULL;
}

int dp_cpu_blas_core_is_generic(const char *core) {
    static const char *const generic[] = {"Prescott", "Katmai", "Coppermine", "Northwood", "Banias", "Unknown", "generic"};
    if (!core || !*core) return 1;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (strcasecmp(core, generic[i]) == 0) return 1;
    return 0;
}

const char *dp_cpu_blas_core(void) {
    const char *core = openblas_get_corename();
    return core && *core ? core : "unknown";
}

const char *dp_cpu_blas_version(char *buf, size_t n) {
    const char *config = openblas_get_config(), *v = config ? strstr(config, "OpenBLAS ") : NULL;
    size_t len = 0;
    if (v) {
        v += strlen("OpenBLAS ");
        while (v[len] && v[len] != ' ' && len + 1 < n) len++;
    }
    if (n == 0) return buf;
    if (len == 0) snprintf(buf, n, "unknown");
    else memcpy(buf, v, len), buf[len] = '\0';
    return buf;
}

const char *dp_cpu_blas_chosen_by(void) {
    const char *ours = getenv("DPPROF_BLAS_CORETYPE"), *set = getenv("OPENBLAS_CORETYPE");
    if (set && *set) return ours && strcmp(ours, set) == 0 ? "dpprof" : "OPENBLAS_CORETYPE";
    return "openblas";
}

const char *dp_cpu_blas_reexec_core(void) {
    const char *set = getenv("OPENBLAS_CORETYPE"), *ours = getenv("DPPROF_BLAS_CORETYPE");
    if ((set && *set) || (ours && *ours)) return NULL;
    if (!dp_cpu_blas_core_is_generic(dp_cpu_blas_core())) return NULL;
    dp_cpu_features f;
    dp_cpu_features_detect(&f);
    return dp_cpu_blas_core_for(&f);
}

int dp_cpu_blas_warn_generic(void) {
    static int warned;
    const char *core = dp_cpu_blas_core();
    if (!dp_cpu_blas_core_is_generic(core)) return 0;
    if (!warned) {
        warned = 1;
        char v[32];
        dp_cpu_features f;
        dp_cpu_features_detect(&f);
        const char *better = dp_cpu_blas_core_for(&f);
        fprintf(stderr,
                "dpprof: warning: OpenBLAS %s runs its generic %s kernels on this CPU: CPU GEMMs and every CPU time "
                "are several times slower than they should be%s%s%s\n",
                dp_cpu_blas_version(v, sizeof v), core, better ? " (OPENBLAS_CORETYPE=" : "", better ? better : "",
                better ? " would choose the CPU's own)" : "");
    }
    return 1;
}
