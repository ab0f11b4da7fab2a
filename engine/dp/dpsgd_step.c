/* dpsgd_step.c: the DP-SGD wrapper and its phases: forward, backward with the norm hooks, clip,
 * noise (vanilla through the same phases). The conductor: it calls the hooks, clip, noise,
 * sampling and state files; none of them calls back into it. */
#include "dpsgd_impl.h"

#include "accountant.h"
#include "error.h"
#include "layer_ops.h"
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dpsgd_config_default(dpsgd_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->norms = DPSGD_NORMS_NONE;
    cfg->clip = DPSGD_CLIP_NONE;
    cfg->max_grad_norm = 1.0;
    cfg->noise_multiplier = 1.0;
    cfg->delta = 1e-5;
    cfg->gamma = DPSGD_AUTOMATIC_GAMMA;
}

static int is_vanilla(const dpsgd *dp) { return dp->cfg.norms == DPSGD_NORMS_NONE; }

static int no_groups(void) {
    return dp_error_set(DP_EINVAL,
                        "dp: clipping 'groups' needs its groups (dpsgd_set_clip_groups) before the first step");
}

static int check_config(const dpsgd_config *cfg) {
    char valid[256];
    if ((cfg->norms == DPSGD_NORMS_NONE) != (cfg->clip == DPSGD_CLIP_NONE))
        return dp_error_set(DP_EINVAL, "dp: norms and clip go together (%s), or neither for vanilla",
                            dpsgd_choices_text(valid, sizeof valid));
    if ((unsigned)cfg->norms >= DPSGD_N_NORMS || (unsigned)cfg->clip >= DPSGD_N_CLIPS)
        return dp_error_set(DP_EINVAL, "dp: unknown norms or clip method (%s)",
                            dpsgd_choices_text(valid, sizeof valid));
    if ((unsigned)cfg->flash_impl >= DPSGD_N_FLASH_IMPLS)
        return dp_error_set(DP_EINVAL, "dp: unknown flash_impl (valid: %s)",
                            dpsgd_list_join(DPSGD_LIST_FLASH_IMPLS, valid, sizeof valid));
    if ((unsigned)cfg->clipping >= DPSGD_N_STYLES)
        return dp_error_set(DP_EINVAL, "dp: unknown clipping style (valid: %s)",
                            dpsgd_list_join(DPSGD_LIST_STYLES, valid, sizeof valid));
    if ((unsigned)cfg->clip_fn >= DPSGD_N_CLIP_FNS)
        return dp_error_set(DP_EINVAL, "dp: unknown clip_fn (valid: %s)",
                            dpsgd_list_join(DPSGD_LIST_CLIP_FNS, valid, sizeof valid));
    if (cfg->clip_fn == DPSGD_CLIP_FN_AUTOMATIC && (!(cfg->gamma > 0.0) || !isfinite(cfg->gamma)))
        return dp_error_set(DP_EINVAL, "dp: gamma %g must be positive (automatic clipping's C / (||g|| + gamma))",
                            cfg->gamma);
    DP_TRY(dpsgd_adaptive_check(cfg));
    if (!(cfg->max_grad_norm > 0.0) || !isfinite(cfg->max_grad_norm))
        return dp_error_set(DP_EINVAL, "dp: max_grad_norm %g must be positive", cfg->max_grad_norm);
    if (!(cfg->noise_multiplier >= 0.0) || !isfinite(cfg->noise_multiplier))
        return dp_error_set(DP_EINVAL, "dp: noise_multiplier %g must be >= 0", cfg->noise_multiplier);
    if (!(cfg->delta > 0.0 && cfg->delta < 1.0))
        return dp_error_set(DP_EINVAL, "dp: delta %g is outside (0, 1)", cfg->delta);
    return DP_OK;
}

int dpsgd_config_check(const dpsgd_config *cfg, int64_t model_batch) {
    DP_TRY(check_config(cfg));
    if (model_batch < 1) return dp_error_set(DP_EINVAL, "dp: the model's batch must be at least 1");
    dpsgd_config filled = *cfg;
    return dpsgd_sampling_setup(&filled, model_batch);
}

