/* dpplot_bars.h: stacked and grouped bars on a categorical x axis (group i at position i). */
#ifndef DPPLOT_BARS_H
#define DPPLOT_BARS_H

#include "dpplot_panel.h"

typedef struct {
    size_t n_groups, n_series;
    const double *values;            /* n_groups × n_series, row-major, data units; NaN = none */
    const dpplot_rgb *series_colors; /* n_series colours */
    int stacked;                     /* 1: series stack in one bar (negatives stack downwards);
                                        0: series side by side within the group */
    const char *const *group_notes;  /* optional, n_groups: bold label above each group's bar(s);
                                        NULL entries are skipped */
    int label_segments;              /* 1: value inside each segment tall enough to hold it */
    dpplot_unit unit;                /* unit of segment labels */
    double width;                    /* bar (stacked) or group (grouped) width as a fraction of the
                                        slot; 0 means 0.62 */
} dpplot_bar_spec;

/* Draws the bars into p (a panel with a categorical x axis of n_groups categories). */
void dpplot_bars_draw(dpplot_panel *p, const dpplot_bar_spec *b);
/* Value range the bars need (stack sums for stacked bars; always includes 0). */
void dpplot_bars_range(const dpplot_bar_spec *b, double *lo, double *hi);

#endif
