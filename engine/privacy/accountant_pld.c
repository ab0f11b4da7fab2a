/* accountant_pld.c: the PLD accountant, a mirror of Google's dp_accounting 0.6 PLDAccountant.
 *
 * For each segment (σ, q, steps), as dp_accounting/pld/{privacy_loss_mechanism,
 * privacy_loss_distribution,pld_pmf,common}.py build PoissonSampledDpEvent(q, GaussianDpEvent(σ))
 * composed `steps` times, for the REMOVE and the ADD neighbour (one of them when q = 1):
 *   1. the privacy loss of the subsampled Gaussian between the x where the Gaussian's tails hold
 *      e^-50/2 (GaussianPrivacyLoss.privacy_loss_tail), its hockey-stick divergence δ(ε) on every
 *      multiple of the interval in between, and from it the pessimistic connect-the-dots PMF
 *      (Doroshenko et al. 2022, Algorithm 1; create_pmf_pessimistic_connect_dots_fixed_gap),
 *      what is beyond going to +infinity;
 *   2. composed with itself `steps` times by FFT inside Chernoff bounds that drop at most 1e-15
 *      of mass (common.self_convolve), and with the running composition by FFT convolution with
 *      tail truncation of 1e-15 (DensePLDPmf.compose);
 *   3. ε at δ from the running PMF (pld_pmf._get_epsilon_for_delta), the larger of REMOVE's and
 *      ADD's.
 * dp_accounting keeps PMFs of up to 1000 points sparse, which changes only where 1e-15 of mass
 * goes; that is mirrored too. Departures, each at rounding level: FFT lengths are 7-smooth rather
 * than scipy's next_fast_len, and the Chernoff bounds' moment sums use running products.
 */
#include "accountant.h"
#include "accountant_impl.h"
#include "fft.h"
#include "rdp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SQRT2 1.4142135623730951
#define LOG_SQRT_2PI 0.91893853320467274178
/* GaussianPrivacyLoss's log_mass_truncation_bound default: tails of e^-50/2 each side. */
#define LOG_MASS_TRUNCATION (-50.0)
/* PrivacyLossDistribution.compose's and self_compose's tail_mass_truncation default. */
#define TAIL_MASS_TRUNCATION 1e-15
/* pld_pmf._MAX_PMF_SPARSE_SIZE and _DELTA_DIFF_TOLERANCE. */
#define MAX_SPARSE 1000
#define DELTA_DIFF_TOLERANCE 1e-12

typedef enum adjacency { REMOVE, ADD } adjacency;

/* A PLD PMF: probs[i] is the mass at loss (lower + i)·interval; inf_mass at +infinity. */
typedef struct pmf {
    int64_t lower;
    double *probs;
    size_t n;
    double inf_mass;
    int sparse; /* dp_accounting's SparsePLDPmf */
} pmf;

/* GaussianPrivacyLoss(σ, sensitivity 1, sampling_prob q, adjacency). */
typedef struct gauss {
    double sigma, q;
    adjacency adj;
} gauss;

/* What one accounting run shares: the interval, the largest grid, and its failure message. */
typedef struct run {
    double interval;
    size_t largest;
    char *err;
    size_t errlen;
} run;

static double log_ndtr(double x);
static double ndtri_log(double log_p);
static double privacy_loss(const gauss *g, double x);
static double delta_for_epsilon(const gauss *g, double eps);
static int connect_dots(const gauss *g, run *r, pmf *out);
static int self_compose(pmf *p, int64_t count, run *r);
static int compose(pmf *acc, const pmf *other, run *r);
static void truncate_tails(pmf *p, double tail_mass);
static double epsilon_for_delta(const pmf *p, double interval, double delta);
static int grid_check(size_t n, run *r, const char *what);

