/* accountant_prv.c: the PRV accountant, a mirror of Opacus 1.6's PRVAccountant.
 *
 * Gopi, Lee, Wutschitz, "Numerical Composition of Differential Privacy" (NeurIPS 2021), as
 * opacus/accountants/prv.py and opacus/accountants/analysis/prv/{domain,prvs,compose}.py do it:
 *   1. a domain [-L, L] with L from the RDP accountant at delta_error/4 (whole history) and
 *      delta_error/(8·steps) (one step of each segment), plus 3 (domain.py, remark 5.6);
 *      mesh eps_error / sqrt(steps·log(12/delta_error)/2), aligned, an even number of points;
 *   2. each segment's privacy random variable (the Poisson-subsampled Gaussian's privacy loss,
 *      remove direction: prvs.py's closed-form CDF), truncated to the domain, discretised as CDF
 *      differences over cells, and shifted so its mean is the continuous one;
 *   3. each composed with itself `steps` times by FFT (irfft(rfft(pmf)^steps), rolled), the
 *      segments then convolved pairwise (compose.py);
 *   4. ε at δ read off the composed PMF's hockey-stick divergence; reported: the upper end,
 *      ε(δ - delta_error) + eps_error, as PRVAccountant.get_epsilon returns it.
 * Departures, each a rounding-level difference: the mean integral is QUADPACK's 21-point
 * Gauss-Kronrod rule, adaptive, to a tighter tolerance than scipy's quad default; CDF evaluations
 * stop once the CDF is exactly 1 (the rest of the cells have no mass); the divergence's second
 * running sum is kept scaled by e^t (Opacus's Σ p·e^-t overflows past t = -709).
 */
#include "accountant.h"
#include "accountant_impl.h"
#include "fft.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SQRT2 1.4142135623730951
/* scipy's quad(limit=500); the tolerances are tighter than its 1.49e-8 defaults. */
#define QUAD_LIMIT 500
#define QUAD_EPSABS 1e-13
#define QUAD_EPSREL 1e-12

/* The Poisson-subsampled Gaussian's PRV, truncated to [t_min, t_max]. */
typedef struct prv {
    double q, sigma;
    double log1mq; /* np.log(1 - q): the PRV is 0 below */
    double t_min, t_max;
    double cdf_min, mass; /* untruncated CDF at t_min, and the mass in [t_min, t_max] */
} prv;

/* Opacus's Domain: `size` points from t_min to t_max; shifts is what shift_right added. */
typedef struct domain {
    double t_min, t_max;
    size_t size;
    double shifts;
} domain;

/* A discrete PRV: pmf[size] on its domain. */
typedef struct dprv {
    double *pmf;
    domain dom;
} dprv;

static double prv_cdf(const prv *p, double t);
static double tprv_cdf(const prv *p, double t);
static double tprv_mean(const prv *p);
static double quad(const prv *p, double a, double b);
static double domain_dt(const domain *d);
static double domain_t(const domain *d, size_t i);
static int create_domain(double l, double mesh, domain *d, char *err, size_t errlen);
static int safe_domain_size(const dp_acct_segment *h, size_t n, double eps_error, double delta_error, double *l,
                            char *err, size_t errlen);
static int history_domain(const dp_acct_segment *h, size_t n, double eps_error, double delta_error, domain *dom,
                          char *err, size_t errlen);
static prv segment_prv(const dp_acct_segment *s, const domain *dom);
static int discretize(const prv *p, const domain *d, dprv *out, char *err, size_t errlen);
static int compose_fourier(dprv *d, int64_t steps);
static int compose_two(const dprv *left, const dprv *right, dprv *out);
static int compose_tree(dprv *list, size_t n);
static int compute_epsilon(const dprv *d, double delta, double delta_error, double eps_error, double out[3], char *err,
                           size_t errlen);

