/* test_accountants.c: the PRV and PLD accountants (and RDP over histories) against Opacus 1.6
 * and dp_accounting 0.6, the exact Gaussian mechanism, published values and bad inputs.
 *
 * Fixture (tests/fixtures/privacy/accountants.csv, made once by gen_accountants.py):
 *   epsilon rows    rdp, PRV (lower, estimate, upper) and PLD ε for a history at δ; dpprof's PRV
 *                   lower, estimate and upper are each held within PRV_REL_TOL of Opacus's (the
 *                   measured agreement is 5.1e-6 relative: a mesh sqrt(2) finer moves ε by up to
 *                   5.7e-4, far outside), its PLD within 0.5% of dp_accounting's, its RDP within
 *                   1e-6 relative, and PLD <= PRV <= RDP
 *   many_steps rows the same outside the grid (large σ, 10^6 steps), agreement only
 *   noise_* rows    σ from get_noise_multiplier's search (PRV: Opacus's; PLD: the same loop
 *                   around dp_accounting) and ε at it
 * And (tests/fixtures/privacy/prv_grid.csv, made once by gen_prv_grid.py) for each such history
 * the grid Opacus builds: its point count exactly, its first point and mesh, and each segment's
 * truncated PRV mean, which the discretised PMF must keep.
 * Prints the largest differences; exits non-zero on any failure.
 */
#include "accountant.h"
#include "accountant_impl.h"
#include "rdp.h"

#include "privacy_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRV_REL_TOL 1e-5       /* lower, estimate and upper against Opacus's; measured worst 5.1e-6 (lower) */
#define PRV_MEAN_TOL 1e-5      /* |a segment's truncated PRV mean - Opacus's|, in meshes; measured 7.4e-6 */
#define PRV_MEAN_KEPT_TOL 1e-9 /* |discrete - continuous mean|, in meshes; measured 2.5e-10 */
#define PLD_REL_TOL 0.005
#define RDP_REL_TOL 1e-6
#define MAX_SEGMENTS 8

/* "σ:q:steps;σ:q:steps" into h; returns the segment count (0 on a malformed field). */
static size_t parse_history(char *text, dp_acct_segment *h) {
    char *segs[MAX_SEGMENTS];
    int n = split(text, ';', segs, MAX_SEGMENTS);
    for (int k = 0; k < n; k++) {
        char *f[3];
        if (split(segs[k], ':', f, 3) != 3) return 0;
        h[k] = (dp_acct_segment){strtod(f[0], NULL), strtod(f[1], NULL), strtoll(f[2], NULL, 10)};
    }
    return (size_t)n;
}

/* |a - b| / |b|, or |a - b| where b is 0. */
static double rel_diff(double a, double b) { return b == 0.0 ? fabs(a - b) : fabs(a - b) / fabs(b); }

static double eps_of(dp_acct_kind kind, const dp_acct_segment *h, size_t n, double delta) {
    char err[256];
    double eps = NAN;
    if (dp_acct_epsilon(kind, h, n, delta, NULL, &eps, NULL, err, sizeof err) != DP_ACCT_OK) {
        printf("  %s failed: %s\n", dp_acct_name(kind), err);
        return NAN;
    }
    return eps;
}