int dp_acct_pld_epsilon(const dp_acct_segment *history, size_t n, double delta, double interval, double *epsilon,
                        dp_acct_detail *detail, char *err, size_t errlen) {
    int rc = dp_acct_check_args(history, n, delta, err, errlen);
    if (rc != DP_ACCT_OK) return rc;
    if (!(isfinite(interval) && interval > 0.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL,
                            "value_discretization_interval must be finite and > 0 (got %g)", interval);
    int symmetric = 1;
    for (size_t k = 0; k < n; k++) {
        if (history[k].noise_multiplier == 0.0) { /* a non-private event */
            *epsilon = INFINITY;
            if (detail != NULL) *detail = (dp_acct_detail){NAN, NAN, NAN, NAN, 0};
            return DP_ACCT_OK;
        }
        symmetric = symmetric && history[k].sample_rate == 1.0;
    }
    run r = {interval, 0, err, errlen};
    double eps = -INFINITY;
    for (int adj = REMOVE; adj <= (symmetric ? REMOVE : ADD) && rc == DP_ACCT_OK; adj++) {
        pmf acc = {0, malloc(sizeof(double)), 1, 0.0, 1}; /* the identity: loss 0 surely */
        if (acc.probs == NULL) return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC, "pld: out of memory");
        acc.probs[0] = 1.0;
        for (size_t k = 0; k < n && rc == DP_ACCT_OK; k++) {
            const dp_acct_segment *s = &history[k];
            /* with q = 1 ADD and REMOVE coincide and dp_accounting keeps REMOVE's */
            gauss g = {s->noise_multiplier, s->sample_rate, s->sample_rate == 1.0 ? REMOVE : (adjacency)adj};
            pmf one = {0};
            if ((rc = connect_dots(&g, &r, &one)) == DP_ACCT_OK &&
                (rc = self_compose(&one, s->steps, &r)) == DP_ACCT_OK)
                rc = compose(&acc, &one, &r);
            free(one.probs);
        }
        if (rc == DP_ACCT_OK) eps = fmax(eps, epsilon_for_delta(&acc, interval, delta));
        free(acc.probs);
    }
    if (rc != DP_ACCT_OK) return rc;
    *epsilon = eps;
    if (detail != NULL) *detail = (dp_acct_detail){NAN, NAN, NAN, NAN, r.largest};
    return DP_ACCT_OK;
}

/* ---- the Gaussian ------------------------------------------------------------------------- */

/* Φ(x), scipy's ndtr. */
static double ndtr(double x) { return 0.5 * erfc(-x / SQRT2); }

/* np.logaddexp */
static double log_add_exp(double a, double b) {
    if (a == b) return a + log(2.0);
    return fmax(a, b) + log1p(exp(-fabs(a - b)));
}

/* log Φ(x), accurate in both tails (scipy's log_ndtr). */
static double log_ndtr(double x) {
    if (x < 0.0) return log(0.5) + dp_acct_log_erfc(-x / SQRT2);
    return log1p(-0.5 * erfc(x / SQRT2));
}

/* Φ^-1(e^log_p) by Newton's method on log Φ (scipy's ndtri to rounding), for log_p < log(1/2). */
static double ndtri_log(double log_p) {
    double z = -sqrt(-2.0 * log_p);
    for (int it = 0; it < 100; it++) {
        double lf = log_ndtr(z);
        double slope = exp(-0.5 * z * z - LOG_SQRT_2PI - lf); /* d log Φ / dz = φ/Φ */
        double step = (lf - log_p) / slope;
        z -= step;
        if (fabs(step) <= 1e-15 * fabs(z)) break;
    }
    return z;
}

/* ---- the subsampled Gaussian's privacy loss (privacy_loss_mechanism.py) -------------------- */

/* common.log_a_times_exp_b_plus_c for a > 0: log(a·e^b + c); NAN where it is not positive. */
static double log_a_exp_b_plus_c(double a, double b, double c) {
    if (b == 0.0) return log(a + c);
    double d = b + log(a);
    if (c == 0.0) return d;
    if (c < 0.0) {
        double lc = log(-c);
        return lc >= d ? NAN : d + log1p(-exp(lc - d));
    }
    double lc = log(c), lo = fmin(d, lc), hi = fmax(d, lc);
    return hi + log1p(exp(lo - hi));
}

/* REMOVE's loss at x: log(1 - q + q·e^{l(x)}), l(x) = (-1/2 - x)/σ² the Gaussian's own. */
static double loss_remove(const gauss *g, double x) {
    double l = 1.0 * (-0.5 * 1.0 - x) / (g->sigma * g->sigma);
    return g->q == 1.0 ? l : log_a_exp_b_plus_c(g->q, l, 1.0 - g->q);
}

static double privacy_loss(const gauss *g, double x) {
    return g->adj == REMOVE ? loss_remove(g, x) : -loss_remove(g, -x);
}

