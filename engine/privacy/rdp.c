/* rdp.c: the RDP of the Poisson-subsampled Gaussian mechanism (rdp.h).
 *
 * Follows Opacus 1.6 (opacus/accountants/analysis/rdp.py and utils.py) step
 * for step, down to the order of the log-space sums and the loop exits, so
 * that ε and the searched σ agree with Opacus to rounding. Where this file
 * departs from it (argument checks, loops Opacus never leaves) the comment
 * says so.
 */
#include "rdp.h"

#include "accountant_impl.h"

#include <math.h>
#include <stdio.h>

/* The fractional series stops once both new terms are below e^-30 (Opacus's
 * exit); the cap only turns a series that never gets there into an error. */
#define FRAC_SERIES_LOG_CUTOFF (-30.0)
#define FRAC_SERIES_MAX_TERMS 100000000L

/* Below this, glibc's erfc is accurate to a few ulp relative and far from
 * underflow (erfc(10) = 2e-45); above, the continued fraction converges in a
 * few dozen terms. */
#define LOG_ERFC_CF_FROM 10.0
#define LOG_ERFC_CF_TERMS 64
#define LOG_SQRT_PI 0.57236494292470008707171367567652935

static int check_sample_rate(double q, char *err, size_t errlen);
static int check_noise_multiplier(double sigma, char *err, size_t errlen);
static int check_steps(int64_t steps, char *err, size_t errlen);
static int check_delta(double delta, char *err, size_t errlen);
static double log_add(double logx, double logy);
static int log_sub(double logx, double logy, double *out);
static double log_a_int(double q, double sigma, int alpha);
static int log_a_frac(double q, double sigma, double alpha, double *out);
static int rdp_one_step(double q, double sigma, double alpha, double *out);

/* dp_acct_rdp_noise_multiplier's setting, for the search's callback. */
typedef struct rdp_search {
    double sample_rate;
    int64_t steps;
    double delta;
    double order;
} rdp_search;

static int rdp_at_sigma(double sigma, void *ctx, double *epsilon, char *err, size_t errlen) {
    rdp_search *s = ctx;
    return dp_acct_rdp_sampled_epsilon(s->sample_rate, sigma, s->steps, s->delta, epsilon, &s->order, err, errlen);
}

void dp_acct_rdp_default_orders(double orders[DP_ACCT_RDP_N_ORDERS]) {
    /* Same arithmetic as Python's `1 + x / 10.0`, so 2.0, ..., 10.0 come out
     * exactly integral and take the integer series, as in Opacus. */
    size_t n = 0;
    for (int x = 1; x < 100; x++) orders[n++] = 1.0 + (double)x / 10.0;
    for (int a = 12; a < 64; a++) orders[n++] = (double)a;
}

int dp_acct_rdp_values(double sample_rate, double noise_multiplier, int64_t steps, const double *orders,
                       size_t n_orders, double *rdp, char *err, size_t errlen) {
    int rc;
    if ((rc = check_sample_rate(sample_rate, err, errlen)) != DP_ACCT_OK ||
        (rc = check_noise_multiplier(noise_multiplier, err, errlen)) != DP_ACCT_OK ||
        (rc = check_steps(steps, err, errlen)) != DP_ACCT_OK)
        return rc;
    if (orders == NULL || rdp == NULL || n_orders == 0)
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "orders must be a non-empty array (got %zu orders)", n_orders);
    for (size_t k = 0; k < n_orders; k++)
        if (!(orders[k] > 1.0 && orders[k] <= DP_ACCT_RDP_MAX_ORDER))
            return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "orders[%zu] must be in (1, %g] (got %g)", k,
                                DP_ACCT_RDP_MAX_ORDER, orders[k]);

    for (size_t k = 0; k < n_orders; k++) {
        double one_step;
        if (rdp_one_step(sample_rate, noise_multiplier, orders[k], &one_step) != 0)
            return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC,
                                "RDP series failed at order %g for sample_rate=%g, "
                                "noise_multiplier=%g (log of a negative sum)",
                                orders[k], sample_rate, noise_multiplier);
        rdp[k] = one_step * (double)steps; /* RDP composes additively */
    }
    return DP_ACCT_OK;
}

int dp_acct_rdp_to_epsilon(const double *orders, const double *rdp, size_t n_orders, double delta, double *epsilon,
                           double *order, char *err, size_t errlen) {
    int rc;
    if ((rc = check_delta(delta, err, errlen)) != DP_ACCT_OK) return rc;
    if (orders == NULL || rdp == NULL || n_orders == 0)
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "orders must be a non-empty array (got %zu orders)", n_orders);
    for (size_t k = 0; k < n_orders; k++)
        if (!(orders[k] > 1.0))
            return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "orders[%zu] must be > 1 (got %g)", k, orders[k]);

    /* Balle et al. 2020, Theorem 21, as Opacus's get_privacy_spent:
     * ε(α) = rdp(α) - (log δ + log α)/(α - 1) + log((α - 1)/α),
     * minimised like np.nanargmin (NaNs skipped, first minimum wins). */
    double best_eps = INFINITY, best_order = NAN;
    int found = 0;
    for (size_t k = 0; k < n_orders; k++) {
        double a = orders[k];
        double eps = rdp[k] - (log(delta) + log(a)) / (a - 1.0) + log((a - 1.0) / a);
        if (isnan(eps)) continue;
        if (!found || eps < best_eps) {
            best_eps = eps;
            best_order = a;
            found = 1;
        }
    }
    *epsilon = best_eps;
    if (order != NULL) *order = best_order;
    return DP_ACCT_OK;
}

