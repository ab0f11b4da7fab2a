/* test_flash_variant.c: the CUDA backend's benchmark knob DPPROF_FLASH_VARIANT, GRAM[,GRAD], is
 * parsed with the ranges named when wrong (plain C: runs in every build). */
#include "check.h"
#include "cuda_flash_variant.h"
#include "error.h"

#include <string.h>

int main(void) {
    int gv = -1, hv = -1;
    CHECK_OK(dp_cuda_flash_variant_parse(NULL, &gv, &hv));
    CHECK(gv == 0 && hv == 0);
    CHECK_OK(dp_cuda_flash_variant_parse("", &gv, &hv));
    CHECK(gv == 0 && hv == 0);
    CHECK_OK(dp_cuda_flash_variant_parse("3", &gv, &hv));
    CHECK(gv == 3 && hv == 0);
    CHECK_OK(dp_cuda_flash_variant_parse("1,2", &gv, &hv));
    CHECK(gv == 1 && hv == 2);
    const char *bad[] = {"4", "3,3", "-1", "x", "3,", "1,2,0", "2 ", "99999999999999999999"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        CHECK(dp_cuda_flash_variant_parse(bad[k], &gv, &hv) == DP_EINVAL &&
              strstr(dp_error_message(), "GRAM in 0..3 and GRAD in 0..2"));
    return check_report("test_flash_variant");
}