static void test_against_references(void) {
    char line[512], what[1024];
    FILE *f = open_fixture("accountants.csv");
    if (f == NULL) {
        n_failed++;
        return;
    }
    double max_prv = 0, max_pld = 0, max_rdp = 0, max_sigma = 0;
    int n_eps = 0, n_noise = 0, ref_order_ok = 1;
    /* the header: kind,history,delta,target_epsilon,rdp,prv_lower,prv_estimate,... */
    fixture_line(f, line, sizeof line);
    while (fixture_line(f, line, sizeof line)) {
        char *c[9], hist_text[256];
        if (split(line, ',', c, 9) != 9) {
            check(0, "accountants.csv: row without 9 fields");
            continue;
        }
        snprintf(hist_text, sizeof hist_text, "%s", c[1]);
        dp_acct_segment h[MAX_SEGMENTS];
        size_t n = parse_history(c[1], h);
        double delta = strtod(c[2], NULL), target = strtod(c[3], NULL);
        int grid_row = strcmp(c[0], "epsilon") == 0; /* many_steps rows: agreement only */
        if (grid_row || strcmp(c[0], "many_steps") == 0) {
            double want_rdp = strtod(c[4], NULL), want_prv = strtod(c[7], NULL);
            double want_pld = strtod(c[8], NULL);
            double rdp = eps_of(DP_ACCT_RDP, h, n, delta), prv = NAN;
            double pld = eps_of(DP_ACCT_PLD, h, n, delta);
            dp_acct_detail d = {0};
            char err[256];
            if (dp_acct_epsilon(DP_ACCT_PRV, h, n, delta, NULL, &prv, &d, err, sizeof err) != DP_ACCT_OK)
                printf("  prv failed: %s\n", err);
            double want_lower = strtod(c[5], NULL), want_estimate = strtod(c[6], NULL);
            double d_up = rel_diff(prv, want_prv), d_lo = rel_diff(d.epsilon_lower, want_lower);
            double d_est = rel_diff(d.epsilon_estimate, want_estimate);
            double d_prv = isnan(d_up) || isnan(d_lo) || isnan(d_est) ? INFINITY : fmax(d_up, fmax(d_lo, d_est));
            double d_pld = fabs(pld - want_pld) / want_pld;
            double d_rdp = fabs(rdp - want_rdp) / want_rdp;
            max_prv = fmax(max_prv, d_prv);
            max_pld = fmax(max_pld, d_pld);
            max_rdp = fmax(max_rdp, d_rdp);
            n_eps++;
            snprintf(what, sizeof what,
                     "history %s: rdp %.10g (opacus %.10g), prv lower/estimate/upper %.10g %.10g %.10g "
                     "(opacus %.10g %.10g %.10g), pld %.10g (dp_accounting %.10g)",
                     hist_text, rdp, want_rdp, d.epsilon_lower, d.epsilon_estimate, prv, want_lower, want_estimate,
                     want_prv, pld, want_pld);
            check(d_prv <= PRV_REL_TOL && d_pld <= PLD_REL_TOL && d_rdp <= RDP_REL_TOL, what);
            snprintf(what, sizeof what, "history %s: PLD %.6g <= PRV %.6g <= RDP %.6g", hist_text, pld, prv, rdp);
            if (grid_row) {
                check(pld <= prv && prv <= rdp, what);
                ref_order_ok = ref_order_ok && want_pld <= want_prv && want_prv <= want_rdp;
            } else if (!(pld <= prv && prv <= rdp)) {
                int ref = want_pld <= want_prv && want_prv <= want_rdp;
                printf("outside the grid: not %s (%s in the references)\n", what, ref ? "but it holds" : "nor");
            }
        } else if (strcmp(c[0], "noise_prv") == 0 || strcmp(c[0], "noise_pld") == 0) {
            dp_acct_kind kind = strcmp(c[0], "noise_prv") == 0 ? DP_ACCT_PRV : DP_ACCT_PLD;
            double want_eps = strtod(kind == DP_ACCT_PRV ? c[7] : c[8], NULL), sigma, eps;
            char err[256];
            int rc = dp_acct_noise_multiplier(kind, target, delta, h[0].sample_rate, h[0].steps,
                                              DP_ACCT_EPSILON_TOLERANCE, NULL, &sigma, &eps, err, sizeof err);
            double ds = rc == DP_ACCT_OK ? fabs(sigma - h[0].noise_multiplier) : INFINITY;
            max_sigma = fmax(max_sigma, ds / h[0].noise_multiplier);
            n_noise++;
            snprintf(what, sizeof what,
                     "%s target %g q=%g steps=%lld delta=%g: sigma %.12g eps %.10g (rc %d %s), "
                     "reference sigma %.12g eps %.10g",
                     c[0], target, h[0].sample_rate, (long long)h[0].steps, delta, sigma, eps, rc, rc ? err : "",
                     h[0].noise_multiplier, want_eps);
            /* the same bisection on the same ε: the same dyadic σ */
            check(ds <= 1e-12 * h[0].noise_multiplier && eps <= target && target - eps <= DP_ACCT_EPSILON_TOLERANCE,
                  what);
        } else {
            check(0, "accountants.csv: unknown row kind");
        }
    }
    fclose(f);
    check(n_eps >= 40 && n_noise >= 10, "accountants.csv has its epsilon and noise rows");
    check(ref_order_ok, "the references themselves order PLD <= PRV <= RDP on every row");
    printf("epsilon rows: %d; max PRV (lower, estimate, upper) rel diff %.3e (tol %g), max PLD rel diff %.3e "
           "(tol %g), max RDP rel diff %.3e\n",
           n_eps, max_prv, PRV_REL_TOL, max_pld, PLD_REL_TOL, max_rdp);
    printf("noise rows: %d; max sigma rel diff %.3e\n", n_noise, max_sigma);
}

