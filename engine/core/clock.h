/* clock.h: the engine's monotonic clock. Times are relative to the process's first call, so a
 * forked child's timestamps start near zero. */
#ifndef DP_CLOCK_H
#define DP_CLOCK_H

#include <stdint.h>

/* Nanoseconds since the clock's epoch (monotonic). */
int64_t dp_clock_ns(void);
/* Seconds since the clock's epoch. */
double dp_clock_s(void);
/* Restarts the epoch at now (a forked child calls this so its timeline starts at zero). */
void dp_clock_reset(void);

#endif
