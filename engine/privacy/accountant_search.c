/* accountant_search.c: what every accountant file shares: the noise search around any accountant
 * (Opacus's get_noise_multiplier), the status names and the messages. Calls no other file of the
 * module, so rdp.c and each accountant_*.c may use it without an arrow back. */
#include "accountant.h"

#include "accountant_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

int dp_acct_search_noise(dp_acct_epsilon_fn fn, void *ctx, double target_epsilon, double epsilon_tolerance,
                         double *noise_multiplier, double *epsilon, char *err, size_t errlen) {
    /* opacus.accountants.utils.get_noise_multiplier: double σ from 20 until
     * ε(σ) <= target, then bisect [σ_low, σ_high] keeping ε(σ_high) <= target. */
    int rc;
    double eps_high = INFINITY;
    double sigma_low = 0.0, sigma_high = 10.0;
    while (eps_high > target_epsilon) {
        sigma_high = 2.0 * sigma_high;
        if ((rc = fn(sigma_high, ctx, &eps_high, err, errlen)) != DP_ACCT_OK) return rc;
        if (sigma_high > DP_ACCT_MAX_NOISE_MULTIPLIER) return DP_ACCT_EBUDGET;
    }
    while (target_epsilon - eps_high > epsilon_tolerance) {
        double sigma = (sigma_low + sigma_high) / 2.0;
        if (!(sigma > sigma_low && sigma < sigma_high))
            break; /* interval spent in double precision; Opacus would spin here */
        double eps;
        rc = fn(sigma, ctx, &eps, err, errlen);
        if (rc == DP_ACCT_ESIZE)
            eps = INFINITY; /* far too little noise for a grid that fits: ε > target */
        else if (rc != DP_ACCT_OK)
            return rc;
        if (eps < target_epsilon) {
            sigma_high = sigma;
            eps_high = eps;
        } else {
            sigma_low = sigma;
        }
    }
    *noise_multiplier = sigma_high;
    if (epsilon != NULL) *epsilon = eps_high;
    return DP_ACCT_OK;
}

const char *dp_acct_status_name(int status) {
    switch (status) {
    case DP_ACCT_OK: return "ok";
    case DP_ACCT_EINVAL: return "invalid argument";
    case DP_ACCT_EBUDGET: return "privacy budget out of reach";
    case DP_ACCT_ENUMERIC: return "numerical failure";
    case DP_ACCT_ESIZE: return "grid too large";
    default: return "unknown status";
    }
}

int dp_acct_fail(char *err, size_t errlen, int status, const char *fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}
