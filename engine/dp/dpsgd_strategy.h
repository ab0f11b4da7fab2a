/* dpsgd_strategy.h: how DP-SGD training is split across the ranks of a world (ddp, zero2, fsdp),
 * by name, and the `distributed` configuration a run names it in. The collectives themselves
 * (engine/comm/) know no strategy. */
#ifndef DPSGD_STRATEGY_H
#define DPSGD_STRATEGY_H

/* How training is split across the ranks. NONE: one process (world size 1, no collectives). */
typedef enum { DPSGD_STRATEGY_NONE = 0, DPSGD_STRATEGY_DDP, DPSGD_STRATEGY_ZERO2, DPSGD_STRATEGY_FSDP } dpsgd_strategy;
#define DPSGD_N_STRATEGIES (DPSGD_STRATEGY_FSDP + 1)

/* Parses "ddp", "zero2" or "fsdp"; DP_EINVAL naming the valid strategies. */
int dpsgd_strategy_parse(const char *name, dpsgd_strategy *out);
/* The strategy's name ("none" for DPSGD_STRATEGY_NONE). */
const char *dpsgd_strategy_name(dpsgd_strategy s);
/* "ddp, zero2, fsdp": the strategies a configuration may name. */
const char *dpsgd_strategies_text(void);
/* Non-zero when the strategy is implemented for training (not only named): none, ddp, zero2, fsdp. */
int dpsgd_strategy_supported(dpsgd_strategy s);

#endif