int dp_acct_rdp_sampled_epsilon(double sample_rate, double noise_multiplier, int64_t steps, double delta,
                                double *epsilon, double *order, char *err, size_t errlen) {
    int rc;
    if ((rc = check_sample_rate(sample_rate, err, errlen)) != DP_ACCT_OK ||
        (rc = check_noise_multiplier(noise_multiplier, err, errlen)) != DP_ACCT_OK ||
        (rc = check_steps(steps, err, errlen)) != DP_ACCT_OK || (rc = check_delta(delta, err, errlen)) != DP_ACCT_OK)
        return rc;
    if (steps == 0) { /* nothing released: RDPAccountant with no history says (0, 0) */
        *epsilon = 0.0;
        if (order != NULL) *order = 0.0;
        return DP_ACCT_OK;
    }
    double orders[DP_ACCT_RDP_N_ORDERS], rdp[DP_ACCT_RDP_N_ORDERS];
    dp_acct_rdp_default_orders(orders);
    if ((rc = dp_acct_rdp_values(sample_rate, noise_multiplier, steps, orders, DP_ACCT_RDP_N_ORDERS, rdp, err,
                                 errlen)) != DP_ACCT_OK)
        return rc;
    return dp_acct_rdp_to_epsilon(orders, rdp, DP_ACCT_RDP_N_ORDERS, delta, epsilon, order, err, errlen);
}

