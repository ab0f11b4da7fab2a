/* dp_step.c: the DP-SGD wrapper and its phases: forward, backward with the norm hooks, clip,
 * noise (vanilla through the same phases), plus the small shared helpers of dp_*.c. */
#include "dp_impl.h"

#include "error.h"
#include "ops.h"
#include "privacy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_dpsgd_config_default(dp_dpsgd_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->norms = DP_NORMS_NONE;
    cfg->clip = DP_CLIP_NONE;
    cfg->max_grad_norm = 1.0;
    cfg->noise_multiplier = 1.0;
    cfg->delta = 1e-5;
}

static int is_vanilla(const dp_dpsgd *dp) { return dp->cfg.norms == DP_NORMS_NONE; }

static int check_config(const dp_dpsgd_config *cfg) {
    if ((cfg->norms == DP_NORMS_NONE) != (cfg->clip == DP_CLIP_NONE))
        return dp_error_set(DP_EINVAL, "dp: norms and clip go together (norms: materialize, ghost, mixed, flash; "
                                       "clip: twopass, bk), or neither for vanilla");
    if ((unsigned)cfg->norms > DP_NORMS_FLASH || (unsigned)cfg->clip > DP_CLIP_BK)
        return dp_error_set(DP_EINVAL, "dp: unknown norms or clip method");
    if ((unsigned)cfg->flash_impl > DP_FLASH_STRIPS)
        return dp_error_set(DP_EINVAL, "dp: unknown flash_impl (valid: tiles, strips)");
    if (!(cfg->max_grad_norm > 0.0) || !isfinite(cfg->max_grad_norm))
        return dp_error_set(DP_EINVAL, "dp: max_grad_norm %g must be positive", cfg->max_grad_norm);
    if (!(cfg->noise_multiplier >= 0.0) || !isfinite(cfg->noise_multiplier))
        return dp_error_set(DP_EINVAL, "dp: noise_multiplier %g must be >= 0", cfg->noise_multiplier);
    if (!(cfg->delta > 0.0 && cfg->delta < 1.0))
        return dp_error_set(DP_EINVAL, "dp: delta %g is outside (0, 1)", cfg->delta);
    return DP_OK;
}

int dp_dpsgd_new_params(dp_device *dev, const dp_dpsgd_config *cfg, dp_param **params, int n_params,
                        int64_t model_batch, dp_dpsgd **out) {
    *out = NULL;
    DP_TRY(check_config(cfg));
    if (model_batch < 1) return dp_error_set(DP_EINVAL, "dp: the model's batch must be at least 1");
    dp_dpsgd *dp = calloc(1, sizeof *dp);
    if (!dp) return dp_error_set(DP_EOOM, "dp: out of host memory");
    dp->dev = dev;
    dp->cfg = *cfg;
    dp->model_batch = model_batch;
    int rc = dp_sampling_setup(&dp->cfg, model_batch);
    size_t np = (size_t)(n_params ? n_params : 1);
    dp->params = calloc(np, sizeof *dp->params);
    dp->offsets = calloc(np, sizeof *dp->offsets);
    dp->sq_rows = calloc(np, sizeof *dp->sq_rows);
    dp->sq_written = calloc(np, sizeof *dp->sq_written);
    if (rc == DP_OK && (!dp->params || !dp->offsets || !dp->sq_rows || !dp->sq_written))
        rc = dp_error_set(DP_EOOM, "dp: out of host memory");
    if (rc != DP_OK) {
        dp_dpsgd_free(dp);
        return rc;
    }
    int64_t offset = 0;
    for (int i = 0; i < n_params; i++) {
        if (!params[i]->trainable) continue;
        dp->params[dp->n_params] = params[i];
        dp->offsets[dp->n_params++] = offset;
        offset += params[i]->value.numel;
    }
    *out = dp;
    return DP_OK;
}

int dp_dpsgd_new(dp_model *m, const dp_dpsgd_config *cfg, dp_dpsgd **out) {
    *out = NULL;
    int n = dp_model_param_count(m);
    dp_param **params = malloc((size_t)(n ? n : 1) * sizeof *params);
    if (!params) return dp_error_set(DP_EOOM, "dp: out of host memory");
    for (int i = 0; i < n; i++) params[i] = dp_model_param(m, i);
    int rc = dp_dpsgd_new_params(dp_model_device(m), cfg, params, n, dp_model_config_of(m)->batch, out);
    free(params);
    if (rc == DP_OK) (*out)->model = m;
    return rc;
}

