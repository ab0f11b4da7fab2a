/* test_rdp.c: the RDP accountant against Opacus 1.6, published values and
 * bad inputs.
 *
 * Fixtures (tests/fixtures/privacy/, made once by gen_opacus_rdp.py):
 *   opacus_rdp.csv       ε and optimal order from Opacus's RDPAccountant, σ from
 *                        get_noise_multiplier(accountant="rdp"); held to 1e-6 relative
 *   log_erfc_mpmath.csv  log(erfc(x)) from mpmath at 50 digits; held to 1e-13 relative
 * Prints the max relative difference per check; exits non-zero on any failure.
 */
#include "rdp.h"

#include "privacy_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPACUS_REL_TOL 1e-6
#define LOG_ERFC_REL_TOL 1e-13

/* Relative difference; 0 when both are the same infinity. */
static double rel_diff(double got, double want) {
    if (isinf(got) || isinf(want)) return got == want ? 0.0 : INFINITY;
    return fabs(got - want) / fmax(fabs(want), 1e-300);
}

static void test_against_opacus(void) {
    FILE *f = open_fixture("opacus_rdp.csv");
    if (f == NULL) {
        n_failed++;
        return;
    }
    char line[1024], err[256], what[512];
    double max_eps = 0.0, max_sigma = 0.0, max_noise_eps = 0.0;
    int n_eps = 0, n_noise = 0, n_raises = 0;
    /* the header: kind,sample_rate,noise_multiplier,steps,delta,target_epsilon,epsilon,order */
    fixture_line(f, line, sizeof line);
    while (fixture_line(f, line, sizeof line)) {
        char *c[8];
        if (split(line, ',', c, 8) != 8) {
            check(0, "opacus_rdp.csv: row without 8 fields");
            continue;
        }
        double q = strtod(c[1], NULL), sigma = strtod(c[2], NULL);
        long long steps = strtoll(c[3], NULL, 10);
        double delta = strtod(c[4], NULL), target = strtod(c[5], NULL);
        double want_eps = strtod(c[6], NULL), want_order = strtod(c[7], NULL);

        if (strcmp(c[0], "epsilon") == 0) {
            double eps = NAN, order = NAN;
            int rc = dp_acct_rdp_sampled_epsilon(q, sigma, steps, delta, &eps, &order, err, sizeof err);
            double d = rc == DP_ACCT_OK ? rel_diff(eps, want_eps) : INFINITY;
            max_eps = fmax(max_eps, d);
            n_eps++;
            snprintf(what, sizeof what,
                     "epsilon q=%g sigma=%g steps=%lld delta=%g: got %.17g (order %g, rc %d %s), "
                     "opacus %.17g (order %g)",
                     q, sigma, steps, delta, eps, order, rc, rc ? err : "", want_eps, want_order);
            check(d <= OPACUS_REL_TOL && order == want_order, what);
        } else if (strcmp(c[0], "noise") == 0) {
            double got_sigma = NAN, eps = NAN, order = NAN;
            int rc = dp_acct_rdp_noise_multiplier(target, delta, q, steps, DP_ACCT_EPSILON_TOLERANCE, &got_sigma, &eps,
                                                  &order, err, sizeof err);
            double ds = rc == DP_ACCT_OK ? rel_diff(got_sigma, sigma) : INFINITY;
            double de = rc == DP_ACCT_OK ? rel_diff(eps, want_eps) : INFINITY;
            max_sigma = fmax(max_sigma, ds);
            max_noise_eps = fmax(max_noise_eps, de);
            n_noise++;
            snprintf(what, sizeof what,
                     "noise_multiplier eps=%g delta=%g q=%g steps=%lld: got sigma %.17g eps %.17g "
                     "(rc %d %s), opacus sigma %.17g eps %.17g",
                     target, delta, q, steps, got_sigma, eps, rc, rc ? err : "", sigma, want_eps);
            check(ds <= OPACUS_REL_TOL && de <= OPACUS_REL_TOL && order == want_order, what);
        } else if (strcmp(c[0], "noise_raises") == 0) {
            double got_sigma;
            int rc = dp_acct_rdp_noise_multiplier(target, delta, q, steps, DP_ACCT_EPSILON_TOLERANCE, &got_sigma, NULL,
                                                  NULL, err, sizeof err);
            n_raises++;
            snprintf(what, sizeof what,
                     "noise_multiplier eps=%g q=%g steps=%lld: want "
                     "EBUDGET as Opacus raises, got rc %d",
                     target, q, steps, rc);
            check(rc == DP_ACCT_EBUDGET && strstr(err, "noise_multiplier") != NULL, what);
        } else {
            check(0, "opacus_rdp.csv: unknown row kind");
        }
    }
    fclose(f);
    check(n_eps > 0 && n_noise > 0 && n_raises > 0, "opacus_rdp.csv has every row kind");
    printf("opacus epsilon:          %3d rows, max rel diff %.3e (tol %.0e)\n", n_eps, max_eps, OPACUS_REL_TOL);
    printf("opacus noise_multiplier: %3d rows, max rel diff sigma %.3e, eps %.3e (tol %.0e)\n", n_noise, max_sigma,
           max_noise_eps, OPACUS_REL_TOL);
    printf("opacus budget too low:   %3d rows, all EBUDGET\n", n_raises);
}

