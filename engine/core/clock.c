/* clock.c: CLOCK_MONOTONIC relative to a resettable epoch. */
#include "clock.h"

#include <time.h>

static int64_t epoch_ns = -1;

static int64_t raw_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int64_t dp_clock_ns(void) {
    int64_t now = raw_ns();
    if (epoch_ns < 0) epoch_ns = now;
    return now - epoch_ns;
}

double dp_clock_s(void) { return (double)dp_clock_ns() * 1e-9; }

void dp_clock_reset(void) { epoch_ns = raw_ns(); }
