/* dpsgd_strategy.c: the strategies by name. */
#include "dpsgd_strategy.h"

#include "error.h"

#include <string.h>

static const char *const strategy_names[DPSGD_N_STRATEGIES] = {"none", "ddp", "zero2", "fsdp"};

int dpsgd_strategy_parse(const char *name, dpsgd_strategy *out) {
    for (int s = DPSGD_STRATEGY_DDP; s < DPSGD_N_STRATEGIES; s++)
        if (name && strcmp(name, strategy_names[s]) == 0) {
            *out = (dpsgd_strategy)s;
            return DP_OK;
        }
    return dp_error_set(DP_EINVAL, "distributed.strategy: unknown strategy '%s' (valid: %s)", name ? name : "(none)",
                        dpsgd_strategies_text());
}

const char *dpsgd_strategy_name(dpsgd_strategy s) { return (unsigned)s < DPSGD_N_STRATEGIES ? strategy_names[s] : "?"; }

const char *dpsgd_strategies_text(void) { return "ddp, zero2, fsdp"; }

int dpsgd_strategy_supported(dpsgd_strategy s) { return s >= DPSGD_STRATEGY_NONE && s < DPSGD_N_STRATEGIES; }
