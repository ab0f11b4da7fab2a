/* test_memory_categories: core's categories are common/memory_categories.h's list: the enum's
 * values in its order, each name, the parser and the list of valid names the errors quote. */
#include "check.h"
#include "memory.h"
#include "memory_categories.h"

#include <string.h>

int main(void) {
    static const char *const names[] = {
#define NAME(id, name, legacy, component) name,
        DPR_MEMORY_CATEGORIES(NAME)
#undef NAME
    };
    const int n = (int)(sizeof names / sizeof names[0]);
    CHECK_EQ_U64(DP_CAT_COUNT, n);
    CHECK_EQ_U64(DP_CAT_COUNT, 11);
    /* each DP_CAT_<ID> is its row's index */
    int row = 0;
#define INDEX(id, name, legacy, component) CHECK_EQ_U64(DP_CAT_##id, row++);
    DPR_MEMORY_CATEGORIES(INDEX)
#undef INDEX
    char joined[512] = "";
    for (int i = 0; i < n; i++) {
        CHECK(strcmp(dp_category_name((dp_category)i), names[i]) == 0);
        dp_category c = DP_CAT_COUNT;
        CHECK(dp_category_parse(names[i], &c) == 0 && (int)c == i);
        if (i) strcat(joined, ", ");
        strcat(joined, names[i]);
    }
    CHECK(strcmp(dp_category_list(), joined) == 0);
    /* the engine's names as docs/results.md lists them, in the engine's order */
    CHECK(strcmp(joined, "parameters, gradients, optimizer_states, activations, per_sample_grads, norm_samples, temp, "
                         "output_grads, inputs, workspace, other") == 0);
    CHECK(strcmp(dp_category_name(DP_CAT_COUNT), "?") == 0);
    dp_category c = DP_CAT_TEMP;
    CHECK(dp_category_parse("kv_cache", &c) == -1 && c == DP_CAT_TEMP);
    return check_report("test_memory_categories");
}