static void test_log_erfc(void) {
    FILE *f = open_fixture("log_erfc_mpmath.csv");
    if (f == NULL) {
        n_failed++;
        return;
    }
    char line[256], what[256];
    double max_d = 0.0;
    int n = 0;
    /* the header: x,log_erfc */
    fixture_line(f, line, sizeof line);
    while (fixture_line(f, line, sizeof line)) {
        char *c[2];
        if (split(line, ',', c, 2) != 2) {
            check(0, "log_erfc_mpmath.csv: row without 2 fields");
            continue;
        }
        double x = strtod(c[0], NULL), want = strtod(c[1], NULL);
        double got = dp_acct_log_erfc(x);
        /* relative, except near x = 0 where log(erfc) crosses 0 */
        double d = fabs(got - want) / fmax(fabs(want), 1.0);
        max_d = fmax(max_d, d);
        n++;
        snprintf(what, sizeof what, "log_erfc(%.17g) = %.17g, mpmath %.17g", x, got, want);
        check(d <= LOG_ERFC_REL_TOL, what);
    }
    fclose(f);
    check(n > 0, "log_erfc_mpmath.csv has rows");
    /* The trap: erfc underflows to 0 past x ~ 27.2, so log(erfc(x)) would be -inf. */
    check(isfinite(dp_acct_log_erfc(40.0)) && erfc(40.0) == 0.0, "log_erfc stays finite where erfc underflows");
    printf("mpmath log_erfc:         %3d rows, max rel diff %.3e (tol %.0e)\n", n, max_d, LOG_ERFC_REL_TOL);
}

static void test_published(void) {
    char err[256];
    double eps, order, sigma;

    /* Opacus opacus/tests/accountants_test.py, test_rdp_accountant:
     * σ = 1.5, q = 0.04, steps = int(90 / 0.04), δ = 1e-5 -> ε = 7.32911117143 (7 places). */
    int rc = dp_acct_rdp_sampled_epsilon(0.04, 1.5, 2250, 1e-5, &eps, &order, err, sizeof err);
    check(rc == DP_ACCT_OK && fabs(eps - 7.32911117143) < 5e-8,
          "published: Opacus test_rdp_accountant epsilon 7.32911117143");
    printf("published Opacus test_rdp_accountant: eps %.11f (want 7.32911117143)\n", eps);

    /* Same file, test_get_noise_multiplier_rdp_epochs: ε = 8, δ = 1e-5, q = 0.04,
     * 90 epochs (2250 steps) -> σ = 1.416 (4 places). */
    rc = dp_acct_rdp_noise_multiplier(8.0, 1e-5, 0.04, 2250, DP_ACCT_EPSILON_TOLERANCE, &sigma, NULL, NULL, err,
                                      sizeof err);
    check(rc == DP_ACCT_OK && fabs(sigma - 1.416) < 5e-5,
          "published: Opacus test_get_noise_multiplier_rdp_epochs sigma 1.416");
    /* test_get_noise_multiplier_rdp_steps: 2000 steps -> σ = 1.3562 (4 places). */
    rc = dp_acct_rdp_noise_multiplier(8.0, 1e-5, 0.04, 2000, DP_ACCT_EPSILON_TOLERANCE, &sigma, NULL, NULL, err,
                                      sizeof err);
    check(rc == DP_ACCT_OK && fabs(sigma - 1.3562) < 5e-5,
          "published: Opacus test_get_noise_multiplier_rdp_steps sigma 1.3562");

    /* Opacus opacus/accountants/analysis/rdp.py module docstring (from TF Privacy):
     * composing (q, σ, steps) = (1e-5, 1.0, 10) and (1e-4, 3.0, 4) over orders 2..32
     * at δ = 1e-5 gives (ε, order) = (0.336, 23). Checks composition by adding RDP. */
    double orders[31], rdp_a[31], rdp_b[31], rdp_sum[31];
    for (int k = 0; k < 31; k++) orders[k] = 2.0 + k;
    int rc_a = dp_acct_rdp_values(1e-5, 1.0, 10, orders, 31, rdp_a, err, sizeof err);
    int rc_b = dp_acct_rdp_values(1e-4, 3.0, 4, orders, 31, rdp_b, err, sizeof err);
    for (int k = 0; k < 31; k++) rdp_sum[k] = rdp_a[k] + rdp_b[k];
    rc = dp_acct_rdp_to_epsilon(orders, rdp_sum, 31, 1e-5, &eps, &order, err, sizeof err);
    check(rc_a == DP_ACCT_OK && rc_b == DP_ACCT_OK && rc == DP_ACCT_OK && fabs(eps - 0.336) < 5e-4 && order == 23.0,
          "published: Opacus rdp.py docstring (0.336, 23)");
    printf("published Opacus rdp.py docstring: eps %.4f order %g (want 0.336, 23)\n", eps, order);
}