/* The PRV grid against Opacus's (prv_grid.csv): the point count exactly, the first point and mesh
 * to rounding; each segment's truncated PRV mean against Opacus's, and the discretised PMF (on its
 * shifted domain) keeping that mean with all of its mass. */
static void test_prv_grid(void) {
    char line[256], what[1024];
    FILE *f = open_fixture("prv_grid.csv");
    if (f == NULL) {
        n_failed++;
        return;
    }
    int rows = 0;
    double max_grid = 0, max_mean = 0, max_kept = 0;
    /* the header: history,delta,grid_points,t_min,mesh,segment_means */
    fixture_line(f, line, sizeof line);
    while (fixture_line(f, line, sizeof line)) {
        char *c[6], *means[MAX_SEGMENTS], hist_text[256];
        if (split(line, ',', c, 6) != 6) {
            check(0, "prv_grid.csv: row without 6 fields");
            continue;
        }
        snprintf(hist_text, sizeof hist_text, "%s", c[0]);
        dp_acct_segment h[MAX_SEGMENTS];
        size_t n = parse_history(c[0], h);
        double delta = strtod(c[1], NULL), t_min = strtod(c[3], NULL), mesh = strtod(c[4], NULL);
        long long points = strtoll(c[2], NULL, 10);
        int n_means = split(c[5], ';', means, MAX_SEGMENTS);
        check(n > 0 && (size_t)n_means == n, "prv_grid.csv: one mean per segment");
        rows++;
        for (size_t k = 0; k < n && (size_t)n_means == n; k++) {
            dp_acct_prv_grid_info g = {0};
            char err[256];
            int rc = dp_acct_prv_grid(h, n, k, DP_ACCT_PRV_EPS_ERROR, delta / 1000.0, &g, err, sizeof err);
            double want_mean = strtod(means[k], NULL);
            double d_grid = fmax(rel_diff(g.t_min, t_min), rel_diff(g.mesh, mesh));
            double d_mean = fabs(g.continuous_mean - want_mean) / g.mesh;
            double d_kept = fabs(g.discrete_mean - g.continuous_mean) / g.mesh;
            if (rc == DP_ACCT_OK) {
                max_grid = fmax(max_grid, d_grid);
                max_mean = fmax(max_mean, d_mean);
                max_kept = fmax(max_kept, d_kept);
            }
            snprintf(what, sizeof what,
                     "prv grid %s segment %zu (rc %d %s): %zu points (opacus %lld), t_min %.17g (%.17g), "
                     "mesh %.17g (%.17g)",
                     hist_text, k + 1, rc, rc ? err : "", g.grid_points, points, g.t_min, t_min, g.mesh, mesh);
            check(rc == DP_ACCT_OK && (long long)g.grid_points == points && rel_diff(g.t_min, t_min) <= 1e-12 &&
                      rel_diff(g.mesh, mesh) <= 1e-12,
                  what);
            snprintf(what, sizeof what,
                     "prv mean %s segment %zu: continuous %.17g (opacus %.17g), discrete %.17g, mass %.17g", hist_text,
                     k + 1, g.continuous_mean, want_mean, g.discrete_mean, g.discrete_mass);
            check(rc == DP_ACCT_OK && d_mean <= PRV_MEAN_TOL && d_kept <= PRV_MEAN_KEPT_TOL &&
                      fabs(g.discrete_mass - 1.0) <= 1e-10,
                  what);
        }
    }
    fclose(f);
    check(rows >= 40, "prv_grid.csv has a row per history of accountants.csv");
    printf("prv grid rows: %d; max t_min/mesh rel diff %.3e, max |mean - opacus| / mesh %.3e (tol %g), "
           "max |discrete - continuous mean| / mesh %.3e (tol %g)\n",
           rows, max_grid, max_mean, PRV_MEAN_TOL, max_kept, PRV_MEAN_KEPT_TOL);
}

