/* dpplot_options.h: options shared by dpplot_render_dir and the standard charts. */
#ifndef DPPLOT_OPTIONS_H
#define DPPLOT_OPTIONS_H

#include "dpplot_canvas.h"

/* Receives one message (a single line, no newline); `user` is options.warn_user. */
typedef void (*dpplot_warn_fn)(void *user, const char *message);

typedef struct {
    int width, height;   /* logical px of each chart; 0 means 1600×1000 */
    double scale;        /* device px per logical px (2 for high-DPI); 0 means 1 */
    dpplot_warn_fn warn; /* problems (malformed input) and notes (skipped charts); NULL: silent */
    void *warn_user;
    const char *point;       /* "key=value,..." (NULL: none): the sweep point(s) the standard charts
                                show, and the values heatmaps hold fixed */
    const char *heatmap;     /* "x_key,y_key" (NULL: the first two swept keys): the heatmaps' axes */
    dpplot_layout_fn layout; /* NULL, or gets every text box of each chart written (layout tests) */
    void *layout_user;
    int timelines_each; /* 1: also one memory_timeline_<point>.png per configuration of a sweep */
} dpplot_options;

/* Options with every field at its default (1600×1000, scale 1, no warn callback, no point or
 * heatmap axes chosen). */
dpplot_options dpplot_options_default(void);
/* opt with zero fields replaced by defaults (opt may be NULL). */
dpplot_options dpplot_options_resolve(const dpplot_options *opt);

#endif
