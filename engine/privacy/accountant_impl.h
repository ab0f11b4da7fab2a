/* accountant_impl.h: what the accountant files (accountant*.c) share and nobody else needs. */
#ifndef DP_ACCOUNTANT_IMPL_H
#define DP_ACCOUNTANT_IMPL_H

#include "accountant.h"

#include <stddef.h>

/* Checks what every accountant is given: the history (dp_acct_check_history) and delta in (0, 1).
 */
int dp_acct_check_args(const dp_acct_segment *history, size_t n, double delta, char *err, size_t errlen);

/* The PRV accountant's grid for a history and the discretisation of its segment k (0-based), for
 * the tests: the domain Opacus's _get_domain builds, and the segment's truncated PRV's mean beside
 * the mean and mass of its discretised PMF on the shifted domain. */
typedef struct dp_acct_prv_grid_info {
    size_t grid_points;     /* the domain's point count */
    double t_min, mesh;     /* its first point and spacing, before any shift */
    double continuous_mean; /* the truncated PRV's mean */
    double discrete_mean;   /* Σ t_i·pmf_i over the shifted domain */
    double discrete_mass;   /* Σ pmf_i */
} dp_acct_prv_grid_info;

/* Fills info for segment k of history (eps_error, delta_error as dp_acct_prv_epsilon takes them). */
int dp_acct_prv_grid(const dp_acct_segment *history, size_t n, size_t k, double eps_error, double delta_error,
                     dp_acct_prv_grid_info *info, char *err, size_t errlen);

/* Writes the printf-formatted message into err (when err != NULL and errlen > 0, truncated and
 * NUL-terminated); returns status. For the accountants' messages. */
int dp_acct_fail(char *err, size_t errlen, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif /* DP_ACCOUNTANT_IMPL_H */
