/* dpplot_axis.h: tick placement (Heckbert's 1-2-5 rule, log2, log10), unit choice, value
 * formatting and data-to-pixel mapping. Pure arithmetic: no cairo, unit-testable.
 *
 * Units: DPPLOT_UNIT_BYTES values are bytes and get binary units (B, KiB, MiB, GiB, TiB) chosen
 * from the range; DPPLOT_UNIT_MS values are milliseconds shown as ms, or as s from 10 s up. */
#ifndef DPPLOT_AXIS_H
#define DPPLOT_AXIS_H

#include <stddef.h>

typedef enum { DPPLOT_SCALE_LINEAR, DPPLOT_SCALE_LOG2, DPPLOT_SCALE_LOG10 } dpplot_scale;
typedef enum { DPPLOT_UNIT_NONE, DPPLOT_UNIT_BYTES, DPPLOT_UNIT_MS } dpplot_unit;

#define DPPLOT_MAX_TICKS 24
#define DPPLOT_TICK_LABEL 24

/* Ticks of one axis. Values are in data units (bytes, ms, ...); labels are in display units. */
typedef struct {
    double lo, hi; /* axis range in data units; lo < hi */
    size_t n;      /* number of ticks, at most DPPLOT_MAX_TICKS */
    double value[DPPLOT_MAX_TICKS];
    char label[DPPLOT_MAX_TICKS][DPPLOT_TICK_LABEL];
    char unit[8];   /* display unit for the axis title ("GiB", "ms"); "" when the labels carry
                       their own unit (log byte axes) or there is none */
    double divisor; /* data units per display unit (2^30 for GiB, 1 when no unit) */
} dpplot_ticks;

/* Heckbert's nice number near x > 0: 1, 2, 5 or 10 × 10^k, rounded (round=1) or ceiled. */
double dpplot_nice_number(double x, int round);

/* Display unit for values up to max_abs: sets *name ("MiB") and *divisor (2^20). */
void dpplot_unit_choose(dpplot_unit unit, double max_abs, const char **name, double *divisor);

/* Linear ticks for [lo, hi] aiming at `target` ticks (2..DPPLOT_MAX_TICKS). extend=1 widens the
 * range to whole steps; extend=0 keeps it and ticks only inside. 0 on success, -1 when lo or hi
 * is not finite. lo == hi is widened around the value. */
int dpplot_ticks_linear(double lo, double hi, int target, dpplot_unit unit, int extend, dpplot_ticks *out);

/* Log ticks (scale LOG2 or LOG10) at powers of the base, thinned to about `target`, with 2× and
 * 5× ticks added to log10 ranges under two decades. extend=1 widens to whole powers. 0 on
 * success, -1 when lo <= 0, a bound is not finite or scale is linear. */
int dpplot_ticks_log(double lo, double hi, dpplot_scale scale, int target, dpplot_unit unit, int extend,
                     dpplot_ticks *out);

/* Dispatches to dpplot_ticks_linear or dpplot_ticks_log by scale; same return values. */
int dpplot_ticks_compute(double lo, double hi, dpplot_scale scale, int target, dpplot_unit unit, int extend,
                         dpplot_ticks *out);

/* Formats v with its unit, compactly ("474.7 MiB", "1.25 GiB", "312 ms", "12.5 s", "4096");
 * returns buf. Non-finite values print as "n/a". */
char *dpplot_format_value(double v, dpplot_unit unit, char *buf, size_t buflen);

/* Maps data values to pixels along one axis; pix_lo is where `lo` lands (for y: the bottom). */
typedef struct {
    dpplot_scale scale;
    double lo, hi;         /* data range, lo < hi (and lo > 0 for log scales) */
    double pix_lo, pix_hi; /* pixel positions of lo and hi */
} dpplot_axis;

/* Pixel position of data value v (values outside the range map outside; log of v <= 0 maps to
 * pix_lo). */
double dpplot_axis_map(const dpplot_axis *ax, double v);
/* scale's transform of v: identity, log2 or log10. */
double dpplot_scale_apply(dpplot_scale scale, double v);
/* Parses "linear", "log2" or "log10"; -1 when none of these. */
int dpplot_scale_parse(const char *s);
/* Parses "none", "bytes" or "ms"; -1 when none of these. */
int dpplot_unit_parse(const char *s);

#endif