int dpsgd_new_params(dp_device *dev, const dpsgd_config *cfg, dp_param **params, int n_params, int64_t model_batch,
                     dpsgd **out) {
    *out = NULL;
    DP_TRY(check_config(cfg));
    if (model_batch < 1) return dp_error_set(DP_EINVAL, "dp: the model's batch must be at least 1");
    dpsgd *dp = calloc(1, sizeof *dp);
    if (!dp) return dp_error_set(DP_EOOM, "dp: out of host memory");
    dp->dev = dev;
    dp->cfg = *cfg;
    dp->strat = dpsgd_strategy_table(DPSGD_STRATEGY_NONE);
    dp->model_batch = model_batch;
    int rc = dpsgd_sampling_setup(&dp->cfg, model_batch);
    size_t np = (size_t)(n_params ? n_params : 1);
    dp->params = calloc(np, sizeof *dp->params);
    dp->offsets = calloc(np, sizeof *dp->offsets);
    dp->sq_rows = calloc(np, sizeof *dp->sq_rows);
    dp->sq_written = calloc(np, sizeof *dp->sq_written);
    if (rc == DP_OK && (!dp->params || !dp->offsets || !dp->sq_rows || !dp->sq_written))
        rc = dp_error_set(DP_EOOM, "dp: out of host memory");
    if (rc != DP_OK) {
        dpsgd_free(dp);
        return rc;
    }
    int64_t offset = 0;
    for (int i = 0; i < n_params; i++) {
        if (!params[i]->trainable) continue;
        dp->params[dp->n_params] = params[i];
        dp->offsets[dp->n_params++] = offset;
        offset += params[i]->value.numel;
    }
    rc = dpsgd_groups_default(dp);
    if (rc != DP_OK) {
        dpsgd_free(dp);
        return rc;
    }
    *out = dp;
    return DP_OK;
}

int dpsgd_new(dp_model *m, const dpsgd_config *cfg, dpsgd **out) {
    *out = NULL;
    int n = dp_model_param_count(m);
    dp_param **params = malloc((size_t)(n ? n : 1) * sizeof *params);
    if (!params) return dp_error_set(DP_EOOM, "dp: out of host memory");
    for (int i = 0; i < n; i++) params[i] = dp_model_param(m, i);
    int rc = dpsgd_new_params(dp_model_device(m), cfg, params, n, dp_model_config_of(m)->batch, out);
    free(params);
    if (rc == DP_OK) (*out)->model = m;
    return rc;
}

void dpsgd_free(dpsgd *dp) {
    if (!dp) return;
    if (dp->strat && dp->strat->clear) dp->strat->clear(dp);
    if (dp->sq_rows) dpsgd_release_batch_state(dp);
    dp_tensor_release(&dp->pad_in);
    dp_tensor_release(&dp->pad_tg);
    free(dp->books);
    free(dp->params);
    free(dp->offsets);
    free(dp->sq_rows);
    free(dp->sq_written);
    free(dp->host_sq);
    free(dp->layers);
    free(dp->norms);
    free(dp->factors);
    free(dp->group_norms);
    free(dp->ada_history);
    dpsgd_groups_free(dp);
    free(dp);
}

const dpsgd_config *dpsgd_config_of(const dpsgd *dp) { return &dp->cfg; }

/* ---- the phases ----------------------------------------------------------------------------- */

static void start_step_stats(dpsgd *dp) {
    dp->n_samples = 0;
    dp->step_open = 1;
}

int dpsgd_next_step(dpsgd *dp, dpsgd_step_plan *out) {
    DP_TRY(dpsgd_sampling_plan(&dp->cfg, dp->plans, out));
    if (dp->comm)
        DP_TRY(dpsgd_sampling_slice(out, dp->comm->rank, dp->comm->world_size, dp->cfg.max_physical_batch_size));
    if (dp->comm && dp->strat->plan) dp->strat->plan(dp, out); /* fsdp: padding batches */
    dp->plans++;
    dp->logical_size = out->logical_size;
    dp->reduced = 0;
    start_step_stats(dp);
    return DP_OK;
}

int64_t dpsgd_step_members(const dpsgd *dp, int64_t *out, int64_t cap) {
    return dp->plans > 0 ? dpsgd_sampling_members(&dp->cfg, dp->plans - 1, out, cap) : 0;
}

