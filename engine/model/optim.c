/* optim.c: SGD and AdamW steps over a model's trainable parameters, states allocated at first
 * use (see optim.h). */
#include "optim.h"

#include "dispatch.h"
#include "error.h"
#include "layer_ops.h"
#include "ledger.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per parameter: the states PyTorch keeps in optimizer.state[p]. */
typedef struct param_state {
    int64_t step;         /* steps this parameter has taken (AdamW's bias correction uses it) */
    dp_tensor exp_avg;    /* AdamW first moment, or SGD's momentum buffer */
    dp_tensor exp_avg_sq; /* AdamW second moment */
} param_state;

struct dp_optimizer {
    dp_model *model;
    dp_optim_kind kind;
    dp_optim_opts opts;
    int64_t steps;
    int n; /* the model's parameter count; states[i] belongs to parameter i */
    param_state *states;
};

/* Work per element, counted from the update formulas of layer_ops.h. AdamW: decay 2, first
 * moment 3, second moment 4, the two bias corrections 2, sqrt 1, + eps 1, divide 1, * lr 1,
 * subtract 1; reads p, g, m, v and writes p, m, v (7 f32). SGD: decay 2 (when wd != 0),
 * momentum 2 (when mu != 0), update 2; reads p, g (+ buf), writes p (+ buf). */
#define ADAMW_FLOPS_PER_ELEMENT 16.0
#define ADAMW_BYTES_PER_ELEMENT 28.0

void dp_optim_opts_default(dp_optim_opts *opts, dp_optim_kind kind) {
    memset(opts, 0, sizeof *opts);
    opts->lr = 1e-3;
    if (kind == DP_OPTIM_ADAMW) {
        opts->beta1 = 0.9;
        opts->beta2 = 0.999;
        opts->eps = 1e-8;
        opts->weight_decay = 0.01;
    }
}

const char *dp_optim_name(dp_optim_kind kind) { return kind == DP_OPTIM_ADAMW ? "adamw" : "sgd"; }

static int check_nonneg(const char *opt, const char *what, double v) {
    if (!(v >= 0.0) || isinf(v))
        return dp_error_set(DP_EINVAL, "%s: %s must be a finite number >= 0 (got %g)", opt, what, v);
    return DP_OK;
}

/* lr: finite, >= 0 and at most DP_OPTIM_MAX_LR (1e308 passed and made every weight inf). */
static int check_lr(const char *opt, double v) {
    if (!(v >= 0.0 && v <= DP_OPTIM_MAX_LR))
        return dp_error_set(DP_EINVAL, "%s: lr must be a finite number >= 0 and <= %g (got %g)", opt, DP_OPTIM_MAX_LR,
                            v);
    return DP_OK;
}

static int check_beta(const char *what, double v) {
    if (!(v >= 0.0 && v < 1.0)) return dp_error_set(DP_EINVAL, "adamw: %s must be in [0, 1) (got %g)", what, v);
    return DP_OK;
}

int dp_optim_opts_check(dp_optim_kind kind, const dp_optim_opts *o) {
    if (kind != DP_OPTIM_SGD && kind != DP_OPTIM_ADAMW)
        return dp_error_set(DP_EINVAL, "unknown optimizer kind %d (valid: sgd, adamw)", (int)kind);
    const char *name = dp_optim_name(kind);
    DP_TRY(check_lr(name, o->lr));
    DP_TRY(check_nonneg(name, "weight_decay", o->weight_decay));
    if (kind == DP_OPTIM_ADAMW) {
        DP_TRY(check_beta("betas[1]", o->beta1));
        DP_TRY(check_beta("betas[2]", o->beta2));
        DP_TRY(check_nonneg(name, "eps", o->eps));
    } else {
        DP_TRY(check_nonneg(name, "momentum", o->momentum));
    }
    return DP_OK;
}

int dp_optim_new(dp_model *m, dp_optim_kind kind, const dp_optim_opts *opts, dp_optimizer **out) {
    *out = NULL;
    if (!m) return dp_error_set(DP_EINVAL, "%s: no model", dp_optim_name(kind));
    DP_TRY(dp_optim_opts_check(kind, opts));
    dp_optimizer *o = calloc(1, sizeof *o);
    int n = dp_model_param_count(m);
    param_state *states = calloc(n > 0 ? (size_t)n : 1, sizeof *states);
    if (!o || !states) {
        free(o);
        free(states);
        return dp_error_set(DP_EOOM, "%s: out of host memory", dp_optim_name(kind));
    }
    o->model = m;
    o->kind = kind;
    o->opts = *opts;
    o->n = n;
    o->states = states;
    *out = o;
    return DP_OK;
}

void dp_optim_free(dp_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        dp_tensor_release(&o->states[i].exp_avg);
        dp_tensor_release(&o->states[i].exp_avg_sq);
    }
    free(o->states);
    free(o);
}

/* An f32 state shaped like the parameter, under `optimizer_states` with the parameter's module
 * (whatever scope the caller is in). Contents are left to the caller. */
static int state_init(dp_tensor *t, const dp_param *p) {
    const dp_tensor *like = &p->value;
    int64_t numel = p->sharded ? p->shard_n : like->numel; /* zero2: this rank's slice alone */
    memset(t, 0, sizeof *t);
    dp_alloc a;
    DP_TRY(
        dp_mem_alloc_module(like->dev->mem, (uint64_t)numel * sizeof(float), DP_CAT_OPTIMIZER_STATES, p->module, &a));
    t->dtype = DP_F32;
    t->ndim = p->sharded ? 1 : like->ndim;
    if (p->sharded)
        t->shape[0] = numel;
    else
        memcpy(t->shape, like->shape, sizeof t->shape);
    t->numel = numel;
    t->dev = like->dev;
    t->alloc = a;
    t->data = a.ptr;
    return DP_OK;
}