int dp_acct_prv_epsilon(const dp_acct_segment *history, size_t n, double delta, double eps_error, double delta_error,
                        double *epsilon, dp_acct_detail *detail, char *err, size_t errlen) {
    int rc = dp_acct_check_args(history, n, delta, err, errlen);
    if (rc != DP_ACCT_OK) return rc;
    if (!(isfinite(eps_error) && eps_error > 0.0))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "eps_error must be finite and > 0 (got %g)", eps_error);
    if (!(delta_error > 0.0 && delta_error < delta))
        return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "delta_error must be in (0, delta=%g) (got %g)", delta,
                            delta_error);
    for (size_t k = 0; k < n; k++)
        if (history[k].noise_multiplier == 0.0) { /* no noise: no privacy */
            *epsilon = INFINITY;
            if (detail != NULL) *detail = (dp_acct_detail){NAN, INFINITY, INFINITY, delta_error, 0};
            return DP_ACCT_OK;
        }

    domain dom = {0};
    if ((rc = history_domain(history, n, eps_error, delta_error, &dom, err, errlen)) != DP_ACCT_OK) return rc;

    dprv *parts = calloc(n, sizeof *parts);
    if (parts == NULL) return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC, "prv: out of memory");
    for (size_t k = 0; k < n && rc == DP_ACCT_OK; k++) {
        const dp_acct_segment *s = &history[k];
        prv p = segment_prv(s, &dom);
        if ((rc = discretize(&p, &dom, &parts[k], err, errlen)) != DP_ACCT_OK) break;
        if (compose_fourier(&parts[k], s->steps) != 0)
            rc = dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC, "prv: out of memory");
    }
    if (rc == DP_ACCT_OK && compose_tree(parts, n) != 0)
        rc = dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC, "prv: out of memory");
    double eps[3];
    if (rc == DP_ACCT_OK) rc = compute_epsilon(&parts[0], delta, delta_error, eps_error, eps, err, errlen);
    for (size_t k = 0; k < n; k++) free(parts[k].pmf);
    free(parts);
    if (rc != DP_ACCT_OK) return rc;
    *epsilon = eps[2];
    if (detail != NULL) *detail = (dp_acct_detail){NAN, eps[0], eps[1], delta_error, dom.size};
    return DP_ACCT_OK;
}

/* The domain _get_domain builds for a history: safe size L, mesh from eps_error and the steps. */
static int history_domain(const dp_acct_segment *h, size_t n, double eps_error, double delta_error, domain *dom,
                          char *err, size_t errlen) {
    double total = 0.0, l;
    for (size_t k = 0; k < n; k++) total += (double)h[k].steps;
    int rc = safe_domain_size(h, n, eps_error, delta_error, &l, err, errlen);
    if (rc != DP_ACCT_OK) return rc;
    double mesh = eps_error / sqrt(total * log(12.0 / delta_error) / 2.0);
    return create_domain(l, mesh, dom, err, errlen);
}

/* One segment's PRV truncated to the domain. */
static prv segment_prv(const dp_acct_segment *s, const domain *dom) {
    prv p = {s->sample_rate, s->noise_multiplier, log(1.0 - s->sample_rate), dom->t_min, dom->t_max, 0.0, 0.0};
    p.cdf_min = prv_cdf(&p, p.t_min);
    p.mass = prv_cdf(&p, p.t_max) - p.cdf_min;
    return p;
}

int dp_acct_prv_grid(const dp_acct_segment *history, size_t n, size_t k, double eps_error, double delta_error,
                     dp_acct_prv_grid_info *info, char *err, size_t errlen) {
    int rc = dp_acct_check_args(history, n, 0.5, err, errlen);
    if (rc != DP_ACCT_OK) return rc;
    if (k >= n) return dp_acct_fail(err, errlen, DP_ACCT_EINVAL, "segment %zu of %zu", k + 1, n);
    domain dom = {0};
    if ((rc = history_domain(history, n, eps_error, delta_error, &dom, err, errlen)) != DP_ACCT_OK) return rc;
    prv p = segment_prv(&history[k], &dom);
    dprv d = {0};
    if ((rc = discretize(&p, &dom, &d, err, errlen)) != DP_ACCT_OK) return rc;
    double mass = 0.0, mean = 0.0;
    for (size_t i = 0; i < d.dom.size; i++) {
        mass += d.pmf[i];
        mean += domain_t(&d.dom, i) * d.pmf[i];
    }
    free(d.pmf);
    *info = (dp_acct_prv_grid_info){dom.size, dom.t_min, domain_dt(&dom), tprv_mean(&p), mean, mass};
    return DP_ACCT_OK;
}