/* δ(ε) of the Gaussian mechanism with sensitivity 1 and noise μ⁻¹ (Balle & Wang 2018). */
static double gaussian_delta(double mu, double eps) {
    double a = -eps / mu + mu / 2.0, b = -eps / mu - mu / 2.0;
    return 0.5 * erfc(-a / sqrt(2.0)) - exp(eps) * 0.5 * erfc(-b / sqrt(2.0));
}

/* q = 1: `steps` compositions are one Gaussian mechanism with μ = sqrt(steps)/σ; its exact ε
 * solves δ(ε) = delta. PLD (pessimistic) and PRV (upper) must lie above it and close. */
static void test_exact_gaussian(void) {
    const double cases[][2] = {{1.0, 1}, {2.0, 100}, {5.0, 1000}, {0.8, 10}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double sigma = cases[k][0], delta = 1e-5;
        int64_t steps = (int64_t)cases[k][1];
        double mu = sqrt((double)steps) / sigma, lo = 0.0, hi = 100.0;
        for (int it = 0; it < 200; it++) {
            double mid = 0.5 * (lo + hi);
            if (gaussian_delta(mu, mid) > delta)
                lo = mid;
            else
                hi = mid;
        }
        dp_acct_segment h = {sigma, 1.0, steps};
        double pld = eps_of(DP_ACCT_PLD, &h, 1, delta), prv = eps_of(DP_ACCT_PRV, &h, 1, delta);
        char what[256];
        snprintf(what, sizeof what, "Gaussian sigma=%g steps=%lld: exact %.8f, pld %.8f, prv %.8f", sigma,
                 (long long)steps, hi, pld, prv);
        check(pld >= hi - 1e-9 && pld - hi < 2e-3 && prv >= hi && prv - hi < 0.021, what);
        printf("%s\n", what);
    }
}

static void test_published(void) {
    /* The figures (Opacus 1.6 and dp_accounting 0.6), q = 0.01, σ = 1, 1000 steps. */
    dp_acct_segment h = {1.0, 0.01, 1000}, h3 = {1.0, 0.001, 1000};
    double rdp = eps_of(DP_ACCT_RDP, &h, 1, 1e-5), prv = eps_of(DP_ACCT_PRV, &h, 1, 1e-5);
    double pld = eps_of(DP_ACCT_PLD, &h, 1, 1e-5), prv3 = eps_of(DP_ACCT_PRV, &h3, 1, 1e-5);
    printf("published: rdp %.4f (2.10), prv %.4f (1.84), pld %.4f (1.83); q=0.001 prv %.4f "
           "(0.16)\n",
           rdp, prv, pld, prv3);
    check(fabs(rdp - 2.10) < 0.005, "published RDP 2.10");
    check(fabs(prv - 1.84) < 0.005, "published PRV 1.84");
    check(fabs(pld - 1.83) < 0.005, "published PLD 1.83");
    check(fabs(prv3 - 0.16) < 0.005, "published PRV 0.16 at q = 0.001");
}

