/* dtype.c: dtype sizes and names. */
#include "dtype.h"

static const char *const names[DP_DTYPE_COUNT] = {"f32", "bf16", "i32"};
static const size_t sizes[DP_DTYPE_COUNT] = {4, 2, 4};

size_t dp_dtype_size(dp_dtype t) { return (unsigned)t < DP_DTYPE_COUNT ? sizes[t] : 0; }

const char *dp_dtype_name(dp_dtype t) { return (unsigned)t < DP_DTYPE_COUNT ? names[t] : "?"; }

int dp_dtype_parse(const char *name, dp_dtype *out) {
    for (int i = 0; i < DP_DTYPE_COUNT; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (dp_dtype)i;
            return 0;
        }
    return -1;
}
