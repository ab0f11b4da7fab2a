/* accountant.c: accountants by name and the noise search; the checks and RDP over a history are in
 * accountant_rdp.c, which the PRV and PLD accountants call too. */
#include "accountant.h"

#include "accountant_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const NAMES[] = {"rdp", "prv", "pld"};

/* The setting dp_acct_noise_multiplier searches over. */
typedef struct noise_search {
    dp_acct_kind kind;
    double sample_rate, delta;
    int64_t steps;
    const dp_acct_options *opt;
} noise_search;

static int epsilon_at_sigma(double sigma, void *ctx, double *epsilon, char *err, size_t errlen);

void dp_acct_options_default(dp_acct_options *opt) {
    opt->eps_error = DP_ACCT_PRV_EPS_ERROR;
    opt->delta_error = 0.0;
    opt->interval = DP_ACCT_PLD_INTERVAL;
}

int dp_acct_parse(const char *name, dp_acct_kind *kind, char *err, size_t errlen) {
    for (size_t k = 0; name != NULL && k < sizeof NAMES / sizeof NAMES[0]; k++)
        if (strcmp(name, NAMES[k]) == 0) {
            *kind = (dp_acct_kind)k;
            return DP_ACCT_OK;
        }
    return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "unknown accountant '%s' (valid: %s)",
                        name != NULL ? name : "(null)", DP_ACCT_NAMES);
}

const char *dp_acct_name(dp_acct_kind kind) {
    return (unsigned)kind < sizeof NAMES / sizeof NAMES[0] ? NAMES[kind] : "unknown";
}

int dp_acct_epsilon(dp_acct_kind kind, const dp_acct_segment *history, size_t n, double delta,
                    const dp_acct_options *opt, double *epsilon, dp_acct_detail *detail, char *err, size_t errlen) {
    dp_acct_options defaults;
    if (opt == NULL) {
        dp_acct_options_default(&defaults);
        opt = &defaults;
    }
    switch (kind) {
    case DP_ACCT_RDP: return dp_acct_rdp_epsilon(history, n, delta, epsilon, detail, err, errlen);
    case DP_ACCT_PRV: {
        double delta_error = opt->delta_error > 0.0 ? opt->delta_error : delta * DP_ACCT_PRV_DELTA_ERROR_FRACTION;
        return dp_acct_prv_epsilon(history, n, delta, opt->eps_error, delta_error, epsilon, detail, err, errlen);
    }
    case DP_ACCT_PLD: return dp_acct_pld_epsilon(history, n, delta, opt->interval, epsilon, detail, err, errlen);
    }
    return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "unknown accountant %d (valid: %s)", (int)kind, DP_ACCT_NAMES);
}

int dp_acct_noise_multiplier(dp_acct_kind kind, double target_epsilon, double delta, double sample_rate, int64_t steps,
                             double epsilon_tolerance, const dp_acct_options *opt, double *noise_multiplier,
                             double *epsilon, char *err, size_t errlen) {
    if (!(isfinite(target_epsilon) && target_epsilon > 0.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "epsilon must be finite and > 0 (got %g)", target_epsilon);
    if (!(isfinite(epsilon_tolerance) && epsilon_tolerance > 0.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "epsilon_tolerance must be finite and > 0 (got %g)",
                            epsilon_tolerance);
    dp_acct_segment one = {1.0, sample_rate, steps};
    int rc = dp_acct_check_args(&one, 1, delta, err, errlen);
    if (rc != DP_ACCT_OK) return rc;
    noise_search ctx = {kind, sample_rate, delta, steps, opt};
    rc = dp_acct_search_noise(epsilon_at_sigma, &ctx, target_epsilon, epsilon_tolerance, noise_multiplier, epsilon, err,
                              errlen);
    if (rc == DP_ACCT_EBUDGET)
        return dp_acct_fail(err, errlen, rc,
                            "epsilon=%g at delta=%g is out of reach: it needs noise_multiplier > "
                            "%g for sample_rate=%g, steps=%lld (accountant %s)",
                            target_epsilon, delta, DP_ACCT_MAX_NOISE_MULTIPLIER, sample_rate, (long long)steps,
                            dp_acct_name(kind));
    return rc;
}

static int epsilon_at_sigma(double sigma, void *ctx, double *epsilon, char *err, size_t errlen) {
    const noise_search *s = ctx;
    dp_acct_segment one = {sigma, s->sample_rate, s->steps};
    return dp_acct_epsilon(s->kind, &one, 1, s->delta, s->opt, epsilon, NULL, err, errlen);
}