/* A history equals the composition of its parts: split segments and reordered ones. */
static void test_heterogeneous(void) {
    const dp_acct_kind kinds[] = {DP_ACCT_RDP, DP_ACCT_PRV, DP_ACCT_PLD};
    dp_acct_segment whole = {1.0, 0.01, 1000};
    dp_acct_segment split3[3] = {{1.0, 0.01, 250}, {1.0, 0.01, 700}, {1.0, 0.01, 50}};
    dp_acct_segment ab[2] = {{0.8, 0.01, 300}, {1.5, 0.05, 200}};
    dp_acct_segment ba[2] = {{1.5, 0.05, 200}, {0.8, 0.01, 300}};
    for (size_t k = 0; k < 3; k++) {
        char what[256];
        double e_whole = eps_of(kinds[k], &whole, 1, 1e-5);
        double e_split = eps_of(kinds[k], split3, 3, 1e-5);
        double e_ab = eps_of(kinds[k], ab, 2, 1e-5), e_ba = eps_of(kinds[k], ba, 2, 1e-5);
        double e_a = eps_of(kinds[k], &ab[0], 1, 1e-5), e_b = eps_of(kinds[k], &ab[1], 1, 1e-5);
        snprintf(what, sizeof what, "%s: 250+700+50 steps %.10g = 1000 steps %.10g", dp_acct_name(kinds[k]), e_split,
                 e_whole);
        check(fabs(e_split - e_whole) <= 1e-6, what);
        snprintf(what, sizeof what, "%s: history (a, b) %.10g = (b, a) %.10g", dp_acct_name(kinds[k]), e_ab, e_ba);
        check(fabs(e_ab - e_ba) <= 1e-6, what);
        snprintf(what, sizeof what, "%s: (a, b) %.6g exceeds each part (%.6g, %.6g)", dp_acct_name(kinds[k]), e_ab, e_a,
                 e_b);
        check(e_ab > e_a && e_ab > e_b, what);
    }
    /* A noise schedule is neither its smallest nor its largest σ throughout. */
    dp_acct_segment sched[2] = {{1.0, 0.01, 500}, {2.0, 0.01, 500}};
    dp_acct_segment lo = {1.0, 0.01, 1000}, hi = {2.0, 0.01, 1000};
    double e_s = eps_of(DP_ACCT_PLD, sched, 2, 1e-5);
    check(e_s < eps_of(DP_ACCT_PLD, &lo, 1, 1e-5) && e_s > eps_of(DP_ACCT_PLD, &hi, 1, 1e-5),
          "pld: a schedule lies between its two noise levels");
}