/* ---- the privacy random variable (prvs.py) ------------------------------------------------ */

/* PoissonSubsampledGaussianPRV.cdf: Gopi et al., proposition B4. */
static double prv_cdf(const prv *p, double t) {
    if (!(t > p->log1mq)) return 0.0;
    double q = p->q, s = p->sigma;
    double z = log((exp(t) + q - 1.0) / q);
    return -q * erfc((2.0 * z * (s * s) - 1.0) / (2.0 * SQRT2 * s)) / 2.0 -
           (1.0 - q) * erfc((2.0 * z * (s * s) + 1.0) / (2.0 * SQRT2 * s)) / 2.0 + 1.0;
}

/* TruncatedPrivacyRandomVariable.cdf */
static double tprv_cdf(const prv *p, double t) {
    if (t < p->t_min) return 0.0;
    if (t < p->t_max) return (prv_cdf(p, t) - p->cdf_min) / p->mass;
    return 1.0;
}

/* TruncatedPrivacyRandomVariable.mean: Σ over Opacus's breakpoints of t·cdf(t)| - ∫cdf. */
static double tprv_mean(const prv *p) {
    int lo = (int)log10(fabs(p->t_min)), hi = (int)log10(p->t_max); /* Python's int() */
    double points[23];
    points[0] = p->t_min;
    for (int k = 0; k < 10; k++) {
        points[1 + k] = -pow(10.0, lo + k * ((-5.0 - lo) / 9.0));
        points[12 + k] = pow(10.0, -5.0 + k * ((hi + 5.0) / 9.0));
    }
    points[11] = 0.0;
    points[22] = p->t_max;
    double mean = 0.0;
    for (int k = 0; k < 22; k++) {
        double a = points[k], b = points[k + 1];
        mean += b * tprv_cdf(p, b) - a * tprv_cdf(p, a) - quad(p, a, b);
    }
    return mean;
}

/* ---- adaptive Gauss-Kronrod (QUADPACK's qk21 and a bisection loop) ------------------------- */

static const double XGK[11] = {
    0.995657163025808080735527280689003, 0.973906528517171720077964012084452, 0.930157491355708226001207180059508,
    0.865063366688984510732096688423493, 0.780817726586416897063717578345042, 0.679409568299024406234327365114874,
    0.562757134668604683339000099272694, 0.433395394129247190799265943165784, 0.294392862701460198131126603103866,
    0.148874338981631210884826001129720, 0.000000000000000000000000000000000};
static const double WGK[11] = {
    0.011694638867371874278064396062192, 0.032558162307964727478818972459390, 0.054755896574351996031381300244580,
    0.075039674810919952767043140916190, 0.093125454583697605535065465083366, 0.109387158802297641899210590325805,
    0.123491976262065851077208703961880, 0.134709217311473325928054001771707, 0.142775938577060080797094273138717,
    0.147739104901338491374841515972068, 0.149445554002916905664936468389821};
static const double WG[5] = {0.066671344308688137593568809893332, 0.149451349150580593145776339657697,
                             0.219086362515982043995534934228163, 0.269266719309996355091226921569469,
                             0.295524224714752870173892994651338};