void dp_dpsgd_free(dp_dpsgd *dp) {
    if (!dp) return;
    if (dp->sq_rows) dp_release_batch_state(dp);
    free(dp->books);
    free(dp->params);
    free(dp->offsets);
    free(dp->sq_rows);
    free(dp->sq_written);
    free(dp->host_sq);
    free(dp->layers);
    free(dp->norms);
    free(dp->factors);
    free(dp);
}

const dp_dpsgd_config *dp_dpsgd_config_of(const dp_dpsgd *dp) { return &dp->cfg; }

/* ---- the phases ----------------------------------------------------------------------------- */

static void start_step_stats(dp_dpsgd *dp) {
    dp->n_samples = 0;
    dp->step_open = 1;
}

int dp_dpsgd_next_step(dp_dpsgd *dp, dp_step_plan *out) {
    DP_TRY(dp_sampling_plan(&dp->cfg, dp->plans, out));
    dp->plans++;
    dp->logical_size = out->logical_size;
    start_step_stats(dp);
    return DP_OK;
}

int dp_dpsgd_forward(dp_dpsgd *dp, const dp_tensor *inputs, const dp_tensor *targets, float *loss,
                     float *sample_losses) {
    if (!dp->model) return dp_error_set(DP_EINVAL, "dp: forward needs a model");
    if (dp->phase == 2 && !is_vanilla(dp))
        return dp_error_set(DP_EINVAL, "dp: forward before the last backward was clipped (call clip first)");
    dp_release_batch_state(dp);
    if (inputs->ndim != 2)
        return dp_error_set(DP_EINVAL, "dp: inputs must be B x T token ids (got rank %d)", inputs->ndim);
    if (inputs->shape[0] > dp->cfg.max_physical_batch_size)
        return dp_error_set(DP_EINVAL, "dp: a physical batch of %lld exceeds max_physical_batch_size %lld",
                            (long long)inputs->shape[0], (long long)dp->cfg.max_physical_batch_size);
    dp->phase = 0;
    DP_TRY(dp_model_forward(dp->model, inputs, targets, loss, sample_losses));
    dp->inputs = inputs;
    dp->batch = inputs->shape[0];
    dp->seq_len = inputs->shape[1];
    dp->phase = 1;
    return DP_OK;
}

/* Whether bk's books may read the retained activations (a linear's input A). */
static int needs_retained_inputs(const dp_dpsgd *dp) {
    if (dp->cfg.clip == DP_CLIP_TWOPASS) return 1; /* the second backward needs everything */
    if (dp->cfg.clip != DP_CLIP_BK) return 0;
    if (dp->cfg.norms == DP_NORMS_MATERIALIZE) return 0;           /* books: per-sample gradients */
    if (dp->cfg.norms == DP_NORMS_FLASH && dp->batch == 1) return 0; /* batch1: the same */
    return 1;
}

int dp_dpsgd_begin_norms(dp_dpsgd *dp) {
    dp_release_batch_state(dp);
    dp->n_layers = 0;
    if (!dp->step_open) start_step_stats(dp);
    return DP_OK;
}

int dp_dpsgd_end_norms(dp_dpsgd *dp) {
    if (dp->tied.wte)
        return dp_error_set(DP_EINTERNAL, "dp: the tied head '%s' was seen but not its embedding",
                            dp->tied.wte->name);
    for (int k = 0; k < dp->n_books; k++)
        if (dp->books[k].adopting)
            return dp_error_set(DP_EINTERNAL, "dp: the backward kept '%s''s output gradient but never handed it over",
                                dp->books[k].param->name);
    return DP_OK;
}