static void test_details_and_options(void) {
    char err[256];
    dp_acct_segment h = {1.0, 0.01, 1000};
    double eps, eps2;
    dp_acct_detail d;
    int rc = dp_acct_epsilon(DP_ACCT_PRV, &h, 1, 1e-5, NULL, &eps, &d, err, sizeof err);
    check(rc == DP_ACCT_OK && d.epsilon_lower < d.epsilon_estimate && d.epsilon_estimate < eps &&
              fabs(eps - d.epsilon_estimate - 0.01) < 0.001 && d.delta_error == 1e-8 && d.grid_points > 0,
          "prv detail: lower < estimate < upper = estimate + about eps_error, delta_error δ/1000");
    dp_acct_options opt;
    dp_acct_options_default(&opt);
    opt.eps_error = 0.001;
    rc = dp_acct_epsilon(DP_ACCT_PRV, &h, 1, 1e-5, &opt, &eps2, &d, err, sizeof err);
    check(rc == DP_ACCT_OK && eps2 < eps && eps2 > 1.82, "prv: a smaller eps_error tightens");
    opt.eps_error = DP_ACCT_PRV_EPS_ERROR;
    opt.interval = 1e-3;
    rc = dp_acct_epsilon(DP_ACCT_PLD, &h, 1, 1e-5, &opt, &eps2, &d, err, sizeof err);
    double fine = eps_of(DP_ACCT_PLD, &h, 1, 1e-5);
    check(rc == DP_ACCT_OK && eps2 >= fine - 1e-9 && eps2 - fine < 0.05,
          "pld: a coarser interval is pessimistic and close");
    rc = dp_acct_epsilon(DP_ACCT_RDP, &h, 1, 1e-5, NULL, &eps, &d, err, sizeof err);
    double order;
    dp_acct_rdp_sampled_epsilon(0.01, 1.0, 1000, 1e-5, &eps2, &order, NULL, 0);
    check(rc == DP_ACCT_OK && eps == eps2 && d.order == order,
          "rdp over a one-segment history is dp_acct_rdp_sampled_epsilon");

    /* σ = 0 anywhere: no privacy, for every accountant. */
    dp_acct_segment leak[2] = {{1.0, 0.01, 10}, {0.0, 0.01, 1}};
    for (int k = DP_ACCT_RDP; k <= DP_ACCT_PLD; k++)
        check(isinf(eps_of((dp_acct_kind)k, leak, 2, 1e-5)), "sigma = 0 gives infinite epsilon");

    /* Names. */
    dp_acct_kind kind;
    check(dp_acct_parse("pld", &kind, err, sizeof err) == DP_ACCT_OK && kind == DP_ACCT_PLD &&
              strcmp(dp_acct_name(DP_ACCT_PRV), "prv") == 0 && DP_ACCT_DEFAULT == DP_ACCT_PRV,
          "accountant names");
}

static void expect(int rc, int want, const char *err, const char *needle, const char *what) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s: rc %d (want %d), message \"%s\" should contain \"%s\"", what, rc, want, err, needle);
    check(rc == want && strstr(err, needle) != NULL, msg);
}