/* ∫_a^b tprv_cdf by the 21-point Kronrod rule; *abserr as QUADPACK estimates it. */
static double qk21(const prv *p, double a, double b, double *abserr) {
    double centr = 0.5 * (a + b), hlgth = 0.5 * (b - a);
    double fc = tprv_cdf(p, centr), fv1[10], fv2[10];
    double resg = 0.0, resk = WGK[10] * fc, resabs = fabs(resk);
    for (int j = 0; j < 10; j++) {
        double dx = hlgth * XGK[j];
        fv1[j] = tprv_cdf(p, centr - dx);
        fv2[j] = tprv_cdf(p, centr + dx);
        resk += WGK[j] * (fv1[j] + fv2[j]);
        resabs += WGK[j] * (fabs(fv1[j]) + fabs(fv2[j]));
        if (j % 2 == 1) resg += WG[j / 2] * (fv1[j] + fv2[j]);
    }
    double reskh = resk * 0.5, resasc = WGK[10] * fabs(fc - reskh);
    for (int j = 0; j < 10; j++) resasc += WGK[j] * (fabs(fv1[j] - reskh) + fabs(fv2[j] - reskh));
    resk *= hlgth;
    resabs *= fabs(hlgth);
    resasc *= fabs(hlgth);
    double err = fabs((resk - resg * hlgth));
    if (resasc != 0.0 && err != 0.0) err = resasc * fmin(1.0, pow(200.0 * err / resasc, 1.5));
    if (resabs > DBL_MIN / (50.0 * DBL_EPSILON)) err = fmax(DBL_EPSILON * 50.0 * resabs, err);
    *abserr = err;
    return resk;
}

/* ∫_a^b tprv_cdf: bisect the interval with the largest error until the total error is within
 * tolerance or QUAD_LIMIT intervals are in use (then the best estimate stands, as quad's). */
static double quad(const prv *p, double a, double b) {
    double lo[QUAD_LIMIT], hi[QUAD_LIMIT], val[QUAD_LIMIT], err[QUAD_LIMIT];
    int n = 1;
    lo[0] = a;
    hi[0] = b;
    val[0] = qk21(p, a, b, &err[0]);
    for (;;) {
        double total = 0.0, total_err = 0.0;
        int worst = 0;
        for (int i = 0; i < n; i++) {
            total += val[i];
            total_err += err[i];
            if (err[i] > err[worst]) worst = i;
        }
        if (total_err <= fmax(QUAD_EPSABS, QUAD_EPSREL * fabs(total)) || n == QUAD_LIMIT) return total;
        double mid = 0.5 * (lo[worst] + hi[worst]);
        if (!(mid > lo[worst] && mid < hi[worst])) return total; /* the interval cannot be split further */
        lo[n] = mid;
        hi[n] = hi[worst];
        hi[worst] = mid;
        val[worst] = qk21(p, lo[worst], hi[worst], &err[worst]);
        val[n] = qk21(p, lo[n], hi[n], &err[n]);
        n++;
    }
}

/* ---- the domain (domain.py) ---------------------------------------------------------------- */

static double domain_dt(const domain *d) { return (d->t_max - d->t_min) / (double)(d->size - 1); }

/* np.linspace(t_min, t_max, size)[i] */
static double domain_t(const domain *d, size_t i) {
    if (i == d->size - 1) return d->t_max;
    return (double)i * ((d->t_max - d->t_min) / (double)(d->size - 1)) + d->t_min;
}

/* Domain.create_aligned(-l, l, mesh), refusing more than DP_ACCT_MAX_GRID points. */
static int create_domain(double l, double mesh, domain *d, char *err, size_t errlen) {
    double t_min = floor(-l / mesh) * mesh, t_max = ceil(l / mesh) * mesh;
    double points = nearbyint((t_max - t_min) / mesh) + 1.0; /* np.round: half to even */
    if (!(points <= (double)DP_ACCT_MAX_GRID - 1.0))
        return dp_acct_fail(err, errlen, DP_ACCT_ESIZE,
                            "prv: the domain [-%g, %g] at mesh %g needs %.3g points (more than "
                            "%zu): raise eps_error, or use accountant 'pld' or 'rdp'",
                            l, l, mesh, points, DP_ACCT_MAX_GRID);
    size_t size = (size_t)points;
    if (size % 2 == 1) {
        size++;
        t_max += mesh;
    }
    *d = (domain){t_min, t_max, size, 0.0};
    if (!(fabs(domain_dt(d) - mesh) / mesh < 1e-8))
        return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC, "prv: domain of %zu points does not keep mesh %g", size,
                            mesh);
    return DP_ACCT_OK;
}