int dpsgd_set_distributed(dpsgd *dp, dp_comm *comm, dpsgd_strategy strategy) {
    if (!dpsgd_strategy_supported(strategy))
        return dp_error_set(DP_ENOTSUP,
                            "distributed.strategy: '%s' is not implemented yet (supported: ddp, zero2, fsdp)",
                            dpsgd_strategy_name(strategy));
    if (!comm || comm->world_size < 1) return dp_error_set(DP_EINVAL, "distributed: no communicator");
    if (strategy != DPSGD_STRATEGY_FSDP && dp->model && dp_model_held_in_parts(dp->model))
        return dp_error_set(DP_EINVAL,
                            "distributed.strategy: the model is held in parts (parts = {world_size = %lld, rank = "
                            "%lld}: built so, or cut by fsdp), which only fsdp trains (valid: fsdp, or build it whole "
                            "for %s)",
                            (long long)dp_model_config_of(dp->model)->parts_world,
                            (long long)dp_model_config_of(dp->model)->parts_rank, dpsgd_strategy_name(strategy));
    if (strategy == DPSGD_STRATEGY_NONE && comm->world_size > 1)
        return dp_error_set(DP_EINVAL, "distributed.strategy: 'none' trains one process, not a world of %d (valid: %s)",
                            comm->world_size, dpsgd_strategies_text());
    if (dp->strat->clear) dp->strat->clear(dp);
    dp->comm = comm;
    dp->strat = dpsgd_strategy_table(strategy);
    int rc = dp->strat->setup ? dp->strat->setup(dp) : DP_OK;
    if (rc != DP_OK) { /* one process again */
        if (dp->strat->clear) dp->strat->clear(dp);
        dp->strat = dpsgd_strategy_table(DPSGD_STRATEGY_NONE);
        dp->comm = NULL;
    }
    return rc;
}

int dpsgd_gather_params(dpsgd *dp) { return dp->comm && dp->strat->after_step ? dp->strat->after_step(dp) : DP_OK; }

int dpsgd_unshard(dpsgd *dp) { return dp->strat->unshard ? dp->strat->unshard(dp) : DP_OK; }

int dpsgd_reduce_grads(dpsgd *dp) {
    if (dp->reduced || !dp->comm || !dp->strat->reduce) return DP_OK;
    /* vanilla's empty logical batch (Poisson; every rank knows it drew none): no gradient on any
     * rank, so none is made, and the optimizer skips every tensor as one process's does */
    if (is_vanilla(dp) && dp->plans > 0 && dp->logical_size == 0) return DP_OK;
    for (int k = 0; k < dp->n_params; k++) DP_TRY(dp->strat->reduce(dp, k));
    dp->reduced = 1;
    return DP_OK;
}

int dpsgd_forward(dpsgd *dp, const dp_tensor *inputs, const dp_tensor *targets, float *loss, float *sample_losses) {
    if (!dp->model) return dp_error_set(DP_EINVAL, "dp: forward needs a model");
    if (dp->n_groups < 1 && !is_vanilla(dp)) return no_groups();
    if (dp->phase == 2 && !is_vanilla(dp))
        return dp_error_set(DP_EINVAL, "dp: forward before the last backward was clipped (call clip first)");
    dpsgd_release_batch_state(dp);
    dp->padding = 0;
    if (inputs != &dp->pad_in) { /* a padding batch left unclipped goes */
        dp_tensor_release(&dp->pad_in);
        dp_tensor_release(&dp->pad_tg);
    }
    if (inputs->ndim != 2)
        return dp_error_set(DP_EINVAL, "dp: inputs must be B x T token ids (got rank %d)", inputs->ndim);
    if (inputs->shape[0] > dp->cfg.max_physical_batch_size)
        return dp_error_set(DP_EINVAL, "dp: a physical batch of %lld exceeds max_physical_batch_size %lld",
                            (long long)inputs->shape[0], (long long)dp->cfg.max_physical_batch_size);
    dp->phase = 0;
    DP_TRY(dp_model_forward(dp->model, inputs, targets, loss, sample_losses));
    dp->forward_id = dp_model_forward_id(dp->model);
    dp->inputs = inputs;
    dp->batch = inputs->shape[0];
    dp->seq_len = inputs->shape[1];
    dp->phase = 1;
    return DP_OK;
}