static void test_errors(void) {
    char err[256];
    double eps = -1.0, sigma = -1.0;
    for (int k = DP_ACCT_RDP; k <= DP_ACCT_PLD; k++) {
        dp_acct_kind kind = (dp_acct_kind)k;
        dp_acct_segment bad_sigma = {-1.0, 0.01, 10}, q0 = {1.0, 0.0, 10}, q15 = {1.0, 1.5, 10};
        dp_acct_segment qnan = {1.0, NAN, 10}, steps0 = {1.0, 0.01, 0};
        dp_acct_segment second_bad[2] = {{1.0, 0.01, 10}, {1.0, 0.01, -3}};
        int rc;
#define EXPECT(call, want, needle)                                                                                     \
    do {                                                                                                               \
        err[0] = '\0';                                                                                                 \
        rc = (call);                                                                                                   \
        expect(rc, (want), err, (needle), #call);                                                                      \
    } while (0)
        EXPECT(dp_acct_epsilon(kind, &bad_sigma, 1, 1e-5, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
               "noise_multiplier must be finite and >= 0 (got -1)");
        EXPECT(dp_acct_epsilon(kind, &q0, 1, 1e-5, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
               "sample_rate must be in (0, 1] (got 0)");
        EXPECT(dp_acct_epsilon(kind, &q15, 1, 1e-5, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
               "sample_rate must be in (0, 1] (got 1.5)");
        EXPECT(dp_acct_epsilon(kind, &qnan, 1, 1e-5, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL, "sample_rate");
        EXPECT(dp_acct_epsilon(kind, &steps0, 1, 1e-5, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
               "steps must be >= 1 (got 0)");
        EXPECT(dp_acct_epsilon(kind, second_bad, 2, 1e-5, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
               "history[2]: steps must be >= 1 (got -3)");
        EXPECT(dp_acct_epsilon(kind, NULL, 0, 1e-5, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
               "history is empty");
        EXPECT(dp_acct_epsilon(kind, second_bad, 1, 1.0, NULL, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
               "delta must be in (0, 1)");
        EXPECT(dp_acct_noise_multiplier(kind, 1.0, 1e-5, 0.0, 100, 0.01, NULL, &sigma, NULL, err, sizeof err),
               DP_ACCT_EINVAL, "sample_rate must be in (0, 1]");
        EXPECT(dp_acct_noise_multiplier(kind, 1.0, 1e-5, 0.01, 0, 0.01, NULL, &sigma, NULL, err, sizeof err),
               DP_ACCT_EINVAL, "steps must be >= 1");
        EXPECT(dp_acct_noise_multiplier(kind, -1.0, 1e-5, 0.01, 10, 0.01, NULL, &sigma, NULL, err, sizeof err),
               DP_ACCT_EINVAL, "epsilon must be finite and > 0");
        EXPECT(dp_acct_noise_multiplier(kind, 1.0, 1e-5, 0.01, 10, 0.0, NULL, &sigma, NULL, err, sizeof err),
               DP_ACCT_EINVAL, "epsilon_tolerance");
    }
    dp_acct_kind kind = DP_ACCT_RDP;
    int rc;
    EXPECT(dp_acct_parse("moments", &kind, err, sizeof err), DP_ACCT_EINVAL,
           "unknown accountant 'moments' (valid: rdp, prv, pld)");
    EXPECT(dp_acct_parse(NULL, &kind, err, sizeof err), DP_ACCT_EINVAL, "valid: rdp, prv, pld");
    check(kind == DP_ACCT_RDP, "kind untouched on a bad name");
    dp_acct_segment h = {1.0, 0.01, 100};
    EXPECT(dp_acct_prv_epsilon(&h, 1, 1e-5, 0.0, 1e-8, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
           "eps_error must be finite and > 0");
    EXPECT(dp_acct_prv_epsilon(&h, 1, 1e-5, 0.01, 1e-5, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
           "delta_error must be in (0, delta=1e-05)");
    EXPECT(dp_acct_pld_epsilon(&h, 1, 1e-5, -1e-4, &eps, NULL, err, sizeof err), DP_ACCT_EINVAL,
           "value_discretization_interval must be finite and > 0");
    /* Past the grid limit: a clear error naming the way out, not an allocation of gigabytes. */
    dp_acct_segment tiny_noise = {0.05, 1.0, 1000000};
    EXPECT(dp_acct_prv_epsilon(&tiny_noise, 1, 1e-5, 0.01, 1e-8, &eps, NULL, err, sizeof err), DP_ACCT_ESIZE,
           "raise eps_error, or use accountant 'pld' or 'rdp'");
    EXPECT(dp_acct_pld_epsilon(&tiny_noise, 1, 1e-5, 1e-4, &eps, NULL, err, sizeof err), DP_ACCT_ESIZE,
           "use accountant 'prv' or 'rdp'");
    EXPECT(dp_acct_noise_multiplier(DP_ACCT_PRV, 0.005, 1e-5, 0.01, 1, 0.01, NULL, &sigma, NULL, err, sizeof err),
           DP_ACCT_EBUDGET, "is out of reach");
#undef EXPECT
    check(eps == -1.0 && sigma == -1.0, "out parameters untouched on failure");
    check(strcmp(dp_acct_status_name(DP_ACCT_ESIZE), "grid too large") == 0, "ESIZE's name");
}

int main(void) {
    test_against_references();
    test_prv_grid();
    test_exact_gaussian();
    test_published();
    test_heterogeneous();
    test_details_and_options();
    test_errors();
    printf("accountants: %d passed, %d failed\n", n_passed, n_failed);
    return n_failed == 0 ? 0 : 1;
}
