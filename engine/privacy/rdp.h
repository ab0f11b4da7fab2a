/* rdp.h: the Rényi DP of the Poisson-subsampled Gaussian mechanism, what the RDP accountant
 * (accountant_rdp.c) composes over a history.
 *
 * A numerical mirror of Opacus 1.6's RDPAccountant (opacus/accountants/rdp.py,
 * opacus/accountants/analysis/rdp.py, opacus/accountants/utils.py): the same
 * default orders, the same log-space series for the RDP of the sampled
 * Gaussian (Mironov, Talwar, Zhang 2019, section 3.3), the same RDP -> (ε, δ)
 * conversion (Balle et al. 2020, Theorem 21) and the same noise-multiplier
 * search (dp_acct_search_noise, accountant.h). tests/privacy/test_rdp.c holds it to 1e-6 relative of Opacus.
 *
 * Units: sample_rate q is the Poisson sampling probability per step (expected
 * logical batch / dataset size); noise_multiplier σ is the noise standard
 * deviation over the clipping norm; epsilon and RDP values are in nats.
 *
 * Every function that can fail returns a dp_acct_status and, on failure,
 * writes a message naming the argument and its valid range into err (errlen
 * bytes, always NUL-terminated; err may be NULL). Out parameters are written
 * only on success. No allocation, no global state: thread-safe.
 */
#ifndef DP_RDP_H
#define DP_RDP_H

#include "accountant.h" /* dp_acct_status */

#include <stddef.h>
#include <stdint.h>

/* Opacus's RDPAccountant.DEFAULT_ALPHAS: 1.1, 1.2, ..., 10.9, then 12, ..., 63. */
#define DP_ACCT_RDP_N_ORDERS 151
/* Largest RDP order accepted: the series has about `order` terms. */
#define DP_ACCT_RDP_MAX_ORDER 1e4

/* Fills orders[] with the default RDP orders, bit-identical to Opacus's (1 + x/10.0). */
void dp_acct_rdp_default_orders(double orders[DP_ACCT_RDP_N_ORDERS]);

/* RDP of `steps` compositions of the sampled Gaussian at each order (orders in
 * (1, DP_ACCT_RDP_MAX_ORDER]) into rdp[n_orders]; INFINITY where σ = 0 (NaN if also
 * steps = 0, as in Opacus). Returns EINVAL on a bad q (not in [0,1]), σ (< 0 or not
 * finite), steps (< 0) or order; ENUMERIC if the fractional-order series fails. */
int dp_acct_rdp_values(double sample_rate, double noise_multiplier, int64_t steps, const double *orders,
                       size_t n_orders, double *rdp, char *err, size_t errlen);

/* Converts RDP values to ε at delta, minimising over the orders; writes ε and the
 * order attaining it (the first on ties; ε = INFINITY, order = NAN if every value
 * is NaN). Returns EINVAL if delta is not in (0,1), n_orders is 0 or an order is <= 1. */
int dp_acct_rdp_to_epsilon(const double *orders, const double *rdp, size_t n_orders, double delta, double *epsilon,
                           double *order, char *err, size_t errlen);

/* ε at delta after `steps` steps at (q, σ), over the default orders; writes ε and
 * the optimal order (order may be NULL). steps = 0 gives ε = 0, order = 0 (Opacus's
 * accountant with an empty history); σ = 0 gives ε = INFINITY. Returns EINVAL on a
 * bad argument, ENUMERIC if the series fails. */
int dp_acct_rdp_sampled_epsilon(double sample_rate, double noise_multiplier, int64_t steps, double delta,
                                double *epsilon, double *order, char *err, size_t errlen);

/* Smallest σ found by Opacus's search (doubling from 20, then bisection until
 * target - ε <= epsilon_tolerance) with ε(σ) <= target_epsilon at delta; also writes
 * that ε and its order (either may be NULL). Requires q in (0,1] and steps >= 1
 * (Opacus loops forever otherwise). Returns EINVAL on a bad argument, EBUDGET if σ
 * would exceed DP_ACCT_MAX_NOISE_MULTIPLIER, ENUMERIC if the series fails. */
int dp_acct_rdp_noise_multiplier(double target_epsilon, double delta, double sample_rate, int64_t steps,
                                 double epsilon_tolerance, double *noise_multiplier, double *epsilon, double *order,
                                 char *err, size_t errlen);

/* log(erfc(x)) accurate to a few ulp for all x, where erfc itself underflows
 * (x > 26.5) too; what scipy's log_ndtr gives Opacus. Exposed for the tests. */
double dp_acct_log_erfc(double x);

#endif /* DP_RDP_H */
