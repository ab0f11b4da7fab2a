/* sweep_util.h: what the sweep charts share (internal to plots/): the distinct values of a swept
 * variable, the methods of a sweep, the points of a sweep, and the metrics a sweep chart can show. */
#ifndef DPPLOT_SWEEP_UTIL_H
#define DPPLOT_SWEEP_UTIL_H

#include "dpplot_axis.h"
#include "dpplot_results.h"

#define DPPLOT_SWEEP_MAX_METHODS 16
#define DPPLOT_SWEEP_MAX_VALUES 64
#define DPPLOT_SWEEP_MAX_KEYS 8

/* Distinct values of one swept variable across a sweep, sorted (numbers ascending, else text;
 * `checkpoint`, activation checkpointing, from off to every block, as categories), with the labels
 * an axis shows ("every 2nd" for checkpoint = 2; the text otherwise). */
typedef struct {
    size_t n;
    int numeric;
    double number[DPPLOT_SWEEP_MAX_VALUES];
    const char *text[DPPLOT_SWEEP_MAX_VALUES];
    const char *label[DPPLOT_SWEEP_MAX_VALUES];
    char label_text[DPPLOT_SWEEP_MAX_VALUES][24];
    size_t dropped; /* distinct values past DPPLOT_SWEEP_MAX_VALUES, not in the set */
} dpplot_value_set;

/* The values of key across the points of sweep. */
void dpplot_sweep_values(const dpplot_results *rs, const char *sweep, const char *key, dpplot_value_set *vs);
/* Index of v's value in vs (vs->n when absent). */
size_t dpplot_value_index(const dpplot_value_set *vs, const dpplot_vary *v);
/* Methods of a sweep in the results' (canonical) order, at most DPPLOT_SWEEP_MAX_METHODS; returns
 * the count. */
size_t dpplot_sweep_methods(const dpplot_results *rs, const char *sweep, const char **methods);
/* Number of distinct methods of a sweep (however many: what dpplot_sweep_methods leaves out). */
size_t dpplot_sweep_method_count(const dpplot_results *rs, const char *sweep);
/* The swept keys of sweep other than method, in first-seen order; returns the count. */
size_t dpplot_sweep_keys(const dpplot_results *rs, const char *sweep, const char **keys, size_t cap);
/* 1 when r is a point of sweep. */
int dpplot_in_sweep(const dpplot_result *r, const char *sweep);
/* The first point of a sweep (for its context line), or NULL. */
const dpplot_result *dpplot_sweep_first(const dpplot_results *rs, const char *sweep);
/* The card's memory of the sweep's plan runs (plan.memory_bytes); NaN when none, or when they differ. */
double dpplot_sweep_card_bytes(const dpplot_results *rs, const char *sweep);
/* log2 suits sizes that double from point to point: seq_len, batch, hidden, and any all-powers-of-
 * two variable spanning at least 4x. */
int dpplot_wants_log2(const char *key, const dpplot_value_set *vs);
/* The x range of a sweep chart over xs (x: the positions drawn): categories at -0.5 .. n-0.5, a
 * log2 axis widened by 2^0.35 each way, a linear one by pad (a fraction of the span). */
void dpplot_sweep_x_range(const dpplot_value_set *xs, const double *x, int log2x, double pad, double *xmin,
                          double *xmax);
/* The swept values of r but the method, "seq_len=2048, batch=4" (what names its point). */
void dpplot_point_label(const dpplot_result *r, char *buf, size_t len);
/* 1 when r's swept values agree with `filter`, a list "key=value,key=value" (NULL or "": all);
 * a key r does not vary never matches. */
int dpplot_point_matches(const dpplot_result *r, const char *filter);

/* What a sweep chart shows of a point. */
typedef enum {
    DPPLOT_METRIC_PEAK,         /* peak memory, bytes */
    DPPLOT_METRIC_TIME,         /* step time, ms (the median when the runs' spread is known) */
    DPPLOT_METRIC_EXTRA,        /* peak memory over vanilla's at the same other values, bytes */
    DPPLOT_METRIC_TOKENS_PER_S, /* batch x seq_len per second of step time */
    DPPLOT_N_METRICS
} dpplot_metric;

/* Short name of a metric as file names and options use it ("peak", "time", "extra", "tokens_per_s"). */
const char *dpplot_metric_name(dpplot_metric m);
/* Parses a metric name; -1 when unknown. */
int dpplot_metric_parse(const char *s);
/* Axis or colorbar title of a metric ("Peak memory", "Time per step (estimated)" when predicted). */
const char *dpplot_metric_title(dpplot_metric m, int predicted);
/* The one step time every table and chart shows for r (ms): the median of its repeated runs'
 * mean step (repeats.avg_ms.median), else of its timed iterations (timing.median_ms), else its
 * mean (a legacy file); NaN without a time. *lo and *hi (may be NULL) get the spread beside it
 * (min and max of those runs or iterations; NaN when unknown). */
double dpplot_step_ms(const dpplot_result *r, double *lo, double *hi);
/* Unit of a metric's values. */
dpplot_unit dpplot_metric_unit(dpplot_metric m);
/* The metric's value for point r of rs (NaN when r lacks it, or has no vanilla counterpart for
 * EXTRA); *lo and *hi (may be NULL) get the spread of a time (NaN otherwise). */
double dpplot_metric_value(const dpplot_results *rs, const dpplot_result *r, dpplot_metric m, double *lo, double *hi);

#endif
