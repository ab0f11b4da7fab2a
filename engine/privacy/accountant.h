/* accountant.h: privacy accountants for DP-SGD's Poisson-subsampled Gaussian, chosen by name.
 *
 *   rdp  Rényi DP, Opacus's RDPAccountant (the mathematics in rdp.h, over a history in accountant_rdp.c): a loose
 *        upper bound, fast.
 *   prv  numerical composition of privacy random variables (Gopi, Lee, Wutschitz 2021) as
 *        Opacus 1.6's PRVAccountant, its PrivacyEngine's default: the upper end of an estimate
 *        whose error is eps_error in ε and delta_error in δ (accountant_prv.c).
 *   pld  privacy loss distributions with pessimistic connect-the-dots discretisation
 *        (Doroshenko et al. 2022) as Google's dp_accounting PLDAccountant, add-or-remove
 *        neighbours (accountant_pld.c).
 *
 * A history is a list of segments (σ, q, steps): `steps` steps at noise multiplier σ and Poisson
 * sampling rate q, one after the other (a noise schedule, a change of batch size). Segments need
 * σ >= 0 (σ = 0 releases without noise: ε = INFINITY), q in (0, 1] and steps >= 1; a history
 * needs at least one segment.
 *
 * Functions return a dp_acct_status (below) and, on failure, write a one-line message into
 * err (errlen bytes, NUL-terminated; err may be NULL). Out parameters are written on success only.
 * PRV and PLD allocate their grids on the heap and free them before returning.
 */
#ifndef DP_ACCOUNTANT_H
#define DP_ACCOUNTANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum dp_acct_status {
    DP_ACCT_OK = 0,
    DP_ACCT_EINVAL = 1,   /* an argument is outside its valid range */
    DP_ACCT_EBUDGET = 2,  /* target ε unreachable with σ <= DP_ACCT_MAX_NOISE_MULTIPLIER */
    DP_ACCT_ENUMERIC = 3, /* the RDP series broke down (Opacus raises there too) */
    DP_ACCT_ESIZE = 4,    /* a PRV or PLD grid would pass DP_ACCT_MAX_GRID (accountant.h) */
} dp_acct_status;

/* get_noise_multiplier's defaults: bisection stops once target - ε <= tolerance,
 * and the doubling search gives up past σ = 1e6 ("The privacy budget is too low."). */
#define DP_ACCT_EPSILON_TOLERANCE 0.01
#define DP_ACCT_MAX_NOISE_MULTIPLIER 1e6

typedef enum dp_acct_kind {
    DP_ACCT_RDP = 0,
    DP_ACCT_PRV = 1,
    DP_ACCT_PLD = 2,
} dp_acct_kind;

/* The default accountant: PRV, what Opacus's PrivacyEngine uses (docs/privacy.md says why). */
#define DP_ACCT_DEFAULT DP_ACCT_PRV
/* The valid names, for messages. */
#define DP_ACCT_NAMES "rdp, prv, pld"

/* PRV's defaults, Opacus's: eps_error 0.01; delta_error δ/1000 (0 in the options means that). */
#define DP_ACCT_PRV_EPS_ERROR 0.01
#define DP_ACCT_PRV_DELTA_ERROR_FRACTION 1e-3
/* PLD's default discretisation of the privacy loss, dp_accounting's. */
#define DP_ACCT_PLD_INTERVAL 1e-4
/* The largest grid PRV or PLD builds (points); past it they fail with DP_ACCT_ESIZE. */
#define DP_ACCT_MAX_GRID ((size_t)1 << 25)

/* One segment of a history: `steps` steps at noise multiplier σ and sampling rate q. */
typedef struct dp_acct_segment {
    double noise_multiplier;
    double sample_rate;
    int64_t steps;
} dp_acct_segment;

/* Accountant parameters; dp_acct_options_default fills the defaults. */
typedef struct dp_acct_options {
    double eps_error;   /* prv: error allowed in ε (> 0) */
    double delta_error; /* prv: error allowed in δ, in (0, δ); 0 = δ/1000 */
    double interval;    /* pld: value_discretization_interval (> 0) */
} dp_acct_options;

