/* charts.c: single-panel charts (title, legend, axes, data) for scripts and C callers. */
#include "dpplot_charts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_legend.h"

#define MAX_LEGEND 64

dpplot_chart_axes dpplot_chart_axes_default(void) {
    dpplot_chart_axes a = {
        NULL, NULL, NULL, NULL, DPPLOT_SCALE_LINEAR, DPPLOT_SCALE_LINEAR, DPPLOT_UNIT_NONE, DPPLOT_UNIT_NONE,
        NAN,  NAN,  NAN,  NAN};
    return a;
}

/* Resolves one axis's range: given bounds win; otherwise the data's, padded a little; linear
 * value axes over non-negative data start at 0. */
static void resolve_range(double given_lo, double given_hi, double data_lo, double data_hi, dpplot_scale scale,
                          int value_axis, double *lo, double *hi) {
    if (!isfinite(data_lo) || !isfinite(data_hi)) data_lo = 0, data_hi = 1;
    if (scale == DPPLOT_SCALE_LINEAR) {
        double pad = (data_hi - data_lo) * 0.05;
        *lo = value_axis && data_lo >= 0 ? 0.0 : data_lo - pad;
        *hi = data_hi + (value_axis ? pad * 2 : pad);
    } else {
        double f = scale == DPPLOT_SCALE_LOG2 ? pow(2, 0.3) : pow(10, 0.1);
        *lo = data_lo / f, *hi = data_hi * f;
    }
    if (isfinite(given_lo)) *lo = given_lo;
    if (isfinite(given_hi)) *hi = given_hi;
}

/* Title, subtitle and legend; returns the y where the panel starts. */
static double chart_header(dpplot_canvas *cv, const dpplot_chart_axes *ax, const dpplot_legend_entry *legend,
                           size_t n_legend) {
    double top = dpplot_figure_title(cv, ax->title, ax->subtitle);
    if (!ax->title && !ax->subtitle) top = 24; /* room for the top tick label */
    double W = dpplot_canvas_width(cv);
    if (n_legend) top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 200}, legend, n_legend) + 8;
    return top;
}

static dpplot_panel_spec base_spec(const dpplot_chart_axes *ax) {
    dpplot_panel_spec s = {0};
    /* An untitled axis with a unit still says its unit. */
    s.x_label = ax->x_label ? ax->x_label : ax->x_unit != DPPLOT_UNIT_NONE ? "" : NULL;
    s.y_label = ax->y_label ? ax->y_label : ax->y_unit != DPPLOT_UNIT_NONE ? "" : NULL;
    s.x_scale = ax->x_scale, s.y_scale = ax->y_scale;
    s.x_unit = ax->x_unit, s.y_unit = ax->y_unit;
    return s;
}

static dpplot_rect body(dpplot_canvas *cv, double top) {
    return (dpplot_rect){10, top, dpplot_canvas_width(cv) - 20, dpplot_canvas_height(cv) - top - 10};
}

int dpplot_chart_lines(dpplot_canvas *cv, const dpplot_chart_axes *ax, const dpplot_series *s, size_t n) {
    dpplot_legend_entry legend[MAX_LEGEND + 1];
    size_t nl = 0, n_oom = 0;
    for (size_t i = 0; i < n; i++) {
        int any = 0;
        for (size_t k = 0; s[i].oom && k < s[i].n; k++) any |= s[i].oom[k];
        n_oom += (size_t)any;
        if (s[i].name && nl < MAX_LEGEND)
            legend[nl++] = (dpplot_legend_entry){s[i].name, s[i].color,
                                                 s[i].dashed ? DPPLOT_SWATCH_DASHED : DPPLOT_SWATCH_LINE, s[i].marker};
    }
    if (n_oom)
        legend[nl++] = (dpplot_legend_entry){"out of memory", DPPLOT_MUTED, DPPLOT_SWATCH_MARKER, DPPLOT_MARKER_CROSS};
    double top = chart_header(cv, ax, legend, nl);
    double x0, x1, y0, y1;
    dpplot_series_range(s, n, &x0, &x1, &y0, &y1);
    dpplot_panel_spec ps = base_spec(ax);
    resolve_range(ax->x_min, ax->x_max, x0, x1, ax->x_scale, 0, &ps.x_min, &ps.x_max);
    resolve_range(ax->y_min, ax->y_max, y0, y1, ax->y_scale, 1, &ps.y_min, &ps.y_max);
    ps.y_extend = !isfinite(ax->y_max) && ax->y_scale == DPPLOT_SCALE_LINEAR;
    ps.top_band = dpplot_oom_band(n_oom);
    dpplot_panel p;
    if (dpplot_panel_begin(&p, cv, body(cv, top), &ps) != 0) return -1;
    dpplot_lines_draw(&p, s, n);
    dpplot_panel_end(&p);
    return 0;
}

int dpplot_chart_bars(dpplot_canvas *cv, const dpplot_chart_axes *ax, const char *const *group_labels,
                      const char *const *series_names, const dpplot_bar_spec *b) {
    dpplot_legend_entry legend[MAX_LEGEND];
    size_t nl = 0;
    for (size_t i = 0; series_names && i < b->n_series && nl < MAX_LEGEND; i++)
        if (series_names[i])
            legend[nl++] =
                (dpplot_legend_entry){series_names[i], b->series_colors[i], DPPLOT_SWATCH_BOX, DPPLOT_MARKER_NONE};
    double top = chart_header(cv, ax, legend, nl);
    double lo, hi;
    dpplot_bars_range(b, &lo, &hi);
    dpplot_panel_spec ps = base_spec(ax);
    ps.x_categories = group_labels, ps.n_x_categories = b->n_groups;
    ps.x_scale = DPPLOT_SCALE_LINEAR;
    ps.y_scale = DPPLOT_SCALE_LINEAR; /* bars start at zero */
    ps.y_min = isfinite(ax->y_min) ? ax->y_min : lo < 0 ? lo * 1.1 : 0;
    ps.y_max = isfinite(ax->y_max) ? ax->y_max : hi > 0 ? hi * (b->group_notes ? 1.12 : 1.04) : 1;
    ps.y_extend = !isfinite(ax->y_max);
    dpplot_panel p;
    if (dpplot_panel_begin(&p, cv, body(cv, top), &ps) != 0) return -1;
    dpplot_bars_draw(&p, b);
    dpplot_panel_end(&p);
    return 0;
}

