/* dpsgd_adaptive.c: adaptive clipping, Opacus's AdaClipDPOptimizer (Andrew et al. 2021). Every
 * clipped sample is counted unclipped when its factor min(1, C / (||g|| + 1e-6)) is 1; after the
 * step's noise the count is summed across the ranks, given N(0, unclipped_num_std^2) noise from a
 * Philox stream of its own (the same draw on every rank and device), divided by the step's samples
 * and the bound moved: C <- clamp(C exp(-lr (u - q)), min, max). The gradient's noise is drawn
 * with the raised multiplier (sigma^-2 - (2 unclipped_num_std)^-2)^(-1/2) (dpsgd_noise.c), which
 * with the count's release spends what sigma alone would: the accountant is given sigma. */
#include "dpsgd_impl.h"

#include "error.h"
#include "ops.h"
#include "philox.h"

#include <math.h>
#include <stdlib.h>

/* "DPclip" in the top bytes: the count's noise stream, apart from the gradient's and sampling's. */
#define COUNT_STREAM_TAG 0x4443000000000000ull

int dpsgd_adaptive_check(const dpsgd_config *cfg) {
    const dpsgd_adaptive *a = &cfg->adaptive;
    if (!a->enabled) return DP_OK;
    if (cfg->clipping != DPSGD_STYLE_FLAT || cfg->clip_fn != DPSGD_CLIP_FN_ABADI)
        return dp_error_set(DP_EINVAL,
                            "dp: adaptive clipping moves one bound: it takes clipping 'flat' and clip_fn "
                            "'abadi' (got '%s', '%s')",
                            dpsgd_style_name(cfg->clipping), dpsgd_clip_fn_name(cfg->clip_fn));
    if (!(a->target_unclipped_quantile >= 0.0 && a->target_unclipped_quantile <= 1.0))
        return dp_error_set(DP_EINVAL, "dp: adaptive.target_unclipped_quantile %g must be in [0, 1]",
                            a->target_unclipped_quantile);
    if (!(a->clipbound_learning_rate >= 0.0) || !isfinite(a->clipbound_learning_rate))
        return dp_error_set(DP_EINVAL, "dp: adaptive.clipbound_learning_rate %g must be a number >= 0",
                            a->clipbound_learning_rate);
    if (!(a->min_clipbound > 0.0) || !isfinite(a->max_clipbound) || !(a->min_clipbound <= a->max_clipbound))
        return dp_error_set(DP_EINVAL, "dp: adaptive bounds: need 0 < min_clipbound (%g) <= max_clipbound (%g)",
                            a->min_clipbound, a->max_clipbound);
    if (!(a->unclipped_num_std >= 0.0) || !isfinite(a->unclipped_num_std))
        return dp_error_set(DP_EINVAL, "dp: adaptive.unclipped_num_std %g must be a number >= 0", a->unclipped_num_std);
    if (cfg->noise_multiplier > 0.0 && !(cfg->noise_multiplier < 2.0 * a->unclipped_num_std))
        return dp_error_set(DP_EINVAL,
                            "dp: adaptive.unclipped_num_std %g must be more than noise_multiplier / 2 = %g: the "
                            "gradient's noise multiplier is raised to (sigma^-2 - (2 unclipped_num_std)^-2)^(-1/2) "
                            "(Opacus's AdaClip)",
                            a->unclipped_num_std, cfg->noise_multiplier / 2.0);
    return DP_OK;
}

double dpsgd_adaptive_noise_multiplier(const dpsgd_config *cfg) {
    double s = cfg->noise_multiplier;
    if (!cfg->adaptive.enabled || !(s > 0.0)) return s;
    double u = 2.0 * cfg->adaptive.unclipped_num_std;
    return 1.0 / sqrt(1.0 / (s * s) - 1.0 / (u * u));
}

void dpsgd_adaptive_observe(dpsgd *dp, double C, double n) {
    if (!dp->cfg.adaptive.enabled || dp->padding) return;
    dp->ada_samples++;
    if (C / (n + 1e-6) >= 1.0) dp->ada_unclipped++;
}

/* The count summed across the ranks (each rank counted its own samples), as an f32 all-reduce:
 * exact for counts below 2^24. */
static int sum_across_ranks(dpsgd *dp, int64_t *count, int64_t *samples) {
    if (!dp->comm) return DP_OK;
    float host[2] = {(float)*count, (float)*samples};
    int64_t two = 2;
    dp_tensor t;
    DP_TRY(dp_tensor_init_module(&t, dp->dev, DP_F32, 1, &two, DP_CAT_NORM_SAMPLES, DP_MODULE_NONE));
    int rc = dp_tensor_from_host(&t, host, sizeof host);
    if (rc == DP_OK) rc = dp_comm_all_reduce(dp->comm, &t);
    if (rc == DP_OK && dp->dev->kind != DP_DEV_PLAN) rc = dp_tensor_to_host(&t, host, sizeof host);
    dp_tensor_release(&t);
    *count = (int64_t)llround(host[0]);
    *samples = (int64_t)llround(host[1]);
    return rc;
}

int dpsgd_adaptive_step(dpsgd *dp) {
    const dpsgd_adaptive *a = &dp->cfg.adaptive;
    if (!a->enabled) return DP_OK;
    int64_t count = dp->ada_unclipped, samples = dp->ada_samples;
    dp->ada_unclipped = dp->ada_samples = 0;
    DP_TRY(sum_across_ranks(dp, &count, &samples));
    if (dp->n_ada == dp->cap_ada) {
        size_t cap = dp->cap_ada ? 2 * dp->cap_ada : 64;
        dpsgd_bound_step *h = realloc(dp->ada_history, cap * sizeof *h);
        if (!h) return dp_error_set(DP_EOOM, "dp: out of host memory for the clip bound's history");
        dp->ada_history = h;
        dp->cap_ada = cap;
    }
    double C = dp->group_bound[0], next = C, fraction = 0.0;
    if (samples > 0) {
        double noise =
            a->unclipped_num_std * (double)dp_philox_normal(dp->cfg.seed, COUNT_STREAM_TAG | (uint64_t)dp->steps, 0);
        fraction = ((double)count + noise) / (double)samples;
        next = C * exp(-a->clipbound_learning_rate * (fraction - a->target_unclipped_quantile));
        next = next > a->max_clipbound ? a->max_clipbound : next < a->min_clipbound ? a->min_clipbound : next;
    }
    dp->ada_history[dp->n_ada++] = (dpsgd_bound_step){C, samples, count, fraction, next};
    dp->group_bound[0] = next;
    return DP_OK;
}

const dpsgd_bound_step *dpsgd_bound_history(const dpsgd *dp, size_t *n) {
    *n = dp->n_ada;
    return dp->ada_history;
}
