/* dpplot_legend.h: legends laid out in horizontal rows above the plot area, so they never cover
 * data. Entries wrap onto more rows when the width runs out; each row is centred. */
#ifndef DPPLOT_LEGEND_H
#define DPPLOT_LEGEND_H

#include "dpplot_canvas.h"
#include "dpplot_lines.h"

typedef enum {
    DPPLOT_SWATCH_BOX,     /* filled square: bars, heatmap cells */
    DPPLOT_SWATCH_LINE,    /* line with the entry's marker */
    DPPLOT_SWATCH_DASHED,  /* dashed line: reserved memory */
    DPPLOT_SWATCH_SHADE,   /* light square: phase spans */
    DPPLOT_SWATCH_MARKER,  /* marker alone: scatter points, OOM crosses */
    DPPLOT_SWATCH_DOTTED,  /* dotted line with the entry's marker (hollow) */
    DPPLOT_SWATCH_DASHDOT, /* dash-dot line with the entry's marker */
    DPPLOT_SWATCH_WHISKER, /* an I-bar: the min-max whiskers of a spread */
    DPPLOT_SWATCH_NOTE     /* no swatch: a note about the chart in the legend's row */
} dpplot_swatch;

/* The line swatch of a series' dash pattern (dpplot_series.dashed). */
dpplot_swatch dpplot_swatch_of_dash(int dash);

typedef struct {
    const char *label;
    dpplot_rgb color;
    dpplot_swatch swatch;
    dpplot_marker marker; /* for LINE and MARKER swatches */
} dpplot_legend_entry;

/* Height in px the entries need when laid out in rows within `width` px (0 when n is 0). */
double dpplot_legend_height(dpplot_canvas *cv, double width, const dpplot_legend_entry *e, size_t n);
/* Draws the entries in centred rows from the top of `area`; returns the height used in px. */
double dpplot_legend_draw(dpplot_canvas *cv, dpplot_rect area, const dpplot_legend_entry *e, size_t n);

#endif
