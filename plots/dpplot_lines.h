/* dpplot_lines.h: markers, lines (with step curves and OOM points), scatter with non-overlapping
 * point labels, shaded x spans and annotations, all drawn into a dpplot_panel. */
#ifndef DPPLOT_LINES_H
#define DPPLOT_LINES_H

#include "dpplot_panel.h"

typedef enum {
    DPPLOT_MARKER_NONE,
    DPPLOT_MARKER_CIRCLE,
    DPPLOT_MARKER_SQUARE,
    DPPLOT_MARKER_TRIANGLE,
    DPPLOT_MARKER_DIAMOND,
    DPPLOT_MARKER_CROSS, /* ×: used for OOM points */
    DPPLOT_MARKER_TRIANGLE_DOWN,
    DPPLOT_MARKER_HEXAGON
} dpplot_marker;

/* Draws a marker of `size` px centred at (x, y); hollow 1 draws the outline on white, 2 the
 * outline alone (what lies under it shows through). */
void dpplot_marker_draw(cairo_t *cr, double x, double y, double size, dpplot_marker m, dpplot_rgb color, int hollow);
/* A marker shape per method (a second cue beside colour, for greyscale prints). */
dpplot_marker dpplot_method_marker(const char *method);
/* Parses "none", "circle", "square", "triangle", "diamond", "cross", "triangle_down",
 * "hexagon"; -1 otherwise. */
int dpplot_marker_parse(const char *s);

/* One line series. Arrays are borrowed; NaN in y leaves a gap. */
typedef struct {
    const char *name;
    dpplot_rgb color;
    const double *x, *y;
    size_t n;
    const unsigned char *oom; /* optional, n flags: 1 where the point did not fit (y ignored);
                                 drawn as a × in the panel's top band, labelled OOM */
    dpplot_marker marker;
    int dashed;                /* line pattern: 0 solid, 1 dashed, 2 dotted, 3 dash-dot (dpplot_dash) */
    int step;                  /* 1: post-step curve (value holds until the next x) */
    double line_width;         /* px; 0 means 2.5 */
    double fill_alpha;         /* > 0: fill between the curve and the bottom of the plot */
    const double *y_lo, *y_hi; /* optional, n values: whiskers from y_lo to y_hi (the spread of
                                  repeated runs); NaN leaves a point without one */
    int hollow;                /* markers: 1 outlined on white, 2 a ring (one under it shows through) */
    double marker_size;        /* px; 0 means 13 */
    const unsigned char *ring; /* optional, n flags: 1 draws that point's marker as a ring of 21 px
                                  (it coincides with another series' point, which shows inside) */
} dpplot_series;

/* Line patterns of dpplot_series.dashed. */
typedef enum { DPPLOT_DASH_SOLID, DPPLOT_DASH_DASHED, DPPLOT_DASH_DOTTED, DPPLOT_DASH_DASHDOT } dpplot_dash;
/* Sets cr's dash pattern to `dash` (scaled to line width w). */
void dpplot_set_dash(cairo_t *cr, int dash, double w);

/* Draws the series into p (clipped to the plot area; OOM crosses in the top band, which needs
 * spec.top_band >= dpplot_oom_band(n)). */
void dpplot_lines_draw(dpplot_panel *p, const dpplot_series *s, size_t n);
/* Top band height in px that OOM markers of up to n series need. */
double dpplot_oom_band(size_t n_series);
/* Range of the series' finite, non-OOM data; returns 0 when there was none. */
int dpplot_series_range(const dpplot_series *s, size_t n, double *x_min, double *x_max, double *y_min, double *y_max);

/* One labelled scatter point. */
typedef struct {
    double x, y;
    const char *label; /* may contain '\n'; NULL for none */
    dpplot_rgb color;
    dpplot_marker marker;
    int hollow; /* outline only (e.g. predicted, not measured) */
} dpplot_point;

/* Draws points with markers of `marker_size` px and places each label beside its point where it
 * overlaps no other label or marker and stays inside the plot (with a leader line when it had to
 * move away). Markers that would cover each other (dpplot_points_coincide) are drawn side by
 * side around a dot at the shared position, so none hides another. */
void dpplot_scatter_draw(dpplot_panel *p, const dpplot_point *pts, size_t n, double marker_size);
/* Groups points whose markers of `marker_size` px would cover each other in p: group[i] is the
 * index of the first point of i's group (i itself when alone or first). Returns the number of
 * points that share a group with an earlier one (0: no marker hides another). */
size_t dpplot_points_coincide(const dpplot_panel *p, const dpplot_point *pts, size_t n, double marker_size,
                              size_t *group);

/* A shaded span of x values across the whole plot height. */
typedef struct {
    double x0, x1;
    dpplot_rgb color;
    double alpha;
    double min_width_px; /* a span narrower than this is widened about its centre (0: 1 px) */
} dpplot_shade;

/* Draws shaded x spans behind the data (call before dpplot_lines_draw). */
void dpplot_shades_draw(dpplot_panel *p, const dpplot_shade *s, size_t n);
/* Marks the data point (x, y) with a dot and a bold label with a leader line, placed inside the
 * plot area on whichever side has room. */
void dpplot_annotate(dpplot_panel *p, double x, double y, const char *text, dpplot_rgb color);
/* dpplot_annotate with the label kept clear of the curves of `avoid` (their drawn segments, steps
 * included) and of the text already placed in the plot, where any candidate place allows. */
void dpplot_annotate_clear(dpplot_panel *p, double x, double y, const char *text, dpplot_rgb color,
                           const dpplot_series *avoid, size_t n_avoid);
/* 1 when a drawn segment of series s (as dpplot_lines_draw draws it in p) crosses rectangle r. */
int dpplot_series_crosses(const dpplot_panel *p, const dpplot_series *s, dpplot_rect r);

#endif