int dp_acct_rdp_noise_multiplier(double target_epsilon, double delta, double sample_rate, int64_t steps,
                                 double epsilon_tolerance, double *noise_multiplier, double *epsilon, double *order,
                                 char *err, size_t errlen) {
    int rc;
    if (!(isfinite(target_epsilon) && target_epsilon > 0.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "epsilon must be finite and > 0 (got %g)", target_epsilon);
    if ((rc = check_delta(delta, err, errlen)) != DP_ACCT_OK) return rc;
    /* Opacus would loop forever on q = 0 or steps = 0: ε does not depend on σ. */
    if (!(sample_rate > 0.0 && sample_rate <= 1.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "sample_rate must be in (0, 1] (got %g)", sample_rate);
    if (steps < 1) return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "steps must be >= 1 (got %lld)", (long long)steps);
    if (!(isfinite(epsilon_tolerance) && epsilon_tolerance > 0.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "epsilon_tolerance must be finite and > 0 (got %g)",
                            epsilon_tolerance);

    rdp_search ctx = {sample_rate, steps, delta, NAN};
    double sigma, eps;
    rc = dp_acct_search_noise(rdp_at_sigma, &ctx, target_epsilon, epsilon_tolerance, &sigma, &eps, err, errlen);
    if (rc == DP_ACCT_EBUDGET)
        return dp_acct_fail(err, errlen, rc,
                            "epsilon=%g at delta=%g is out of reach: it needs "
                            "noise_multiplier > %g for sample_rate=%g, steps=%lld",
                            target_epsilon, delta, DP_ACCT_MAX_NOISE_MULTIPLIER, sample_rate, (long long)steps);
    if (rc != DP_ACCT_OK) return rc;
    /* The order at σ_high: recomputed, the search remembers only ε. */
    if ((rc = dp_acct_rdp_sampled_epsilon(sample_rate, sigma, steps, delta, &eps, &ctx.order, err, errlen)) !=
        DP_ACCT_OK)
        return rc;
    *noise_multiplier = sigma;
    if (epsilon != NULL) *epsilon = eps;
    if (order != NULL) *order = ctx.order;
    return DP_ACCT_OK;
}

double dp_acct_log_erfc(double x) {
    if (!(x >= LOG_ERFC_CF_FROM)) /* also NaN */
        return log(erfc(x));
    /* erfc(x) = exp(-x²)·erfcx(x), erfcx(x) = 1/(√π·K(x)) with Laplace's
     * continued fraction K(x) = x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))),
     * evaluated bottom-up; log(erfc) = -x² - log(√π·K). */
    double k = x;
    for (int n = LOG_ERFC_CF_TERMS; n >= 1; n--) k = x + (0.5 * n) / k;
    return -x * x - LOG_SQRT_PI - log(k);
}

/* ---- helpers ------------------------------------------------------------ */

static int check_sample_rate(double q, char *err, size_t errlen) {
    if (!(q >= 0.0 && q <= 1.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "sample_rate must be in [0, 1] (got %g)", q);
    return DP_ACCT_OK;
}

static int check_noise_multiplier(double sigma, char *err, size_t errlen) {
    if (!(isfinite(sigma) && sigma >= 0.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "noise_multiplier must be finite and >= 0 (got %g)", sigma);
    return DP_ACCT_OK;
}

static int check_steps(int64_t steps, char *err, size_t errlen) {
    if (steps < 0) return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "steps must be >= 0 (got %lld)", (long long)steps);
    return DP_ACCT_OK;
}

static int check_delta(double delta, char *err, size_t errlen) {
    if (!(delta > 0.0 && delta < 1.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "delta must be in (0, 1) (got %g)", delta);
    return DP_ACCT_OK;
}

/* log(e^logx + e^logy); -inf stands for 0. */
static double log_add(double logx, double logy) {
    double a = fmin(logx, logy), b = fmax(logx, logy);
    if (a == -INFINITY) return b;
    return log1p(exp(a - b)) + b;
}

/* log(e^logx - e^logy) into *out; -1 if the difference would be negative. */
static int log_sub(double logx, double logy, double *out) {
    if (logx < logy) return -1;
    if (logy == -INFINITY) {
        *out = logx;
        return 0;
    }
    if (logx == logy) {
        *out = -INFINITY;
        return 0;
    }
    double d = expm1(logx - logy);
    /* Python's expm1 raises OverflowError here and Opacus returns logx. */
    *out = isinf(d) ? logx : log(d) + logy;
    return 0;
}

/* log A_α for integer α, 0 < q < 1 (Mironov et al. 2019, section 3.3):
 * A_α = Σ_{i=0..α} C(α,i) q^i (1-q)^(α-i) exp((i² - i)/(2σ²)). */
static double log_a_int(double q, double sigma, int alpha) {
    double log_a = -INFINITY;
    double binom = 1.0; /* C(alpha, i) by the multiplicative recurrence */
    for (int i = 0; i <= alpha; i++) {
        double log_coef = log(binom) + i * log(q) + (alpha - i) * log(1.0 - q);
        double s = log_coef + ((double)i * i - i) / (2.0 * (sigma * sigma));
        log_a = log_add(log_a, s);
        binom = binom * (double)(alpha - i) / (double)(i + 1);
    }
    return log_a;
}

/* log A_α for fractional α, 0 < q < 1: the two halves of the integral split at
 * z0, each a binomial series whose terms alternate in sign once i > α. */
static int log_a_frac(double q, double sigma, double alpha, double *out) {
    double log_a0 = -INFINITY, log_a1 = -INFINITY;
    double z0 = sigma * sigma * log(1.0 / q - 1.0) + 0.5;
    double coef = 1.0; /* C(alpha, i), generalised binomial coefficient */
    for (long i = 0; i < FRAC_SERIES_MAX_TERMS; i++) {
        double di = (double)i;
        double log_coef = log(fabs(coef));
        double j = alpha - di;

        double log_t0 = log_coef + di * log(q) + j * log(1.0 - q);
        double log_t1 = log_coef + j * log(q) + di * log(1.0 - q);

        double log_e0 = log(0.5) + dp_acct_log_erfc((di - z0) / (sqrt(2.0) * sigma));
        double log_e1 = log(0.5) + dp_acct_log_erfc((z0 - j) / (sqrt(2.0) * sigma));

        double log_s0 = log_t0 + (di * di - di) / (2.0 * (sigma * sigma)) + log_e0;
        double log_s1 = log_t1 + (j * j - j) / (2.0 * (sigma * sigma)) + log_e1;
        if (isnan(log_s0) || isnan(log_s1)) return -1;

        if (coef > 0.0) {
            log_a0 = log_add(log_a0, log_s0);
            log_a1 = log_add(log_a1, log_s1);
        } else if (log_sub(log_a0, log_s0, &log_a0) != 0 || log_sub(log_a1, log_s1, &log_a1) != 0) {
            return -1;
        }

        coef = coef * (alpha - di) / (di + 1.0);
        if (fmax(log_s0, log_s1) < FRAC_SERIES_LOG_CUTOFF) {
            *out = log_add(log_a0, log_a1);
            return 0;
        }
    }
    return -1;
}

/* RDP of one step at order α (> 1), Opacus's _compute_rdp with its special cases. */
static int rdp_one_step(double q, double sigma, double alpha, double *out) {
    if (q == 0.0) {
        *out = 0.0;
    } else if (sigma == 0.0) {
        *out = INFINITY; /* no noise, no privacy */
    } else if (q == 1.0) {
        *out = alpha / (2.0 * (sigma * sigma)); /* the plain Gaussian mechanism */
    } else if (alpha == floor(alpha)) {
        *out = log_a_int(q, sigma, (int)alpha) / (alpha - 1.0);
    } else {
        double log_a;
        if (log_a_frac(q, sigma, alpha, &log_a) != 0) return -1;
        *out = log_a / (alpha - 1.0);
    }
    return 0;
}
