/* clock.c: CLOCK_MONOTONIC relative to a resettable epoch, or a modelled clock that advances by
 * the roofline time of the ops the ledger records. */
#include "clock.h"

#include <math.h>
#include <time.h>

static int64_t epoch_ns = -1;

/* The modelled clock: the modelled nanoseconds of the work recorded since it was started (it
 * starts at 0: a plan run's times are the modelled device's from the run's start), kept as a
 * double so rounding never drifts. */
static double model_flops, model_bandwidth, model_ns;

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

void dp_clock_reset(void) { epoch_ns = raw_ns(); }

void dp_clock_model(double peak_flops, double bandwidth) {
    if (peak_flops > 0 && bandwidth > 0) {
        model_ns = 0;
        model_flops = peak_flops;
        model_bandwidth = bandwidth;
    } else {
        model_flops = model_bandwidth = 0;
    }
}

int dp_clock_modelled(void) { return model_flops > 0; }

double dp_clock_advance(double flops, double bytes) {
    if (!(model_flops > 0)) return 0.0;
    double compute = flops / model_flops, memory = bytes / model_bandwidth;
    double ns = (compute > memory ? compute : memory) * 1e9;
    model_ns += ns;
    return ns;
}