/* math.isclose(a, b) with its defaults (rel_tol 1e-9). */
static int is_close(double a, double b) { return a == b || fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

/* The largest x whose privacy loss is at least eps (inverse_privacy_loss); NAN where none. */
static double inverse_loss(const gauss *g, double eps) {
    double s2 = g->sigma * g->sigma, q = g->q;
    if (g->adj == REMOVE) {
        if (q == 1.0) return -0.5 * 1.0 - eps * s2 / 1.0;
        if (is_close(eps, log(1.0 - q))) return INFINITY;
        if (eps <= log(1.0 - q)) return NAN;
        double l = log_a_exp_b_plus_c(1.0 / q, eps, 1.0 - 1.0 / q);
        return -0.5 * 1.0 - l * s2 / 1.0;
    }
    if (q == 1.0) return 1.0 + (-0.5 * 1.0 - eps * s2 / 1.0);
    if (is_close(eps, -log(1.0 - q))) return -INFINITY;
    if (eps > -log(1.0 - q)) return NAN;
    double l = -log_a_exp_b_plus_c(1.0 / q, -eps, 1.0 - 1.0 / q);
    return 1.0 + (-0.5 * 1.0 - l * s2 / 1.0);
}

/* The hockey-stick divergence at eps: mu_upper_cdf(x) - e^eps·mu_lower_cdf(x) at x = the
 * inverse loss, clipped to [0, 1] (AdditiveNoisePrivacyLoss.get_delta_for_epsilon). */
static double delta_for_epsilon(const gauss *g, double eps) {
    double q = g->q, s = g->sigma, d;
    if (g->adj == REMOVE && q < 1.0 && !(eps > log1p(-q))) {
        d = -expm1(eps);
    } else if (g->adj == ADD && q < 1.0 && !(eps < -log1p(-q))) {
        d = 0.0;
    } else {
        double x = inverse_loss(g, eps), upper, log_lower;
        if (g->adj == ADD) { /* mu_upper = N(0, σ²), mu_lower = (1-q)N(0, σ²) + qN(1, σ²) */
            upper = ndtr(x / s);
            log_lower = q == 1.0 ? log_ndtr((x - 1.0) / s)
                                 : log_add_exp(log1p(-q) + log_ndtr(x / s), log(q) + log_ndtr((x - 1.0) / s));
        } else { /* mu_upper = (1-q)N(0, σ²) + qN(-1, σ²), mu_lower = N(0, σ²) */
            upper = q == 1.0 ? ndtr((x + 1.0) / s) : (1.0 - q) * ndtr(x / s) + q * ndtr((x + 1.0) / s);
            log_lower = log_ndtr(x / s);
        }
        d = upper - exp(eps + log_lower);
    }
    return fmin(fmax(d, 0.0), 1.0);
}

/* ---- PMFs (pld_pmf.py, common.py) --------------------------------------------------------- */

static int grid_check(size_t n, run *r, const char *what) {
    if (n > DP_ACCT_MAX_GRID)
        return dp_acct_fail(r->err, r->errlen, DP_ACCT_ESIZE,
                            "pld: %s needs %zu points (more than %zu): raise "
                            "value_discretization_interval, or use accountant 'prv' or 'rdp'",
                            what, n, DP_ACCT_MAX_GRID);
    if (n > r->largest) r->largest = n;
    return DP_ACCT_OK;
}

/* The pessimistic connect-the-dots PMF of one step (_create_pld_pmf_from_monotone_privacy_loss
 * with use_connect_dots, then create_pmf_pessimistic_connect_dots_fixed_gap). */
static int connect_dots(const gauss *g, run *r, pmf *out) {
    double lower_x = g->sigma * ndtri_log(log(0.5) + LOG_MASS_TRUNCATION);
    double upper_x = -lower_x;
    if (g->adj == ADD)
        upper_x += 1.0;
    else
        lower_x -= 1.0;
    double d = r->interval;
    double hi = ceil(privacy_loss(g, lower_x) / d), lo = floor(privacy_loss(g, upper_x) / d);
    if (!(isfinite(hi) && isfinite(lo) && hi >= lo))
        return dp_acct_fail(r->err, r->errlen, DP_ACCT_ENUMERIC,
                            "pld: privacy loss bounds [%g, %g] at noise_multiplier=%g", lo * d, hi * d, g->sigma);
    if (hi - lo + 1.0 > (double)DP_ACCT_MAX_GRID)
        return grid_check(DP_ACCT_MAX_GRID + 1, r, "one step's privacy loss distribution");
    size_t n = (size_t)(hi - lo) + 1;
    int rc = grid_check(n, r, "one step's privacy loss distribution");
    double *deltas = malloc(n * sizeof *deltas), *probs = malloc(n * sizeof *probs);
    if (rc != DP_ACCT_OK || deltas == NULL || probs == NULL) {
        free(deltas);
        free(probs);
        return rc != DP_ACCT_OK ? rc : dp_acct_fail(r->err, r->errlen, DP_ACCT_ENUMERIC, "pld: out of memory");
    }
    int64_t k0 = (int64_t)lo;
    for (size_t i = 0; i < n; i++) deltas[i] = delta_for_epsilon(g, (double)(k0 + (int64_t)i) * d);
    for (size_t i = 1; i < n; i++) {
        if (deltas[i] - deltas[i - 1] > DELTA_DIFF_TOLERANCE) {
            free(deltas);
            free(probs);
            return dp_acct_fail(r->err, r->errlen, DP_ACCT_ENUMERIC,
                                "pld: hockey-stick divergence increases with epsilon at "
                                "noise_multiplier=%g, sample_rate=%g",
                                g->sigma, g->q);
        }
        deltas[i] = fmin(deltas[i], deltas[i - 1]); /* np.minimum.accumulate */
    }
    if (n == 1) {
        probs[0] = 1.0 - deltas[0];
    } else {
        double em1 = expm1(d), e = exp(d);
        probs[0] = 1.0 - deltas[0] + (deltas[1] - deltas[0]) / em1;
        for (size_t i = 1; i + 1 < n; i++)
            probs[i] = ((deltas[i + 1] - deltas[i]) - (deltas[i] - deltas[i - 1]) * e) / em1;
        probs[n - 1] = (deltas[n - 1] - deltas[n - 2]) / expm1(-d);
        for (size_t i = 0; i < n; i++) probs[i] = fmax(0.0, probs[i]);
    }
    *out = (pmf){k0, probs, n, deltas[n - 1], n <= MAX_SPARSE};
    free(deltas);
    return DP_ACCT_OK;
}

/* Convolves a with b into a new array (direct for sparse PMFs, FFT otherwise); NULL on OOM. */
static double *convolve(const pmf *a, const pmf *b, int direct) {
    size_t n = a->n + b->n - 1;
    double *out = malloc(n * sizeof *out);
    if (out == NULL) return NULL;
    if (direct) {
        memset(out, 0, n * sizeof *out);
        for (size_t i = 0; i < a->n; i++)
            for (size_t j = 0; j < b->n; j++) out[i + j] += a->probs[i] * b->probs[j];
    } else if (dp_acct_fft_convolve(a->probs, a->n, b->probs, b->n, out) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* compose_pmfs(acc, other, 1e-15) into acc: sparse when both are and the product of their sizes
 * is at most 1000, dense (FFT) otherwise; infinity masses combine as independent events. */
static int compose(pmf *acc, const pmf *other, run *r) {
    int sparse = acc->sparse && other->sparse && acc->n * other->n <= MAX_SPARSE;
    int rc = grid_check(acc->n + other->n - 1, r, "the composed privacy loss distribution");
    if (rc != DP_ACCT_OK) return rc;
    double *probs = convolve(acc, other, sparse);
    if (probs == NULL) return dp_acct_fail(r->err, r->errlen, DP_ACCT_ENUMERIC, "pld: out of memory");
    double a = acc->inf_mass, b = other->inf_mass;
    free(acc->probs);
    *acc = (pmf){acc->lower + other->lower, probs, acc->n + other->n - 1, a + b - a * b, sparse};
    truncate_tails(acc, TAIL_MASS_TRUNCATION);
    return DP_ACCT_OK;
}

/* compute_self_convolve_bounds: Chernoff bounds [lo, hi] on the index sum outside which at most
 * tail_mass of `count`-fold self-convolution lies. */
static void self_convolve_bounds(const pmf *p, int64_t count, double tail_mass, int64_t *lo, int64_t *hi) {
    size_t n = p->n;
    *hi = (int64_t)(n - 1) * count;
    *lo = 0;
    for (int k = -20; k <= 20; k++) {
        if (k == 0) continue;
        double order = (double)k / (double)n;
        /* logsumexp(i·order, b=probs) = max_a + log Σ probs_i e^{(i - i_max)·order} */
        double ratio = exp(order > 0.0 ? -order : order), w = 1.0, s = 0.0;
        for (size_t j = 0; j < n; j++, w *= ratio) s += p->probs[order > 0.0 ? n - 1 - j : j] * w;
        double log_mgf = log(s) + (order > 0.0 ? (double)(n - 1) * order : 0.0);
        double bound = ((double)count * log_mgf + log(2.0 / tail_mass)) / order;
        if (!isfinite(bound)) continue;
        if (order > 0.0 && ceil(bound) < (double)*hi) *hi = (int64_t)ceil(bound);
        if (order < 0.0 && floor(bound) > (double)*lo) *lo = (int64_t)floor(bound);
    }
}

/* PLDPmf.self_compose(count, 1e-15) in place. */
static int self_compose(pmf *p, int64_t count, run *r) {
    if (p->sparse && count == 1) return DP_ACCT_OK; /* SparsePLDPmf returns itself */
    if (p->sparse && (double)count * log((double)p->n) <= log((double)MAX_SPARSE)) {
        pmf base = *p, acc = {p->lower, malloc(p->n * sizeof(double)), p->n, p->inf_mass, 1};
        if (acc.probs == NULL) return dp_acct_fail(r->err, r->errlen, DP_ACCT_ENUMERIC, "pld: out of memory");
        memcpy(acc.probs, p->probs, p->n * sizeof(double));
        for (int64_t i = 2; i <= count; i++) { /* truncation on the last composition only */
            double *probs = convolve(&acc, &base, 1);
            if (probs == NULL) {
                free(acc.probs);
                return dp_acct_fail(r->err, r->errlen, DP_ACCT_ENUMERIC, "pld: out of memory");
            }
            double a = acc.inf_mass, b = base.inf_mass;
            free(acc.probs);
            acc = (pmf){acc.lower + base.lower, probs, acc.n + base.n - 1, a + b - a * b, 1};
            if (i == count) truncate_tails(&acc, TAIL_MASS_TRUNCATION);
        }
        free(p->probs);
        *p = acc;
        return DP_ACCT_OK;
    }
    int64_t lo, hi;
    self_convolve_bounds(p, count, TAIL_MASS_TRUNCATION, &lo, &hi);
    size_t out_len = (size_t)(hi - lo + 1);
    size_t len = dp_acct_fft_fast_len(out_len > p->n ? out_len : p->n);
    int rc = grid_check(len, r, "the self-composed privacy loss distribution");
    if (rc != DP_ACCT_OK) return rc;
    double *circ = malloc(len * sizeof *circ), *probs = malloc(out_len * sizeof *probs);
    if (circ == NULL || probs == NULL || dp_acct_fft_self_convolve(p->probs, p->n, len, count, circ)) {
        free(circ);
        free(probs);
        return dp_acct_fail(r->err, r->errlen, DP_ACCT_ENUMERIC, "pld: out of memory");
    }
    for (size_t i = 0; i < out_len; i++) /* np.roll(circ, -lo)[:out_len] */
        probs[i] = circ[((size_t)lo + i) % len];
    free(circ);
    free(p->probs);
    double inf = TAIL_MASS_TRUNCATION - expm1((double)count * log1p(-p->inf_mass));
    *p = (pmf){p->lower * count + lo, probs, out_len, inf, 0};
    return DP_ACCT_OK;
}

/* _truncate_tails, pessimistic: the longest prefix and suffix each holding at most tail_mass/2
 * go, the prefix's mass onto the first point kept, the suffix's to +infinity. */
static void truncate_tails(pmf *p, double tail_mass) {
    size_t n = p->n, left = n, right_len = n;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        if ((s += p->probs[i]) > tail_mass / 2.0) {
            left = i;
            break;
        }
    s = 0.0;
    for (size_t i = 0; i < n; i++)
        if ((s += p->probs[n - 1 - i]) > tail_mass / 2.0) {
            right_len = i;
            break;
        }
    size_t right = n - right_len;
    if (right < left + 1) right = left + 1;
    if (right > n) /* no point holds more than tail_mass/2: keep everything */
        return;
    double left_mass = 0.0, right_mass = 0.0;
    for (size_t i = 0; i < left; i++) left_mass += p->probs[i];
    for (size_t i = right; i < n; i++) right_mass += p->probs[i];
    memmove(p->probs, p->probs + left, (right - left) * sizeof *p->probs);
    p->probs[0] += left_mass;
    p->lower += (int64_t)left;
    p->n = right - left;
    p->inf_mass += right_mass;
}

/* _get_epsilon_for_delta: the smallest ε >= 0 whose divergence is at most delta, walking losses
 * from the largest down (dense PMFs step the loss by -interval, as itertools.count does). */
static double epsilon_for_delta(const pmf *p, double interval, double delta) {
    if (p->inf_mass > delta) return INFINITY;
    double mass_upper = p->inf_mass, mass_lower = 0.0;
    double loss = (double)(p->lower + (int64_t)p->n - 1) * interval;
    for (size_t j = p->n; j-- > 0;) {
        if (p->sparse) loss = (double)(p->lower + (int64_t)j) * interval;
        double prob = p->probs[j];
        if (mass_upper > delta && mass_lower > 0.0 && log((mass_upper - delta) / mass_lower) >= loss) break;
        mass_upper += prob;
        mass_lower += exp(-loss) * prob;
        if (mass_upper >= delta && mass_lower == 0.0) return fmax(0.0, loss);
        if (!p->sparse) loss += -interval;
    }
    if (mass_upper <= mass_lower + delta) return 0.0;
    return log((mass_upper - delta) / mass_lower);
}