/* compute_safe_domain_size: L from RDP (the whole history at delta_error/4, one step of each
 * segment at delta_error/(8·steps)), at least eps_error, plus 3. */
static int safe_domain_size(const dp_acct_segment *h, size_t n, double eps_error, double delta_error, double *l,
                            char *err, size_t errlen) {
    double l_max, eps, total = 0.0;
    int rc = dp_acct_rdp_epsilon(h, n, delta_error / 4.0, &l_max, NULL, err, errlen);
    for (size_t k = 0; k < n; k++) total += (double)h[k].steps;
    for (size_t k = 0; k < n && rc == DP_ACCT_OK; k++) {
        dp_acct_segment one = {h[k].noise_multiplier, h[k].sample_rate, 1};
        rc = dp_acct_rdp_epsilon(&one, 1, delta_error / (8.0 * total), &eps, NULL, err, errlen);
        l_max = fmax(l_max, eps);
    }
    if (rc == DP_ACCT_OK) *l = fmax(l_max, eps_error) + 3.0;
    return rc;
}

/* ---- discretisation and composition (prvs.py discretize, compose.py) ----------------------- */

/* PMF of the truncated PRV on the domain's cells, shifted so its mean is the PRV's. */
static int discretize(const prv *p, const domain *d, dprv *out, char *err, size_t errlen) {
    /* Opacus: cdf(t + dt/2) - cdf(t - dt/2) at every point. */
    size_t n = d->size;
    double dt = domain_dt(d);
    double *pmf = malloc(n * sizeof *pmf);
    if (pmf == NULL) return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC, "prv: out of memory");
    double top = (1.0 - p->cdf_min) / p->mass; /* tprv_cdf where the PRV's CDF is exactly 1 */
    int saturated = 0;                         /* the CDF reached `top` at a right edge: no mass left before t_max */
    double mean_d = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = domain_t(d, i), right = t + dt / 2.0;
        if (saturated && right < p->t_max) {
            pmf[i] = 0.0;
            continue;
        }
        double cr = tprv_cdf(p, right);
        pmf[i] = cr - tprv_cdf(p, t - dt / 2.0);
        saturated = cr == top;
        mean_d += t * pmf[i];
    }
    double shift = tprv_mean(p) - mean_d;
    if (!(fabs(shift) < dt / 2.0)) {
        free(pmf);
        return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC,
                            "prv: discrete mean differs from the continuous one by %g (more than "
                            "half the mesh %g) at noise_multiplier=%g, sample_rate=%g",
                            shift, dt, p->sigma, p->q);
    }
    out->pmf = pmf;
    out->dom = (domain){d->t_min + shift, d->t_max + shift, d->size, d->shifts + shift};
    return DP_ACCT_OK;
}

/* _compose_fourier: irfft(rfft(pmf)^steps) rolled back onto the domain, shifted steps-1 times. */
static int compose_fourier(dprv *d, int64_t steps) {
    size_t n = d->dom.size;
    double *c = malloc(n * sizeof *c);
    if (c == NULL || dp_acct_fft_self_convolve(d->pmf, n, n, steps, c) != 0) {
        free(c);
        return -1;
    }
    size_t m = (size_t)((steps - 1) % (int64_t)n);
    if (steps % 2 == 0) m = (m + n / 2) % n;
    for (size_t i = 0; i < n; i++) /* np.roll(c, m) */
        d->pmf[(i + m) % n] = c[i];
    free(c);
    double dt = d->dom.shifts * (double)(steps - 1);
    d->dom = (domain){d->dom.t_min + dt, d->dom.t_max + dt, n, d->dom.shifts + dt};
    return 0;
}