static void test_edges(void) {
    char err[256];
    double eps, order, orders[DP_ACCT_RDP_N_ORDERS];

    dp_acct_rdp_default_orders(orders);
    check(orders[0] == 1.1 && orders[9] == 2.0 && orders[98] == 10.9 && orders[99] == 12.0 &&
              orders[DP_ACCT_RDP_N_ORDERS - 1] == 63.0,
          "default orders are Opacus's DEFAULT_ALPHAS");

    int rc = dp_acct_rdp_sampled_epsilon(0.01, 1.0, 0, 1e-5, &eps, &order, err, sizeof err);
    check(rc == DP_ACCT_OK && eps == 0.0 && order == 0.0, "steps = 0 gives eps 0, order 0");
    rc = dp_acct_rdp_sampled_epsilon(0.01, 0.0, 10, 1e-5, &eps, &order, err, sizeof err);
    check(rc == DP_ACCT_OK && isinf(eps) && order == 1.1, "sigma = 0 gives eps inf");
    rc = dp_acct_rdp_sampled_epsilon(1.0, 2.0, 1, 1e-5, &eps, NULL, err, sizeof err);
    check(rc == DP_ACCT_OK && isfinite(eps), "order may be NULL");

    /* q = 1 is the plain Gaussian mechanism: RDP α/(2σ²) per step. */
    double rdp[2], two_orders[2] = {2.0, 7.5};
    rc = dp_acct_rdp_values(1.0, 2.0, 3, two_orders, 2, rdp, err, sizeof err);
    check(rc == DP_ACCT_OK && rdp[0] == 3 * 2.0 / 8.0 && rdp[1] == 3 * 7.5 / 8.0,
          "q = 1 gives steps * alpha / (2 sigma^2)");
}

/* Expects rc EINVAL (or want_rc) and a message naming `name`. */
static void expect_error(int rc, int want_rc, const char *err, const char *name, const char *what) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s: rc %d (want %d), message \"%s\" should name %s", what, rc, want_rc, err, name);
    check(rc == want_rc && strstr(err, name) != NULL, msg);
}

