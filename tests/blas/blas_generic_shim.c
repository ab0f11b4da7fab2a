/* blas_generic_shim.c: LD_PRELOADed into dpprof by tests/blas/run_blas_test.sh, it plays an OpenBLAS
 * that does not know this CPU: openblas_get_corename() says "Prescott" (its generic fallback)
 * unless OPENBLAS_CORETYPE names a core, as 0.3.21 does on Intel family 6 model 207. */
#include <stdlib.h>

char *openblas_get_corename(void);

char *openblas_get_corename(void) {
    static char prescott[] = "Prescott";
    char *forced = getenv("OPENBLAS_CORETYPE");
    return forced && *forced ? forced : prescott;
}