/* _compose_two: convolve(left, right, mode="same") on left's domain shifted by right's shifts. */
static int compose_two(const dprv *left, const dprv *right, dprv *out) {
    size_t n = left->dom.size;
    double *full = malloc((2 * n - 1) * sizeof *full), *pmf = malloc(n * sizeof *pmf);
    if (full == NULL || pmf == NULL || dp_acct_fft_convolve(left->pmf, n, right->pmf, n, full) != 0) {
        free(full);
        free(pmf);
        return -1;
    }
    memcpy(pmf, full + (n - 1) / 2, n * sizeof *pmf); /* scipy's _centered */
    free(full);
    double dt = right->dom.shifts;
    out->pmf = pmf;
    out->dom = (domain){left->dom.t_min + dt, left->dom.t_max + dt, n, left->dom.shifts + dt};
    return 0;
}

/* _compose_convolution_tree: neighbours convolved pairwise until one is left, in list[0]; with
 * an odd count the last is carried, first in line, to the next round. Every pmf still in list
 * stays the caller's to free, on failure too. */
static int compose_tree(dprv *list, size_t n) {
    while (n > 1) {
        size_t odd = n % 2;
        dprv carried = {0};
        if (odd) {
            carried = list[n - 1];
            list[n - 1].pmf = NULL;
        }
        for (size_t i = 0; i + 1 < n; i += 2) {
            dprv r;
            if (compose_two(&list[i], &list[i + 1], &r) != 0) {
                if (odd) list[n - 1] = carried;
                return -1;
            }
            free(list[i].pmf);
            free(list[i + 1].pmf);
            list[i].pmf = list[i + 1].pmf = NULL;
            list[odd + i / 2] = r; /* a slot at or before i + 1: already consumed */
        }
        if (odd) list[0] = carried;
        n = odd + n / 2;
    }
    return 0;
}

/* ---- ε from the composed PMF (DiscretePRV.compute_epsilon) -------------------------------- */

/* out = {lower, estimate, upper}: ε at δ+delta_error minus eps_error, at δ, and at δ-delta_error
 * plus eps_error. δ(ε = t_i) = Σ_{j>=i} p_j (1 - e^{t_i - t_j}) = D1_i - D2_i with D2_i kept as
 * Σ_{j>=i} p_j e^{t_i - t_j} (Opacus's e^{t_i}·Σ p_j e^{-t_j}); ε at a target is found in the
 * first cell where -δ(t_i) >= -target, solving target = D1_i - e^{ε - t_i} D2_i there. */
static int compute_epsilon(const dprv *d, double delta, double delta_error, double eps_error, double out[3], char *err,
                           size_t errlen) {
    size_t n = d->dom.size;
    if ((double)LDBL_EPSILON * (double)n > delta - delta_error)
        return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC,
                            "prv: floating-point error dominates at delta=%g with %zu points: "
                            "raise delta or eps_error",
                            delta, n);
    double *d1 = malloc(n * sizeof *d1), *d2 = malloc(n * sizeof *d2);
    if (d1 == NULL || d2 == NULL) {
        free(d1);
        free(d2);
        return dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC, "prv: out of memory");
    }
    double s1 = 0.0, s2 = 0.0, decay = exp(-domain_dt(&d->dom));
    for (size_t i = n; i-- > 0;) {
        s1 += d->pmf[i];
        s2 = d->pmf[i] + (i + 1 < n ? decay * s2 : 0.0);
        d1[i] = s1;
        d2[i] = s2;
    }
    const double targets[3] = {delta + delta_error, delta, delta - delta_error};
    int rc = DP_ACCT_OK;
    for (int k = 0; k < 3 && rc == DP_ACCT_OK; k++) {
        size_t lo = 0, hi = n; /* np.searchsorted(ndelta, -target, side="left") */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (d2[mid] - d1[mid] < -targets[k])
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == 0 || lo == n)
            rc = dp_acct_fail(err, errlen, DP_ACCT_ENUMERIC,
                              "prv: cannot compute epsilon at delta=%g: the domain holds no cell "
                              "with that divergence",
                              targets[k]);
        else
            out[k] = log((d1[lo] - targets[k]) / d2[lo]) + domain_t(&d->dom, lo);
    }
    free(d1);
    free(d2);
    if (rc == DP_ACCT_OK) {
        out[0] -= eps_error;
        out[2] += eps_error;
    }
    return rc;
}
