/* dpplot_charts.h: whole single-panel charts on a canvas (title, legend, axes, data), for scripts'
 * own charts (dpprof.plot.lines{...} and friends) and for C callers that want one chart. */
#ifndef DPPLOT_CHARTS_H
#define DPPLOT_CHARTS_H

#include "dpplot_bars.h"
#include "dpplot_heatmap.h"
#include "dpplot_lines.h"

/* Titles and axes of a chart. Ranges left NaN come from the data (linear value axes start at 0
 * when all data are >= 0). */
typedef struct {
    const char *title, *subtitle; /* NULL for none */
    const char *x_label, *y_label;
    dpplot_scale x_scale, y_scale;
    dpplot_unit x_unit, y_unit;
    double x_min, x_max, y_min, y_max;
} dpplot_chart_axes;

/* Axes with no titles, linear scales, no units and every range from the data. */
dpplot_chart_axes dpplot_chart_axes_default(void);

/* Lines with markers (and OOM crosses), a legend of the named series above the plot.
 * 0 on success, -1 when the axes cannot be laid out (e.g. a log axis over values <= 0). */
int dpplot_chart_lines(dpplot_canvas *cv, const dpplot_chart_axes *ax, const dpplot_series *s, size_t n);
/* Bars over groups (stacked or grouped per b->stacked), series named in the legend.
 * 0 on success, -1 when the axes cannot be laid out. */
int dpplot_chart_bars(dpplot_canvas *cv, const dpplot_chart_axes *ax, const char *const *group_labels,
                      const char *const *series_names, const dpplot_bar_spec *b);
/* Labelled scatter points. 0 on success, -1 when the axes cannot be laid out. */
int dpplot_chart_scatter(dpplot_canvas *cv, const dpplot_chart_axes *ax, const dpplot_point *pts, size_t n);
/* Heatmap with a colorbar labelled colorbar_label. 0, or -1 when it does not fit. */
int dpplot_chart_heatmap(dpplot_canvas *cv, const dpplot_chart_axes *ax, const char *const *x_labels,
                         const char *const *y_labels, const dpplot_heatmap_spec *h, const char *colorbar_label);

/* A labelled point to mark on a timeline. */
typedef struct {
    double x, y;
    const char *text;
    dpplot_rgb color;
} dpplot_annotation;

/* Curves over time (step series usually) over shaded spans, with annotations; the legend names
 * the series and the phases of the shades given in shade_names (n_shades entries, NULL entries
 * left out of the legend). 0, or -1 when the axes cannot be laid out. */
int dpplot_chart_timeline(dpplot_canvas *cv, const dpplot_chart_axes *ax, const dpplot_series *s, size_t n,
                          const dpplot_shade *shades, const char *const *shade_names, size_t n_shades,
                          const dpplot_annotation *notes, size_t n_notes);

#endif
