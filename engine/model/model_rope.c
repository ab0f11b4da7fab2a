/* model_rope.c: the rotary embedding's inverse frequencies, as transformers computes them
 * (modeling_rope_utils.py, transformers 5): default theta^(-2j/hd); linear divides them by
 * factor; llama3 (Llama-3.1) divides the low frequencies by factor, keeps the high ones and
 * blends between; yarn ramps between interpolation (/ factor) and extrapolation over a range of
 * dimensions and scales cos and sin by an attention factor. transformers computes in f32; here
 * each frequency is computed in double and rounded once (within an f32 ulp of transformers). */
#include "model.h"

#include "error.h"

#include <math.h>
#include <string.h>

#define DP_PI 3.14159265358979323846

static const char *const rope_names[] = {"default", "linear", "llama3", "yarn"};

void dp_rope_scaling_default(dp_rope_scaling *r) {
    memset(r, 0, sizeof *r);
    r->type = DP_ROPE_DEFAULT;
    r->factor = 1.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->truncate = 1;
}

const char *dp_rope_type_name(dp_rope_type t) { return (unsigned)t <= DP_ROPE_YARN ? rope_names[t] : "?"; }

int dp_rope_type_parse(const char *name, dp_rope_type *out) {
    for (unsigned i = 0; i <= DP_ROPE_YARN; i++)
        if (name && strcmp(name, rope_names[i]) == 0) {
            *out = (dp_rope_type)i;
            return 0;
        }
    return -1;
}

static int positive(double v, const char *key) {
    if (v > 0 && isfinite(v)) return DP_OK;
    return dp_error_set(DP_EINVAL, "model: 'rope_scaling.%s' must be a positive number (got %g)", key, v);
}

int dp_rope_scaling_check(const dp_model_config *cfg) {
    const dp_rope_scaling *r = &cfg->rope;
    if ((unsigned)r->type > DP_ROPE_YARN)
        return dp_error_set(DP_EINVAL, "model: unknown rope type %d (valid: default, linear, llama3, yarn)",
                            (int)r->type);
    if (r->type == DP_ROPE_DEFAULT) return DP_OK;
    if (cfg->arch != DP_ARCH_LLAMA)
        return dp_error_set(DP_EINVAL, "model: 'rope_scaling' is for llama (gpt has learned positions)");
    DP_TRY(positive(r->factor, "factor"));
    if (r->type == DP_ROPE_LINEAR) return DP_OK;
    if (r->original_max_positions <= 0)
        return dp_error_set(DP_EINVAL,
                            "model: rope type '%s' needs 'rope_scaling.original_max_position_embeddings' (the "
                            "pretraining context, a positive integer)",
                            dp_rope_type_name(r->type));
    if (r->type == DP_ROPE_LLAMA3) {
        DP_TRY(positive(r->low_freq_factor, "low_freq_factor"));
        DP_TRY(positive(r->high_freq_factor, "high_freq_factor"));
        if (!(r->high_freq_factor > r->low_freq_factor))
            return dp_error_set(DP_EINVAL,
                                "model: 'rope_scaling.high_freq_factor' (%g) must exceed 'low_freq_factor' (%g)",
                                r->high_freq_factor, r->low_freq_factor);
        return DP_OK;
    }
    DP_TRY(positive(r->beta_fast, "beta_fast"));
    DP_TRY(positive(r->beta_slow, "beta_slow"));
    if (!(r->mscale >= 0 && r->mscale_all_dim >= 0 && r->attention_factor >= 0 && isfinite(r->mscale) &&
          isfinite(r->mscale_all_dim) && isfinite(r->attention_factor)))
        return dp_error_set(DP_EINVAL, "model: 'rope_scaling.mscale', 'mscale_all_dim' and 'attention_factor' must be "
                                       "non-negative numbers (0: not given)");
    return DP_OK;
}

/* yarn's get_mscale */
static double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

/* yarn's find_correction_dim: the dimension at which a frequency turns num_rotations times over
 * the original context */
static double correction_dim(double num_rotations, double dim, double base, double positions) {
    return dim * log(positions / (num_rotations * 2.0 * DP_PI)) / (2.0 * log(base));
}

int dp_rope_inv_freq(const dp_model_config *cfg, int64_t hd, float *inv_freq, float *cos_sin_scale) {
    DP_TRY(dp_rope_scaling_check(cfg));
    if (hd <= 0 || hd % 2) return dp_error_set(DP_EINVAL, "rope: head dimension %lld is not even", (long long)hd);
    const dp_rope_scaling *r = &cfg->rope;
    const double base = (double)cfg->rope_theta, factor = r->factor, dim = (double)hd;
    const int64_t half = hd / 2;
    double scale = 1.0, low = 0.0, high = 0.0;
    if (r->type == DP_ROPE_YARN) {
        if (r->attention_factor > 0)
            scale = r->attention_factor;
        else if (r->mscale > 0 && r->mscale_all_dim > 0)
            scale = yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim);
        else
            scale = yarn_mscale(factor, 1.0);
        const double orig = (double)r->original_max_positions;
        low = correction_dim(r->beta_fast, dim, base, orig);
        high = correction_dim(r->beta_slow, dim, base, orig);
        if (r->truncate) low = floor(low), high = ceil(high);
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001; /* transformers' guard against a zero-width ramp */
    }
    for (int64_t j = 0; j < half; j++) {
        const double f = 1.0 / pow(base, (double)(2 * j) / dim);
        double v = f;
        switch (r->type) {
        case DP_ROPE_DEFAULT: break;
        case DP_ROPE_LINEAR: v = f / factor; break;
        case DP_ROPE_LLAMA3: {
            const double orig = (double)r->original_max_positions, wavelen = 2.0 * DP_PI / f;
            const double low_wavelen = orig / r->low_freq_factor, high_wavelen = orig / r->high_freq_factor;
            if (wavelen > low_wavelen) {
                v = f / factor; /* low frequencies: interpolated */
            } else if (wavelen >= high_wavelen) {
                const double s = (orig / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
                v = (1.0 - s) * f / factor + s * f; /* the band between: blended */
            }
            break;
        }
        case DP_ROPE_YARN: {
            double ramp = ((double)j - low) / (high - low); /* 0 .. 1 over the correction range */
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            const double extrapolation = 1.0 - ramp;
            v = f / factor * (1.0 - extrapolation) + f * extrapolation;
            break;
        }
        }
        inv_freq[j] = (float)v;
    }
    *cos_sin_scale = (float)scale;
    return DP_OK;
}