/* What an accountant reports besides ε; fields that do not apply are NAN. */
typedef struct dp_acct_detail {
    double order;            /* rdp: the optimal order */
    double epsilon_lower;    /* prv: lower end of the estimate */
    double epsilon_estimate; /* prv: the estimate (ε is its upper end) */
    double delta_error;      /* prv: the delta_error used */
    size_t grid_points;      /* prv: domain size; pld: largest PMF size; rdp: 0 */
} dp_acct_detail;

/* Fills the defaults: eps_error 0.01, delta_error 0 (δ/1000), interval 1e-4. */
void dp_acct_options_default(dp_acct_options *opt);

/* The accountant named `name` ("rdp", "prv", "pld") into *kind; EINVAL with a message naming the
 * valid ones otherwise (NULL is an error too). */
int dp_acct_parse(const char *name, dp_acct_kind *kind, char *err, size_t errlen);

/* Static name of an accountant ("rdp", "prv", "pld"); "unknown" otherwise. */
const char *dp_acct_name(dp_acct_kind kind);

/* Checks a history: n >= 1 segments, each σ finite and >= 0, q in (0, 1], steps >= 1. */
int dp_acct_check_history(const dp_acct_segment *history, size_t n, char *err, size_t errlen);

/* ε at delta after the history, by the accountant `kind` with options `opt` (NULL: defaults);
 * detail (may be NULL) gets what else the accountant reports. A σ = 0 segment gives INFINITY.
 * EINVAL on a bad argument, ENUMERIC where the method breaks down, ESIZE past DP_ACCT_MAX_GRID. */
int dp_acct_epsilon(dp_acct_kind kind, const dp_acct_segment *history, size_t n, double delta,
                    const dp_acct_options *opt, double *epsilon, dp_acct_detail *detail, char *err, size_t errlen);

/* Opacus's get_noise_multiplier with the accountant `kind`: σ doubles from 20 until
 * ε(σ) <= target, then bisection keeps ε(σ_high) <= target until target - ε <= tolerance; writes
 * σ_high and its ε (may be NULL). A σ whose grid would pass DP_ACCT_MAX_GRID during the bisection
 * counts as ε > target (it lies far below any σ the target allows). EBUDGET past σ = 1e6. */
int dp_acct_noise_multiplier(dp_acct_kind kind, double target_epsilon, double delta, double sample_rate, int64_t steps,
                             double epsilon_tolerance, const dp_acct_options *opt, double *noise_multiplier,
                             double *epsilon, char *err, size_t errlen);

/* PRV (Opacus's PRVAccountant.get_epsilon): writes the upper bound into *epsilon. */
int dp_acct_prv_epsilon(const dp_acct_segment *history, size_t n, double delta, double eps_error, double delta_error,
                        double *epsilon, dp_acct_detail *detail, char *err, size_t errlen);

/* PLD (dp_accounting's PLDAccountant.get_epsilon, pessimistic connect-the-dots). */
int dp_acct_pld_epsilon(const dp_acct_segment *history, size_t n, double delta, double interval, double *epsilon,
                        dp_acct_detail *detail, char *err, size_t errlen);

/* RDP over Opacus's default orders, the segments' RDP added (RDPAccountant with that history). */
int dp_acct_rdp_epsilon(const dp_acct_segment *history, size_t n, double delta, double *epsilon, dp_acct_detail *detail,
                        char *err, size_t errlen);

/* ε at noise multiplier σ for a noise search (ctx is the caller's); a dp_acct_status. */
typedef int (*dp_acct_epsilon_fn)(double sigma, void *ctx, double *epsilon, char *err, size_t errlen);

/* get_noise_multiplier's search around any accountant: σ doubles from 20 until fn's ε <= target,
 * then bisection keeps ε(σ_high) <= target until target - ε <= tolerance. fn's DP_ACCT_ESIZE
 * during the bisection counts as ε > target. Writes σ_high and ε (may be NULL); EBUDGET past
 * DP_ACCT_MAX_NOISE_MULTIPLIER (err not written then: the caller knows the setting). */
int dp_acct_search_noise(dp_acct_epsilon_fn fn, void *ctx, double target_epsilon, double epsilon_tolerance,
                         double *noise_multiplier, double *epsilon, char *err, size_t errlen);

/* Static name of a status ("ok", "invalid argument", ...); "unknown status" otherwise. */
const char *dp_acct_status_name(int status);

#endif /* DP_ACCOUNTANT_H */
