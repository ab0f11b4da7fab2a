/* dpplot_panel.h: one set of axes on a canvas: layout, light grid, ticks, labels and title.
 *
 * A panel takes a rectangle of the canvas, measures its tick labels, and leaves `plot` (the area
 * inside the axes) to the chart drawn into it. Numeric axes map data through dpplot_axis;
 * categorical axes put category i at position i (range -0.5 .. n-0.5). Axis titles get the
 * tick unit appended ("Peak memory (GiB)"). */
#ifndef DPPLOT_PANEL_H
#define DPPLOT_PANEL_H

#include "dpplot_axis.h"
#include "dpplot_canvas.h"

/* What a panel shows. Zero-initialise, then set what applies. */
typedef struct {
    const char *title;   /* above the plot area; NULL for none */
    const char *x_label; /* axis titles; NULL for none, "" for the unit alone */
    const char *y_label;
    dpplot_scale x_scale, y_scale;
    dpplot_unit x_unit, y_unit;
    double x_min, x_max; /* data range shown (ignored for categorical axes); min >= max widens */
    double y_min, y_max;
    int x_extend, y_extend;          /* 1: round the range out to whole ticks */
    const char *const *x_categories; /* non-NULL: categorical x axis with these labels */
    size_t n_x_categories;
    const dpplot_rgb *x_category_colors; /* optional: a swatch beside each x category label */
    const dpplot_rgb *title_swatch;      /* optional: a colour swatch before the title */
    const char *const *y_categories;     /* non-NULL: categorical y axis (row 0 at the bottom) */
    size_t n_y_categories;
    const double *x_ticks; /* optional: tick the numeric x axis at these values (a sweep's values) */
    size_t n_x_ticks;      /* when their labels fit side by side, else the round ticks stay */
    double top_band;       /* px at the top of the plot area kept out of the y mapping (OOM markers) */
    int no_grid;           /* 1: no grid lines */
} dpplot_panel_spec;

typedef struct {
    dpplot_canvas *cv;
    dpplot_rect outer; /* the panel's share of the canvas */
    dpplot_rect plot;  /* area inside the axes */
    dpplot_rect data;  /* plot without the top band: where the axes map */
    dpplot_axis x, y;
    dpplot_ticks xt, yt; /* numeric ticks (n = 0 on categorical axes) */
    dpplot_panel_spec spec;
    char title_text[256]; /* the title as laid out (wrapped to the panel's width) */
    double title_size;    /* its font size, px */
} dpplot_panel;

/* Lays out and draws the axes, grid, labels and title of a panel in `outer`; the chart then
 * draws into p->plot. The spec's strings must outlive the panel. 0 on success, -1 when a range
 * is unusable (non-finite, or <= 0 on a log axis) or the rectangle is too small. */
int dpplot_panel_begin(dpplot_panel *p, dpplot_canvas *cv, dpplot_rect outer, const dpplot_panel_spec *spec);
/* Draws the axis lines on top of the chart; call after drawing the data. */
void dpplot_panel_end(dpplot_panel *p);
/* Pixel x of data value v (category index on categorical axes). */
double dpplot_panel_px(const dpplot_panel *p, double v);
/* Pixel y of data value v (category index on categorical axes). */
double dpplot_panel_py(const dpplot_panel *p, double v);
/* Restricts drawing to the plot area until dpplot_panel_unclip. */
void dpplot_panel_clip(const dpplot_panel *p);
/* Ends dpplot_panel_clip. */
void dpplot_panel_unclip(const dpplot_panel *p);

/* A figure title centred at the top of the canvas (with an optional smaller subtitle below);
 * returns the height used in px. */
double dpplot_figure_title(dpplot_canvas *cv, const char *title, const char *subtitle);
/* A short note in small muted text at the canvas's bottom-left (e.g. excluded OOM points). */
void dpplot_figure_note(dpplot_canvas *cv, const char *note);

#endif
