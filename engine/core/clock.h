/* clock.h: the engine's monotonic clock. Times are relative to the process's first call, so a
 * forked child's timestamps start near zero.
 *
 * The clock can be made modelled (dp_clock_model): it then stands still and advances only by
 * the modelled device time of the work the ledger records (dp_clock_advance_op, called by
 * dp_ledger_add), so a plan run's spans, snapshots and memory events sit on the modelled device's
 * time line instead of the host's.
 *
 * An op's modelled time: its roofline work w = max(flops / peak_flops, bytes / bandwidth)
 * seconds; where the model has a calibrated curve for the op (dp_clock_curve_set, a device model
 * file's curves for the run's dtype), the time is the curve at w: piecewise linear in
 * log10(w) -> log10(time) between its knots, below the first knot the first segment's slope held
 * in [0, 1] (a fixed cost per call to a constant rate), above the last knot a constant rate (the
 * largest calibrated size's); otherwise it is w itself (the roofline). A gap (dp_clock_gap, the
 * host time between calls a calibration measured) is added to every op while set. */
#ifndef DP_CLOCK_H
#define DP_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* The most knots one op's curve may have. */
#define DP_CLOCK_MAX_KNOTS 64

/* Nanoseconds since the clock's epoch (monotonic; modelled time while the clock is modelled). */
int64_t dp_clock_ns(void);
/* Seconds since the clock's epoch. */
double dp_clock_s(void);
/* The process's CPU time, ns (all its threads; the monotonic clock where the system has none). */
int64_t dp_clock_cpu_ns(void);
/* Restarts the epoch at now (a forked child calls this so its timeline starts at zero). */
void dp_clock_reset(void);

/* Makes the clock modelled from now on, starting at 0, with these peaks for the roofline work
 * (see above). peak_flops <= 0 or bandwidth <= 0 makes it real again (the host's time since the
 * epoch). The curves and the gap are kept (dp_clock_curves_clear forgets them). */
void dp_clock_model(double peak_flops, double bandwidth);
/* 1 while the clock is modelled. */
int dp_clock_modelled(void);
/* The most a modelled clock holds, ns (about 126 years: int64 ns, with room for sums of spans). */
#define DP_CLOCK_LIMIT_NS 4e18
/* 1 when an op since dp_clock_model would have taken the modelled clock past DP_CLOCK_LIMIT_NS
 * (or was not a number): the clock stopped at the limit, and the run's times are not to be used;
 * 0 again once the clock is made real or modelled anew. */
int dp_clock_overflowed(void);
/* Sets op's calibrated curve (replacing one it had): n knots (1..DP_CLOCK_MAX_KNOTS), log10 of
 * the roofline work in seconds strictly increasing, log10 of the time in seconds; copied.
 * 0, or -1 when the knots are invalid or the host is out of memory. */
int dp_clock_curve_set(const char *op, size_t n, const double *log_work, const double *log_time);
/* Sets the host gap added to every modelled op, seconds (<= 0: none). */
void dp_clock_gap(double seconds);
/* Forgets every curve and the gap (the roofline alone again). */
void dp_clock_curves_clear(void);
/* Number of ops with a curve. */
size_t dp_clock_curve_count(void);
/* op's curve at work_s seconds of roofline work: seconds, or -1 when op has no curve. */
double dp_clock_curve_eval(const char *op, double work_s);
/* The modelled seconds of one call of op (curve, else roofline, plus the gap) on the model set by
 * dp_clock_model; *calibrated (may be NULL) says whether a curve gave it. */
double dp_clock_op_seconds(const char *op, double flops, double bytes, int *calibrated);
/* Advances a modelled clock by one op's modelled time (op: a string literal, as the ledger's; NULL or
 * without a curve: the roofline); returns the nanoseconds added (0 when the clock is real). */
double dp_clock_advance_op(const char *op, double flops, double bytes);
/* dp_clock_advance_op without an op name: the roofline (plus the gap). */
double dp_clock_advance(double flops, double bytes);

#endif