int dpplot_chart_scatter(dpplot_canvas *cv, const dpplot_chart_axes *ax, const dpplot_point *pts, size_t n) {
    double top = chart_header(cv, ax, NULL, 0);
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(pts[i].x) || !isfinite(pts[i].y)) continue;
        x0 = fmin(x0, pts[i].x), x1 = fmax(x1, pts[i].x), y0 = fmin(y0, pts[i].y), y1 = fmax(y1, pts[i].y);
    }
    dpplot_panel_spec ps = base_spec(ax);
    /* Extra room right and up, where labels go first. */
    resolve_range(ax->x_min, ax->x_max, x0, x1 + (x1 - x0) * 0.15, ax->x_scale, 1, &ps.x_min, &ps.x_max);
    resolve_range(ax->y_min, ax->y_max, y0, y1 + (y1 - y0) * 0.1, ax->y_scale, 1, &ps.y_min, &ps.y_max);
    ps.x_extend = !isfinite(ax->x_max) && ax->x_scale == DPPLOT_SCALE_LINEAR;
    ps.y_extend = !isfinite(ax->y_max) && ax->y_scale == DPPLOT_SCALE_LINEAR;
    dpplot_panel p;
    if (dpplot_panel_begin(&p, cv, body(cv, top), &ps) != 0) return -1;
    dpplot_scatter_draw(&p, pts, n, 20.0);
    dpplot_panel_end(&p);
    return 0;
}

int dpplot_chart_heatmap(dpplot_canvas *cv, const dpplot_chart_axes *ax, const char *const *x_labels,
                         const char *const *y_labels, const dpplot_heatmap_spec *h, const char *colorbar_label) {
    double top = chart_header(cv, ax, NULL, 0);
    double W = dpplot_canvas_width(cv), H = dpplot_canvas_height(cv), bar_space = 190;
    dpplot_panel_spec ps = base_spec(ax);
    ps.x_categories = x_labels, ps.n_x_categories = h->n_cols;
    ps.y_categories = y_labels, ps.n_y_categories = h->n_rows;
    ps.no_grid = 1;
    dpplot_panel p;
    if (dpplot_panel_begin(&p, cv, (dpplot_rect){10, top, W - 20 - bar_space, H - top - 10}, &ps) != 0) return -1;
    dpplot_heatmap_draw(&p, h);
    dpplot_panel_end(&p);
    dpplot_colorbar_draw(cv, (dpplot_rect){W - bar_space + 10, p.plot.y, 24, p.plot.h}, h->vmin, h->vmax,
                         h->color_scale, h->unit, colorbar_label);
    return 0;
}

int dpplot_chart_timeline(dpplot_canvas *cv, const dpplot_chart_axes *ax, const dpplot_series *s, size_t n,
                          const dpplot_shade *shades, const char *const *shade_names, size_t n_shades,
                          const dpplot_annotation *notes, size_t n_notes) {
    dpplot_legend_entry legend[MAX_LEGEND];
    size_t nl = 0;
    for (size_t i = 0; i < n && nl < MAX_LEGEND; i++)
        if (s[i].name)
            legend[nl++] = (dpplot_legend_entry){
                s[i].name, s[i].color, s[i].dashed ? DPPLOT_SWATCH_DASHED : DPPLOT_SWATCH_LINE, DPPLOT_MARKER_NONE};
    for (size_t i = 0; shade_names && i < n_shades && nl < MAX_LEGEND; i++) {
        if (!shade_names[i]) continue;
        int seen = 0;
        for (size_t j = 0; j < i; j++) seen |= shade_names[j] && strcmp(shade_names[j], shade_names[i]) == 0;
        if (!seen)
            legend[nl++] =
                (dpplot_legend_entry){shade_names[i], shades[i].color, DPPLOT_SWATCH_SHADE, DPPLOT_MARKER_NONE};
    }
    double top = chart_header(cv, ax, legend, nl);
    double x0, x1, y0, y1;
    dpplot_series_range(s, n, &x0, &x1, &y0, &y1);
    for (size_t i = 0; i < n_shades; i++) x0 = fmin(x0, shades[i].x0), x1 = fmax(x1, shades[i].x1);
    dpplot_panel_spec ps = base_spec(ax);
    ps.x_min = isfinite(ax->x_min) ? ax->x_min : x0;
    ps.x_max = isfinite(ax->x_max) ? ax->x_max : x1;
    resolve_range(ax->y_min, ax->y_max, y0, y1 * 1.08, ax->y_scale, 1, &ps.y_min, &ps.y_max);
    ps.y_extend = !isfinite(ax->y_max) && ax->y_scale == DPPLOT_SCALE_LINEAR;
    dpplot_panel p;
    if (dpplot_panel_begin(&p, cv, body(cv, top), &ps) != 0) return -1;
    dpplot_shades_draw(&p, shades, n_shades);
    dpplot_lines_draw(&p, s, n);
    for (size_t i = 0; i < n_notes; i++) dpplot_annotate(&p, notes[i].x, notes[i].y, notes[i].text, notes[i].color);
    dpplot_panel_end(&p);
    return 0;
}
