/* dpplot_heatmap.h: heatmaps on categorical x and y axes with the viridis colormap, and a
 * colorbar to read them by. */
#ifndef DPPLOT_HEATMAP_H
#define DPPLOT_HEATMAP_H

#include "dpplot_panel.h"

typedef struct {
    size_t n_cols, n_rows;
    const double *values;     /* n_rows × n_cols, row-major, row 0 at the bottom; NaN = no data */
    const unsigned char *oom; /* optional flags in the same layout: drawn hatched, labelled OOM */
    double vmin, vmax;        /* colour range in data units (vmin < vmax) */
    dpplot_scale color_scale; /* mapping of values to colours: linear, log2 or log10 */
    dpplot_unit unit;         /* unit of the cell labels */
    int show_values;          /* 1: print each value in its cell (in black or white, for contrast) */
    /* optional flags in the same layout: a value predicted not to fit the card, drawn with red hatching */
    const unsigned char *unfit;
} dpplot_heatmap_spec;

/* Draws the cells into p (a panel with categorical x of n_cols and y of n_rows categories). */
void dpplot_heatmap_draw(dpplot_panel *p, const dpplot_heatmap_spec *h);
/* Colour of value v under the spec's range and scale. */
dpplot_rgb dpplot_heatmap_color(const dpplot_heatmap_spec *h, double v);
/* Draws a vertical colorbar in r (the bar on the left, ticks and labels right of it, the label
 * rotated along the right edge) for [vmin, vmax] under `scale` with values in `unit`. */
void dpplot_colorbar_draw(dpplot_canvas *cv, dpplot_rect r, double vmin, double vmax, dpplot_scale scale,
                          dpplot_unit unit, const char *label);

#endif
