/* clock.h: the engine's monotonic clock. Times are relative to the process's first call, so a
 * forked child's timestamps start near zero.
 *
 * The clock can be made modelled (dp_clock_model): it then stands still and advances only by
 * the modelled device time of the work the ledger records (dp_clock_advance, called by
 * dp_ledger_add), so a plan run's spans, snapshots and memory events sit on the modelled device's
 * time line instead of the host's. */
#ifndef DP_CLOCK_H
#define DP_CLOCK_H

#include <stdint.h>

/* Nanoseconds since the clock's epoch (monotonic; modelled time while the clock is modelled). */
int64_t dp_clock_ns(void);
/* Seconds since the clock's epoch. */
double dp_clock_s(void);
/* Restarts the epoch at now (a forked child calls this so its timeline starts at zero). */
void dp_clock_reset(void);

/* Makes the clock modelled from now on, starting at 0: each op recorded then costs
 * max(flops / peak_flops, bytes / bandwidth) seconds (a roofline). peak_flops <= 0 or
 * bandwidth <= 0 makes it real again (the host's time since the epoch). */
void dp_clock_model(double peak_flops, double bandwidth);
/* 1 while the clock is modelled. */
int dp_clock_modelled(void);
/* Advances a modelled clock by one op's roofline time; returns the nanoseconds added (0 when the
 * clock is real). */
double dp_clock_advance(double flops, double bytes);

#endif