int dp_dpsgd_backward(dp_dpsgd *dp) {
    if (dp->phase != 1) return dp_error_set(DP_EINVAL, "dp: backward needs a forward first");
    int64_t B = dp->batch;
    float *scale = malloc((size_t)(B ? B : 1) * sizeof *scale);
    if (!scale) return dp_error_set(DP_EOOM, "dp: out of host memory");
    int rc;
    if (is_vanilla(dp)) { /* the mean over the logical batch, accumulated over its physical batches */
        int64_t n = dp->logical_size > 0 ? dp->logical_size : B;
        for (int64_t i = 0; i < B; i++) scale[i] = (float)(1.0 / (double)n);
        dp_backward_opts o = {.sample_scale = scale, .weight_grads = 1, .retain = 0, .hooks = NULL};
        rc = dp_model_backward(dp->model, &o);
    } else { /* s_i = 1: each sample's share of G is its own gradient's */
        for (int64_t i = 0; i < B; i++) scale[i] = 1.0f;
        dp_layer_hooks hooks = dp_norm_hooks(dp);
        dp_backward_opts o = {.sample_scale = scale, .weight_grads = 0, .retain = needs_retained_inputs(dp),
                              .hooks = &hooks};
        rc = dp_dpsgd_begin_norms(dp);
        if (rc == DP_OK) rc = dp_model_backward(dp->model, &o);
        if (rc == DP_OK) rc = dp_dpsgd_end_norms(dp);
        if (rc != DP_OK) {
            dp_release_batch_state(dp);
            if (o.retain) dp_model_release_activations(dp->model);
        }
    }
    free(scale);
    dp->phase = rc == DP_OK ? 2 : 0;
    return rc;
}

int dp_dpsgd_clip(dp_dpsgd *dp) {
    if (dp->phase != 2) return dp_error_set(DP_EINVAL, "dp: clip needs a backward first");
    dp->phase = 0;
    if (is_vanilla(dp)) return DP_OK;
    int64_t B = dp->batch;
    float *factors = malloc((size_t)(B ? B : 1) * sizeof *factors);
    if (!factors) return dp_error_set(DP_EOOM, "dp: out of host memory");
    int rc = dp_clip_factors(dp, factors);
    int retained = needs_retained_inputs(dp);
    if (rc == DP_OK && dp->cfg.clip == DP_CLIP_TWOPASS) {
        dp_release_batch_state(dp); /* nothing of the norm pass is needed by the second */
        dp_backward_opts o = {.sample_scale = factors, .weight_grads = 1, .retain = 0, .hooks = NULL};
        rc = dp_model_backward(dp->model, &o);
        retained = rc != DP_OK;
    } else if (rc == DP_OK) {
        rc = dp_clip_books(dp, factors);
    }
    dp_release_batch_state(dp);
    if (retained && dp->model) dp_model_release_activations(dp->model);
    free(factors);
    return rc;
}

int dp_dpsgd_noise(dp_dpsgd *dp) {
    if (dp->phase == 2 && !is_vanilla(dp))
        return dp_error_set(DP_EINVAL, "dp: noise before the last backward was clipped (call clip first)");
    if (!is_vanilla(dp)) DP_TRY(dp_add_noise(dp));
    dp->steps++;
    dp->step_open = 0;
    return DP_OK;
}

/* ---- figures ------------------------------------------------------------------------------- */

int64_t dp_dpsgd_steps(const dp_dpsgd *dp) { return dp->steps; }

double dp_dpsgd_sample_rate(const dp_dpsgd *dp) { return dp->cfg.sample_rate; }

int64_t dp_dpsgd_expected_batch_size(const dp_dpsgd *dp) { return dp->cfg.expected_batch_size; }

int dp_dpsgd_epsilon(const dp_dpsgd *dp, double delta, dp_acct_kind accountant, double *epsilon) {
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
    if (dp_acct_epsilon(accountant, &history, 1, delta, NULL, epsilon, NULL, err, sizeof err) != DP_PRIVACY_OK)
        return dp_error_set(DP_EINVAL, "dp: epsilon: %s", err);
    return DP_OK;
}

const float *dp_dpsgd_norms(const dp_dpsgd *dp, size_t *n) {
    *n = dp->n_samples;
    return dp->norms;
}

const float *dp_dpsgd_clip_factors(const dp_dpsgd *dp, size_t *n) {
    *n = dp->n_samples;
    return dp->factors;
}

