/* optim.h: SGD and AdamW over the trainable parameters of a dp_model, with PyTorch's semantics.
 *
 * AdamW is torch.optim.AdamW: decoupled weight decay (p -= lr * wd * p before the update), bias
 * corrected moments, eps added to the corrected square root. SGD is torch.optim.SGD: weight decay
 * added to the gradient (g + wd * p), a momentum buffer that starts as that gradient at the
 * parameter's first step (no dampening, no Nesterov). As in PyTorch, states are allocated lazily:
 * a parameter gets its state (AdamW: exp_avg and exp_avg_sq; SGD with momentum: one buffer; plain
 * SGD: none) at the first step where it has a gradient, under `optimizer_states` with the
 * parameter's module path; a parameter without a gradient (never reached, or freed by
 * zero_grad(set_to_none)) is skipped and keeps its own step count. Frozen parameters (LoRA base
 * weights) never get state. The arithmetic runs in the backend's adamw_step / sgd_step; each call
 * is recorded in the ledger ("adamw_step", "sgd_step"). After a step the model's bf16 compute
 * copies are refreshed. The optimizer borrows the model: free it before the model. */
#ifndef DP_OPTIM_H
#define DP_OPTIM_H

#include "model.h"

#include <stdint.h>

typedef enum { DP_OPTIM_SGD = 0, DP_OPTIM_ADAMW = 1 } dp_optim_kind;

/* The largest learning rate taken (set_lr and construction): far above any that trains (SGD
 * under DP uses up to a few), low enough that one step cannot overflow f32 weights from a finite
 * gradient of ordinary size; 1e308 made every weight inf. */
#define DP_OPTIM_MAX_LR 100.0

typedef struct dp_optim_opts {
    double lr;           /* learning rate; in [0, DP_OPTIM_MAX_LR]; default 1e-3 (PyTorch's, both) */
    double beta1, beta2; /* AdamW: in [0, 1); defaults 0.9, 0.999 */
    double eps;          /* AdamW: >= 0; default 1e-8 */
    double weight_decay; /* >= 0; AdamW default 0.01, SGD default 0 */
    double momentum;     /* SGD: >= 0; default 0 (no buffer) */
} dp_optim_opts;

typedef struct dp_optimizer dp_optimizer;

/* Fills opts with PyTorch's defaults for kind. */
void dp_optim_opts_default(dp_optim_opts *opts, dp_optim_kind kind);
/* Checks hyperparameters; DP_EINVAL naming the bad one and its valid range. */
int dp_optim_opts_check(dp_optim_kind kind, const dp_optim_opts *opts);
/* Creates an optimizer of kind over m's trainable parameters (no state allocated yet). Returns
 * DP_OK and *out, DP_EINVAL for bad hyperparameters, DP_EOOM (host memory). */
int dp_optim_new(dp_model *m, dp_optim_kind kind, const dp_optim_opts *opts, dp_optimizer **out);
/* Frees the optimizer and its states. NULL is a no-op. */
void dp_optim_free(dp_optimizer *o);

/* One step over every trainable parameter with a gradient (allocating states on first use);
 * then refreshes the model's compute copies. Returns DP_OK, DP_EOOM (no room for states) or the
 * backend's status. */
int dp_optim_step(dp_optimizer *o);
/* The model's zero_grad (frees gradients when set_to_none, PyTorch's default). */
int dp_optim_zero_grad(dp_optimizer *o, int set_to_none);

/* The optimizer's kind, its name ("sgd", "adamw") and its hyperparameters. */
dp_optim_kind dp_optim_kind_of(const dp_optimizer *o);
const char *dp_optim_name(dp_optim_kind kind);
const dp_optim_opts *dp_optim_opts_of(const dp_optimizer *o);
/* Sets the learning rate for the following steps (schedules); DP_EINVAL outside [0, DP_OPTIM_MAX_LR]. */
int dp_optim_set_lr(dp_optimizer *o, double lr);
/* Number of step() calls so far. */
int64_t dp_optim_steps(const dp_optimizer *o);
/* Bytes of optimizer state allocated now (0 before the first step). */
uint64_t dp_optim_state_bytes(const dp_optimizer *o);
/* The model the optimizer updates. */
dp_model *dp_optim_model(const dp_optimizer *o);

#endif
