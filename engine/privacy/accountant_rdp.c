/* accountant_rdp.c: the checks every accountant makes of its history, and RDP over a history (the
 * RDP accountant itself, and the PRV accountant's bound on its domain). Calls nothing of the other
 * accountant files, so accountant.c -> accountant_{prv,pld}.c -> accountant_rdp.c is one-way. */
#include "accountant.h"

#include "accountant_impl.h"
#include "rdp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int dp_acct_check_history(const dp_acct_segment *history, size_t n, char *err, size_t errlen) {
    if (history == NULL || n == 0)
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL,
                            "history is empty: give at least one segment "
                            "(noise_multiplier, sample_rate, steps)");
    for (size_t k = 0; k < n; k++) {
        const dp_acct_segment *s = &history[k];
        char where[32] = "";
        if (n > 1) snprintf(where, sizeof where, "history[%zu]: ", k + 1);
        if (!(isfinite(s->noise_multiplier) && s->noise_multiplier >= 0.0))
            return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "%snoise_multiplier must be finite and >= 0 (got %g)",
                                where, s->noise_multiplier);
        if (!(s->sample_rate > 0.0 && s->sample_rate <= 1.0))
            return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "%ssample_rate must be in (0, 1] (got %g)", where,
                                s->sample_rate);
        if (s->steps < 1)
            return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "%ssteps must be >= 1 (got %lld)", where,
                                (long long)s->steps);
    }
    return DP_ACCT_OK;
}

int dp_acct_check_args(const dp_acct_segment *history, size_t n, double delta, char *err, size_t errlen) {
    int rc = dp_acct_check_history(history, n, err, errlen);
    if (rc == DP_ACCT_OK && !(delta > 0.0 && delta < 1.0))
        rc = dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "delta must be in (0, 1) (got %g)", delta);
    return rc;
}

int dp_acct_rdp_epsilon(const dp_acct_segment *history, size_t n, double delta, double *epsilon, dp_acct_detail *detail,
                        char *err, size_t errlen) {
    int rc = dp_acct_check_history(history, n, err, errlen);
    if (rc != DP_ACCT_OK) return rc;
    double orders[DP_ACCT_RDP_N_ORDERS], rdp[DP_ACCT_RDP_N_ORDERS] = {0};
    double part[DP_ACCT_RDP_N_ORDERS];
    dp_acct_rdp_default_orders(orders);
    for (size_t k = 0; k < n; k++) { /* RDP composes additively, order by order */
        rc = dp_acct_rdp_values(history[k].sample_rate, history[k].noise_multiplier, history[k].steps, orders,
                                DP_ACCT_RDP_N_ORDERS, part, err, errlen);
        if (rc != DP_ACCT_OK) return rc;
        for (size_t i = 0; i < DP_ACCT_RDP_N_ORDERS; i++) rdp[i] += part[i];
    }
    double eps, order;
    rc = dp_acct_rdp_to_epsilon(orders, rdp, DP_ACCT_RDP_N_ORDERS, delta, &eps, &order, err, errlen);
    if (rc != DP_ACCT_OK) return rc;
    *epsilon = eps;
    if (detail != NULL) *detail = (dp_acct_detail){order, NAN, NAN, NAN, 0};
    return DP_ACCT_OK;
}