int dp_dpsgd_param_sq_norms(const dp_dpsgd *dp, const dp_param *p, float *out, int64_t n) {
    int k = dp_param_index(dp, p);
    if (k < 0) return dp_error_set(DP_EINVAL, "dp: '%s' is not a trainable parameter of this model", p->name);
    if (!dp->host_batch) return dp_error_set(DP_EINVAL, "dp: no per-sample norms yet (run backward and clip)");
    if (n != dp->host_batch)
        return dp_error_set(DP_EINVAL, "dp: the last batch had %lld samples, not %lld", (long long)dp->host_batch,
                            (long long)n);
    memcpy(out, dp->host_sq + (int64_t)k * n, (size_t)n * sizeof *out);
    return DP_OK;
}

size_t dp_dpsgd_layer_count(const dp_dpsgd *dp) { return dp->n_layers; }

const dp_dp_layer *dp_dpsgd_layer(const dp_dpsgd *dp, size_t i) { return i < dp->n_layers ? &dp->layers[i] : NULL; }

/* ---- helpers shared by dp_*.c -------------------------------------------------------------- */

int dp_param_index(const dp_dpsgd *dp, const dp_param *p) {
    for (int k = 0; k < dp->n_params; k++)
        if (dp->params[k] == p) return k;
    return -1;
}

int dp_alloc_tensor(dp_dpsgd *dp, dp_tensor *t, dp_dtype dt, int ndim, const int64_t *shape, dp_category cat,
                    uint32_t module) {
    memset(t, 0, sizeof *t);
    int64_t numel;
    DP_TRY(dp_shape_check(ndim, shape, dt, &numel));
    dp_alloc a;
    DP_TRY(dp_mem_alloc_module(dp->dev->mem, (uint64_t)numel * dp_dtype_size(dt), cat, module, &a));
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->dev = dp->dev;
    t->alloc = a;
    t->data = a.ptr;
    return DP_OK;
}

int dp_norm_row(dp_dpsgd *dp, const dp_param *p, dp_tensor **row, int *accumulate) {
    int k = dp_param_index(dp, p);
    if (k < 0) return dp_error_set(DP_EINTERNAL, "dp: hook for '%s', which is not trainable here", p->name);
    if (!dp->sq_norms.alloc.live) { /* the first hook of this backward: every parameter's row */
        int64_t shape[2] = {dp->n_params, dp->batch};
        DP_TRY(dp_alloc_tensor(dp, &dp->sq_norms, DP_F32, 2, shape, DP_CAT_NORM_SAMPLES, DP_MODULE_NONE));
        for (int j = 0; j < dp->n_params; j++)
            DP_TRY(dp_tensor_view(&dp->sq_rows[j], &dp->sq_norms, (int64_t)j * dp->batch, 1, &dp->batch));
    }
    *row = &dp->sq_rows[k];
    *accumulate = dp->sq_written[k];
    dp->sq_written[k] = 1;
    return DP_OK;
}

int dp_record_layer(dp_dpsgd *dp, uint32_t module, const char *kind, dp_formulation f) {
    if (dp->n_layers == dp->cap_layers) {
        size_t cap = dp->cap_layers ? 2 * dp->cap_layers : 64;
        dp_dp_layer *l = realloc(dp->layers, cap * sizeof *l);
        if (!l) return dp_error_set(DP_EOOM, "dp: out of host memory for the layer list");
        dp->layers = l;
        dp->cap_layers = cap;
    }
    dp->layers[dp->n_layers++] = (dp_dp_layer){.module = module, .kind = kind, .norms = f};
    return DP_OK;
}

dp_book *dp_book_add(dp_dpsgd *dp, dp_book_kind kind) {
    if (dp->n_books == dp->cap_books) {
        int cap = dp->cap_books ? 2 * dp->cap_books : 64;
        dp_book *b = realloc(dp->books, (size_t)cap * sizeof *b);
        if (!b) {
            dp_error_set(DP_EOOM, "dp: out of host memory for the books");
            return NULL;
        }
        dp->books = b;
        dp->cap_books = cap;
    }
    dp_book *b = &dp->books[dp->n_books++];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->scale = 1.0f;
    return b;
}

int dp_ensure_grad(dp_dpsgd *dp, dp_param *p) {
    if (p->grad.numel) return DP_OK;
    DP_TRY(dp_alloc_tensor(dp, &p->grad, DP_F32, p->value.ndim, p->value.shape, DP_CAT_GRADIENTS, p->module));
    int rc = dp_tensor_fill(&p->grad, 0.0);
    if (rc != DP_OK) dp_tensor_release(&p->grad);
    return rc;
}