/* the elements the step updates: fsdp's part, or zero2's slice of value (all of it otherwise) */
static void *weights_at(const dp_param *p) {
    return p->part.numel > 0 ? dp_tensor_at(&p->part, 0) : dp_tensor_at(&p->value, p->shard_lo);
}

static int adamw_param(dp_optimizer *o, dp_param *p, param_state *s) {
    if (!s->exp_avg.alloc.live) {
        int rc = state_init(&s->exp_avg, p);
        if (rc == DP_OK) rc = state_init(&s->exp_avg_sq, p);
        if (rc == DP_OK) rc = dp_tensor_fill(&s->exp_avg, 0.0);
        if (rc == DP_OK) rc = dp_tensor_fill(&s->exp_avg_sq, 0.0);
        if (rc != DP_OK) { /* all or nothing, so a retry after an OOM starts clean */
            dp_tensor_release(&s->exp_avg);
            dp_tensor_release(&s->exp_avg_sq);
            return rc;
        }
    }
    s->step++;
    const dp_optim_opts *h = &o->opts;
    int64_t n = p->sharded ? p->shard_n : p->value.numel;
    const double pb = 2.0 * (double)dp_dtype_size(p->value.dtype) - 8.0; /* a bf16 parameter moves 4 bytes, not 8 */
    dp_ledger_add("adamw_step", ADAMW_FLOPS_PER_ELEMENT * (double)n, (ADAMW_BYTES_PER_ELEMENT + pb) * (double)n);
    dp_device *dev = p->value.dev;
    return DP_DISPATCH_LAYER(dev, adamw_step, p->value.dtype, weights_at(p), p->grad.data, s->exp_avg.data,
                             s->exp_avg_sq.data, n, (float)h->lr, (float)h->beta1, (float)h->beta2, (float)h->eps,
                             (float)h->weight_decay, s->step);
}

static int sgd_param(dp_optimizer *o, dp_param *p, param_state *s) {
    const dp_optim_opts *h = &o->opts;
    int first = 0;
    if (h->momentum != 0.0 && !s->exp_avg.alloc.live) {
        DP_TRY(state_init(&s->exp_avg, p)); /* the backend writes it whole at the first step */
        first = 1;
    }
    s->step++;
    int64_t n = p->sharded ? p->shard_n : p->value.numel;
    double flops = 2.0 + (h->weight_decay != 0.0 ? 2.0 : 0.0) + (h->momentum != 0.0 ? 2.0 : 0.0);
    double bytes = (h->momentum != 0.0 ? 20.0 : 12.0) + 2.0 * (double)dp_dtype_size(p->value.dtype) - 8.0;
    dp_ledger_add("sgd_step", flops * (double)n, bytes * (double)n);
    dp_device *dev = p->value.dev;
    return DP_DISPATCH_LAYER(dev, sgd_step, p->value.dtype, weights_at(p), p->grad.data,
                             h->momentum != 0.0 ? (float *)s->exp_avg.data : NULL, n, (float)h->lr, (float)h->momentum,
                             (float)h->weight_decay, first);
}

int dp_optim_step(dp_optimizer *o) {
    for (int i = 0; i < o->n; i++) {
        dp_param *p = dp_model_param(o->model, i);
        if (!p->trainable || p->grad.numel == 0) continue; /* frozen, or no gradient: PyTorch skips it */
        if (p->sharded && p->shard_n == 0) continue;       /* zero2: none of it is this rank's */
        if ((p->sharded ? p->grad.numel < p->shard_n : p->grad.numel != p->value.numel) || p->grad.dtype != DP_F32)
            return dp_error_set(DP_EINTERNAL, "%s: gradient of '%s' does not match its parameter",
                                dp_optim_name(o->kind), p->name);
        DP_TRY(o->kind == DP_OPTIM_ADAMW ? adamw_param(o, p, &o->states[i]) : sgd_param(o, p, &o->states[i]));
    }
    o->steps++;
    return dp_model_sync_compute_weights(o->model);
}

int dp_optim_zero_grad(dp_optimizer *o, int set_to_none) { return dp_model_zero_grad(o->model, set_to_none); }

dp_optim_kind dp_optim_kind_of(const dp_optimizer *o) { return o->kind; }

const dp_optim_opts *dp_optim_opts_of(const dp_optimizer *o) { return &o->opts; }

int dp_optim_set_lr(dp_optimizer *o, double lr) {
    DP_TRY(check_lr(dp_optim_name(o->kind), lr));
    o->opts.lr = lr;
    return DP_OK;
}

int64_t dp_optim_steps(const dp_optimizer *o) { return o->steps; }

uint64_t dp_optim_state_bytes(const dp_optimizer *o) {
    uint64_t bytes = 0;
    for (int i = 0; i < o->n; i++) {
        if (o->states[i].exp_avg.alloc.live) bytes += o->states[i].exp_avg.alloc.bytes;
        if (o->states[i].exp_avg_sq.alloc.live) bytes += o->states[i].exp_avg_sq.alloc.bytes;
    }
    return bytes;
}

dp_model *dp_optim_model(const dp_optimizer *o) { return o->model; }
