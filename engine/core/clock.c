/* clock.c: CLOCK_MONOTONIC relative to a resettable epoch, or a modelled clock that advances by
 * the modelled time of the ops the ledger records: a calibrated curve per op where the model has
 * one, else the roofline. */
#include "clock.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t epoch_ns = -1;

/* The modelled clock: the modelled nanoseconds of the work recorded since it was started (it
 * starts at 0: a plan run's times are the modelled device's from the run's start), kept as a
 * double so rounding never drifts. */
static double model_flops, model_bandwidth, model_ns, model_gap_s;
static int model_overflowed; /* an op would have taken the clock past DP_CLOCK_LIMIT_NS */

/* One op's calibrated curve: log10 of the roofline work (s) and of the time (s) at its knots. */
typedef struct curve {
    char *op;
    size_t n;
    double *x, *y;
} curve;
static curve *curves;
static size_t n_curves, cap_curves;
/* The curve of each op literal the ledger looked up (dp_clock_advance_op: string literals, whose
 * addresses stay theirs), direct-mapped by address; index -1: no curve. Other callers' names
 * (dp_clock_op_seconds, dp_clock_curve_eval: any string) are looked up by content each time. */
#define CACHE_SLOTS 256
static struct {
    const char *op;
    long index;
} cache[CACHE_SLOTS];

static int64_t raw_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int64_t real_ns(void) {
    int64_t now = raw_ns();
    if (epoch_ns < 0) epoch_ns = now;
    return now - epoch_ns;
}

int64_t dp_clock_ns(void) {
    if (model_flops > 0) return (int64_t)llround(model_ns);
    return real_ns();
}

double dp_clock_s(void) { return (double)dp_clock_ns() * 1e-9; }

int64_t dp_clock_cpu_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return raw_ns();
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void dp_clock_reset(void) { epoch_ns = raw_ns(); }

void dp_clock_model(double peak_flops, double bandwidth) {
    if (peak_flops > 0 && bandwidth > 0) {
        model_ns = 0;
        model_overflowed = 0;
        model_flops = peak_flops;
        model_bandwidth = bandwidth;
    } else {
        model_flops = model_bandwidth = 0;
        model_overflowed = 0;
    }
}

int dp_clock_modelled(void) { return model_flops > 0; }

void dp_clock_curves_clear(void) {
    for (size_t i = 0; i < n_curves; i++) {
        free(curves[i].op);
        free(curves[i].x);
        free(curves[i].y);
    }
    free(curves);
    curves = NULL;
    n_curves = cap_curves = 0;
    memset(cache, 0, sizeof cache);
    model_gap_s = 0;
}

static int valid_knots(size_t n, const double *x, const double *y) {
    if (n < 1 || n > DP_CLOCK_MAX_KNOTS) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) return 0;
        if (i > 0 && !(x[i] > x[i - 1])) return 0;
    }
    return 1;
}

int dp_clock_curve_set(const char *op, size_t n, const double *log_work, const double *log_time) {
    if (!op || !*op || !log_work || !log_time || !valid_knots(n, log_work, log_time)) return -1;
    size_t i;
    for (i = 0; i < n_curves; i++)
        if (strcmp(curves[i].op, op) == 0) break;
    if (i == n_curves && n_curves == cap_curves) {
        size_t cap = cap_curves ? 2 * cap_curves : 32;
        curve *p = realloc(curves, cap * sizeof *p);
        if (!p) return -1;
        curves = p;
        cap_curves = cap;
    }
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    char *name = i == n_curves ? malloc(strlen(op) + 1) : NULL;
    if (!x || !y || (i == n_curves && !name)) {
        free(x), free(y), free(name);
        return -1;
    }
    memcpy(x, log_work, n * sizeof *x);
    memcpy(y, log_time, n * sizeof *y);
    if (i == n_curves) {
        strcpy(name, op);
        curves[n_curves++] = (curve){name, 0, NULL, NULL};
    } else {
        free(curves[i].x), free(curves[i].y);
    }
    curves[i].n = n, curves[i].x = x, curves[i].y = y;
    memset(cache, 0, sizeof cache);
    return 0;
}

