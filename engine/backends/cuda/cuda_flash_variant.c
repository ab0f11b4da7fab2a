/* cuda_flash_variant.c: parsing DPPROF_FLASH_VARIANT (see cuda_flash_variant.h). */
#include "cuda_flash_variant.h"

#include "error.h"

#include <stdlib.h>

/* One variant number in [0, n) at *p, advancing *p past it; -1 when there is none. */
static long variant_number(const char **p, int n) {
    if (**p < '0' || **p > '9') return -1;
    char *end;
    long v = strtol(*p, &end, 10);
    *p = end;
    return v < n ? v : -1;
}

int dp_cuda_flash_variant_parse(const char *text, int *gram, int *grad) {
    *gram = 0;
    *grad = 0;
    if (!text || !*text) return DP_OK;
    const char *p = text;
    long g = variant_number(&p, DP_CUDA_FLASH_GRAM_VARIANTS), h = 0;
    if (g >= 0 && *p == ',') {
        p++;
        h = variant_number(&p, DP_CUDA_FLASH_GRAD_VARIANTS);
    }
    if (g < 0 || h < 0 || *p)
        return dp_error_set(DP_EINVAL,
                            "DPPROF_FLASH_VARIANT='%s': expected GRAM[,GRAD] with GRAM in 0..%d and GRAD in 0..%d "
                            "(0,0: the default kernels)",
                            text, DP_CUDA_FLASH_GRAM_VARIANTS - 1, DP_CUDA_FLASH_GRAD_VARIANTS - 1);
    *gram = (int)g;
    *grad = (int)h;
    return DP_OK;
}