static void test_errors(void) {
    char err[256];
    double eps = -1.0, sigma = -1.0, rdp[1];
    const double bad_orders[1] = {1.0};

#define EPS_ERR(q, s, n, d, name)                                                                                      \
    do {                                                                                                               \
        err[0] = '\0';                                                                                                 \
        int rc_ = dp_acct_rdp_sampled_epsilon((q), (s), (n), (d), &eps, NULL, err, sizeof err);                        \
        expect_error(rc_, DP_ACCT_EINVAL, err, (name), "epsilon(" #q "," #s "," #n "," #d ")");                        \
    } while (0)
    EPS_ERR(-0.1, 1.0, 10, 1e-5, "sample_rate");
    EPS_ERR(1.5, 1.0, 10, 1e-5, "sample_rate");
    EPS_ERR(NAN, 1.0, 10, 1e-5, "sample_rate");
    EPS_ERR(0.01, -1.0, 10, 1e-5, "noise_multiplier");
    EPS_ERR(0.01, INFINITY, 10, 1e-5, "noise_multiplier");
    EPS_ERR(0.01, 1.0, -1, 1e-5, "steps");
    EPS_ERR(0.01, 1.0, 10, 0.0, "delta");
    EPS_ERR(0.01, 1.0, 10, 1.0, "delta");
    EPS_ERR(0.01, 1.0, 10, -1e-5, "delta");
#undef EPS_ERR
    check(eps == -1.0, "out parameters untouched on failure");

#define NM_ERR(e, d, q, n, tol, name)                                                                                  \
    do {                                                                                                               \
        err[0] = '\0';                                                                                                 \
        int rc_ = dp_acct_rdp_noise_multiplier((e), (d), (q), (n), (tol), &sigma, NULL, NULL, err, sizeof err);        \
        expect_error(rc_, DP_ACCT_EINVAL, err, (name), "noise_multiplier(" #e "," #d "," #q "," #n "," #tol ")");      \
    } while (0)
    NM_ERR(0.0, 1e-5, 0.01, 100, 0.01, "epsilon");
    NM_ERR(-1.0, 1e-5, 0.01, 100, 0.01, "epsilon");
    NM_ERR(INFINITY, 1e-5, 0.01, 100, 0.01, "epsilon");
    NM_ERR(1.0, 2.0, 0.01, 100, 0.01, "delta");
    NM_ERR(1.0, 1e-5, 0.0, 100, 0.01, "sample_rate");
    NM_ERR(1.0, 1e-5, 1.01, 100, 0.01, "sample_rate");
    NM_ERR(1.0, 1e-5, 0.01, 0, 0.01, "steps");
    NM_ERR(1.0, 1e-5, 0.01, 100, 0.0, "epsilon_tolerance");
#undef NM_ERR
    check(sigma == -1.0, "noise_multiplier untouched on failure");

    int rc = dp_acct_rdp_values(0.01, 1.0, 1, bad_orders, 1, rdp, err, sizeof err);
    expect_error(rc, DP_ACCT_EINVAL, err, "orders", "rdp at order 1");
    rc = dp_acct_rdp_values(0.01, 1.0, 1, bad_orders, 0, rdp, err, sizeof err);
    expect_error(rc, DP_ACCT_EINVAL, err, "orders", "rdp with no orders");
    rc = dp_acct_rdp_to_epsilon(bad_orders, rdp, 1, 1e-5, &eps, NULL, err, sizeof err);
    expect_error(rc, DP_ACCT_EINVAL, err, "orders", "epsilon_from_rdp at order 1");

    rc = dp_acct_rdp_noise_multiplier(0.01, 1e-5, 1.0, 100000, DP_ACCT_EPSILON_TOLERANCE, &sigma, NULL, NULL, err,
                                      sizeof err);
    expect_error(rc, DP_ACCT_EBUDGET, err, "noise_multiplier", "budget too low");

    /* A NULL or tiny buffer is fine: the status still says what happened. */
    rc = dp_acct_rdp_sampled_epsilon(2.0, 1.0, 1, 1e-5, &eps, NULL, NULL, 0);
    check(rc == DP_ACCT_EINVAL, "err may be NULL");
    char tiny[4] = "xxx";
    rc = dp_acct_rdp_sampled_epsilon(2.0, 1.0, 1, 1e-5, &eps, NULL, tiny, sizeof tiny);
    check(rc == DP_ACCT_EINVAL && strlen(tiny) == 3 && strncmp(tiny, "sam", 3) == 0,
          "a short err buffer is truncated and terminated");
    check(strcmp(dp_acct_status_name(DP_ACCT_EBUDGET), "privacy budget out of reach") == 0 &&
              strcmp(dp_acct_status_name(42), "unknown status") == 0,
          "status names");
}

int main(void) {
    test_log_erfc();
    test_against_opacus();
    test_published();
    test_edges();
    test_errors();
    printf("privacy: %d passed, %d failed\n", n_passed, n_failed);
    return n_failed == 0 ? 0 : 1;
}