void dp_clock_gap(double seconds) { model_gap_s = seconds > 0 && isfinite(seconds) ? seconds : 0; }

size_t dp_clock_curve_count(void) { return n_curves; }

static long find_curve(const char *op) {
    for (size_t i = 0; i < n_curves; i++)
        if (strcmp(curves[i].op, op) == 0) return (long)i;
    return -1;
}

/* find_curve for a string literal, through the cache. */
static long find_literal_curve(const char *op) {
    size_t slot = ((uintptr_t)op >> 3) % CACHE_SLOTS;
    if (cache[slot].op != op) {
        cache[slot].op = op;
        cache[slot].index = find_curve(op);
    }
    return cache[slot].index;
}

/* The slope of segment [a, b] of a curve, held in [lo, hi]. */
static double slope(const curve *c, size_t a, size_t b, double lo, double hi) {
    double s = (c->y[b] - c->y[a]) / (c->x[b] - c->x[a]);
    return s < lo ? lo : s > hi ? hi : s;
}

/* Curve k at work_s seconds of roofline work; -1 when k < 0 (no curve). */
static double eval(long k, double work_s) {
    if (k < 0) return -1.0;
    const curve *c = &curves[k];
    if (c->n == 1 || !(work_s > 0)) {
        /* one knot: the time scales with the work from it (a constant rate); no work: the
         * smallest time calibrated (a call's fixed cost) */
        if (!(work_s > 0)) return pow(10.0, c->y[0]);
        return pow(10.0, c->y[0] + log10(work_s) - c->x[0]);
    }
    double x = log10(work_s), y;
    size_t last = c->n - 1;
    if (x <= c->x[0]) { /* below: the first segment's slope, 0 (a fixed cost) to 1 (a rate) */
        y = c->y[0] + (x - c->x[0]) * slope(c, 0, 1, 0.0, 1.0);
    } else if (x >= c->x[last]) { /* above: the rate of the largest calibrated size holds */
        y = c->y[last] + (x - c->x[last]);
    } else {
        size_t i = 1;
        while (c->x[i] < x) i++;
        double f = (x - c->x[i - 1]) / (c->x[i] - c->x[i - 1]);
        y = c->y[i - 1] + f * (c->y[i] - c->y[i - 1]);
    }
    return pow(10.0, y);
}

double dp_clock_curve_eval(const char *op, double work_s) { return eval(op ? find_curve(op) : -1, work_s); }

/* One call's modelled seconds with curve k (-1: the roofline), plus the gap. */
static double op_seconds(long k, double flops, double bytes, int *calibrated) {
    double compute = flops / model_flops, memory = bytes / model_bandwidth;
    double work = compute > memory ? compute : memory;
    double t = eval(k, work);
    if (calibrated) *calibrated = t >= 0;
    return (t < 0 ? work : t) + model_gap_s;
}

double dp_clock_op_seconds(const char *op, double flops, double bytes, int *calibrated) {
    return op_seconds(op ? find_curve(op) : -1, flops, bytes, calibrated);
}

double dp_clock_advance(double flops, double bytes) { return dp_clock_advance_op(NULL, flops, bytes); }

double dp_clock_advance_op(const char *op, double flops, double bytes) {
    if (!(model_flops > 0)) return 0.0;
    double ns = op_seconds(op && n_curves ? find_literal_curve(op) : -1, flops, bytes, NULL) * 1e9;
    if (!(ns >= 0) || ns > DP_CLOCK_LIMIT_NS - model_ns) { /* NaN, or past what the clock holds: stops there */
        model_overflowed = 1;
        ns = DP_CLOCK_LIMIT_NS - model_ns;
    }
    model_ns += ns;
    return ns;
}

int dp_clock_overflowed(void) { return model_overflowed; }