int dpsgd_forward_padding(dpsgd *dp, float *loss) {
    if (!dp->model) return dp_error_set(DP_EINVAL, "dp: forward needs a model");
    if (dp->phase == 2 && !is_vanilla(dp)) /* the model may still read the last padding batch's ids */
        return dp_error_set(DP_EINVAL, "dp: forward before the last backward was clipped (call clip first)");
    dp_tensor_release(&dp->pad_in);
    dp_tensor_release(&dp->pad_tg);
    int64_t shape[2] = {1, 1};
    int32_t token = 0, ignored = DP_IGNORE_INDEX;
    int rc = dp_tensor_init(&dp->pad_in, dp->dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    if (rc == DP_OK) rc = dp_tensor_init(&dp->pad_tg, dp->dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    if (rc == DP_OK) rc = dp_tensor_from_host(&dp->pad_in, &token, sizeof token);
    if (rc == DP_OK) rc = dp_tensor_from_host(&dp->pad_tg, &ignored, sizeof ignored);
    if (rc == DP_OK) rc = dpsgd_forward(dp, &dp->pad_in, &dp->pad_tg, loss, NULL);
    if (rc != DP_OK) {
        dp_tensor_release(&dp->pad_in);
        dp_tensor_release(&dp->pad_tg);
        return rc;
    }
    dp->padding = 1;
    return DP_OK;
}

/* Whether bk's books may read the retained activations (a linear's input A). */
static int needs_retained_inputs(const dpsgd *dp) {
    if (dp->early) return 0; /* books formed at their block's end; those outside the blocks own theirs */
    if (dp->cfg.clip == DPSGD_CLIP_TWOPASS) return 1; /* the second backward needs everything */
    if (dp->cfg.clip != DPSGD_CLIP_BK) return 0;
    if (dp->cfg.norms == DPSGD_NORMS_MATERIALIZE) return 0;             /* books: per-sample gradients */
    if (dp->cfg.norms == DPSGD_NORMS_FLASH && dp->batch == 1) return 0; /* batch1: the same */
    return 1;
}

int dpsgd_begin_norms(dpsgd *dp) {
    dpsgd_release_batch_state(dp);
    dp->n_layers = 0;
    if (!dp->step_open) start_step_stats(dp);
    return DP_OK;
}

int dpsgd_end_norms(dpsgd *dp) {
    if (dp->tied.wte)
        return dp_error_set(DP_EINTERNAL, "dp: the tied head '%s' was seen but not its embedding", dp->tied.wte->name);
    for (int k = 0; k < dp->n_books; k++)
        if (dp->books[k].adopting)
            return dp_error_set(DP_EINTERNAL, "dp: the backward kept '%s''s output gradient but never handed it over",
                                dp->books[k].param->name);
    return DP_OK;
}

/* DP_OK when the model still holds this wrapper's forward. Another forward on the model since
 * (a script's m:forward between priv:forward and priv:backward) or a release replaced it: going
 * back through that state would mix two batches (another B, ids that may be freed), so the phase
 * ends here, leaving the model's state (someone else's) alone. */
static int check_own_forward(dpsgd *dp, const char *what) {
    if (dp_model_forward_id(dp->model) == dp->forward_id) return DP_OK;
    dpsgd_release_batch_state(dp);
    dp->phase = 0;
    dp->inputs = NULL;
    return dp_error_set(DP_EINVAL,
                        "dp: %s: the model no longer holds this wrapper's forward (another forward ran on it, or its "
                        "activations were released, after the wrapper's forward); run the wrapper's forward again",
                        what);
}

int dpsgd_backward(dpsgd *dp) {
    if (dp->phase != 1) return dp_error_set(DP_EINVAL, "dp: backward needs a forward first");
    DP_TRY(check_own_forward(dp, "backward"));
    int64_t B = dp->batch;
    float *scale = malloc((size_t)(B ? B : 1) * sizeof *scale);
    if (!scale) return dp_error_set(DP_EOOM, "dp: out of host memory");
    int rc;
    if (is_vanilla(dp)) { /* the mean over the logical batch, accumulated over its physical batches */
        int64_t n = dp->logical_size > 0 ? dp->logical_size : B;
        for (int64_t i = 0; i < B; i++) scale[i] = (float)(1.0 / (double)n);
        dp_backward_opts o = {.sample_scale = scale, .weight_grads = 1, .retain = 0, .hooks = NULL};
        rc = dp->strat->backward(dp, &o);
    } else { /* s_i = 1: each sample's share of G is its own gradient's */
        for (int64_t i = 0; i < B; i++) scale[i] = 1.0f;
        dp->early = dp->early_possible; /* block-local groups formed at their block's end */
        dp_layer_hooks hooks = dpsgd_norm_hooks(dp);
        dp_backward_opts o = {
            .sample_scale = scale, .weight_grads = 0, .retain = needs_retained_inputs(dp), .hooks = &hooks};
        rc = dpsgd_begin_norms(dp);
        if (rc == DP_OK) rc = dp_model_backward(dp->model, &o);
        if (rc == DP_OK) rc = dpsgd_end_norms(dp);
        if (rc != DP_OK) {
            dpsgd_release_batch_state(dp);
            if (o.retain) dp_model_release_activations(dp->model);
        }
    }
    free(scale);
    dp->phase = rc == DP_OK ? 2 : 0;
    return rc;
}

/* After a padding batch's clip: its inputs go (the model's views of them are not read again
 * before the next forward replaces them). */
static void release_padding(dpsgd *dp) {
    if (!dp->padding) return;
    dp_tensor_release(&dp->pad_in);
    dp_tensor_release(&dp->pad_tg);
}

/* twopass, one clipping group: the model's backward again, sample i's loss scaled by c_i */
static int second_backward(dpsgd *dp, const float *factors) {
    dp_backward_opts o = {.sample_scale = factors, .weight_grads = 1, .retain = 0, .hooks = NULL};
    return dp->strat->backward(dp, &o);
}

/* twopass, several groups: the backward again with unscaled losses, each layer's clipped gradient
 * formed by its hook with its group's factors (dpsgd_form.c) */
static int forming_backward(dpsgd *dp, const float *factors) {
    int64_t n = dp->batch * (int64_t)dp->n_groups, B = dp->batch;
    float *ones = malloc((size_t)(B ? B : 1) * sizeof *ones);
    if (!ones) return dp_error_set(DP_EOOM, "dp: out of host memory");
    for (int64_t i = 0; i < B; i++) ones[i] = 1.0f;
    int rc = dp_tensor_init_module(&dp->clip_dev, dp->dev, DP_F32, 1, &n, DP_CAT_NORM_SAMPLES, DP_MODULE_NONE);
    if (rc == DP_OK) rc = dp_tensor_from_host(&dp->clip_dev, factors, (uint64_t)n * sizeof *factors);
    if (rc == DP_OK) {
        dp->form_factors = factors;
        dp_layer_hooks hooks = dpsgd_form_hooks(dp);
        dp_backward_opts o = {.sample_scale = ones, .weight_grads = 0, .retain = 0, .hooks = &hooks};
        rc = dp->strat->backward(dp, &o);
        dp->form_factors = NULL;
    }
    dp_tensor_release(&dp->clip_dev);
    free(ones);
    return rc;
}

int dpsgd_clip(dpsgd *dp) {
    if (dp->phase != 2) return dp_error_set(DP_EINVAL, "dp: clip needs a backward first");
    dp->phase = 0;
    if (is_vanilla(dp)) {
        release_padding(dp);
        return DP_OK;
    }
    int retained = needs_retained_inputs(dp); /* the clip goes back through the model's state */
    if (retained) DP_TRY(check_own_forward(dp, "clip"));
    int64_t B = dp->batch;
    if (dp->n_groups < 1) return no_groups();
    float *factors = malloc((size_t)(B ? B : 1) * (size_t)dp->n_groups * sizeof *factors);
    if (!factors) return dp_error_set(DP_EOOM, "dp: out of host memory");
    int rc = dpsgd_compute_clip_factors(dp, factors);
    if (rc == DP_OK && dp->cfg.clip == DPSGD_CLIP_TWOPASS && !dp->early) { /* early: books, as bk's */
        dpsgd_release_batch_state(dp); /* nothing of the norm pass is needed by the second */
        rc = dp->n_groups == 1 ? second_backward(dp, factors) : forming_backward(dp, factors);
        retained = rc != DP_OK;
    } else if (rc == DP_OK) {
        rc = dpsgd_clip_books(dp, factors);
    }
    dpsgd_release_batch_state(dp);
    if (retained && dp->model) dp_model_release_activations(dp->model);
    free(factors);
    release_padding(dp);
    return rc;
}

int dpsgd_noise(dpsgd *dp) {
    if (dp->phase == 2 && !is_vanilla(dp))
        return dp_error_set(DP_EINVAL, "dp: noise before the last backward was clipped (call clip first)");
    DP_TRY(dpsgd_reduce_grads(dp));
    if (!is_vanilla(dp)) DP_TRY(dpsgd_add_noise(dp));
    DP_TRY(dpsgd_adaptive_step(dp)); /* the next step's bound */
    dp->reduced = 0;
    dp->steps++;
    dp->step_open = 0;
    return DP_OK;
}

/* ---- figures ------------------------------------------------------------------------------- */

int64_t dpsgd_steps(const dpsgd *dp) { return dp->steps; }

double dpsgd_sample_rate(const dpsgd *dp) { return dp->cfg.sample_rate; }

int64_t dpsgd_expected_batch_size(const dpsgd *dp) { return dp->cfg.expected_batch_size; }

int dpsgd_epsilon(const dpsgd *dp, double delta, dp_acct_kind accountant, double *epsilon) {
    if (delta <= 0.0) delta = dp->cfg.delta;
    if (is_vanilla(dp)) {
        *epsilon = INFINITY;
        return DP_OK;
    }
    if (!(dp->cfg.sample_rate > 0.0))
        return dp_error_set(DP_EINVAL, "dp: epsilon needs the sample rate: give sample_rate or dataset_size");
    if (dp->steps == 0) { /* nothing released yet */
        *epsilon = 0.0;
        return DP_OK;
    }
    char err[256];
    dp_acct_segment history = {dp->cfg.noise_multiplier, dp->cfg.sample_rate, dp->steps};
    if (dp_acct_epsilon(accountant, &history, 1, delta, NULL, epsilon, NULL, err, sizeof err) != DP_ACCT_OK)
        return dp_error_set(DP_EINVAL, "dp: epsilon: %s", err);
    return DP_OK;
}

const float *dpsgd_norms(const dpsgd *dp, size_t *n) {
    *n = dp->n_samples;
    return dp->norms;
}

const float *dpsgd_clip_factors(const dpsgd *dp, size_t *n) {
    *n = dp->n_samples;
    return dp->factors;
}

const float *dpsgd_group_norms(const dpsgd *dp, size_t *n_samples, size_t *n_groups) {
    *n_samples = dp->n_samples;
    *n_groups = (size_t)dp->n_groups;
    return dp->group_norms;
}

int dpsgd_param_sq_norms(const dpsgd *dp, const dp_param *p, float *out, int64_t n) {
    int k = dpsgd_param_index(dp, p);
    if (k < 0) return dp_error_set(DP_EINVAL, "dp: '%s' is not a trainable parameter of this model", p->name);
    if (!dp->host_batch) return dp_error_set(DP_EINVAL, "dp: no per-sample norms yet (run backward and clip)");
    if (n != dp->host_batch)
        return dp_error_set(DP_EINVAL, "dp: the last batch had %lld samples, not %lld", (long long)dp->host_batch,
                            (long long)n);
    if (dp->dev->kind == DP_DEV_PLAN) /* no values: zeros, as a plan tensor reads */
        memset(out, 0, (size_t)n * sizeof *out);
    else
        memcpy(out, dp->host_sq + (int64_t)k * n, (size_t)n * sizeof *out);
    return DP_OK;
}

size_t dpsgd_layer_count(const dpsgd *dp) { return dp->n_layers; }

const dpsgd_layer_info *dpsgd_layer(const dpsgd *dp, size_t i) { return i < dp->n_layers ? &dp->layers[i] : NULL; }
