/* report_bounds.c: clip_bound.png, adaptive clipping's bound at each logical step (Opacus's
 * AdaClip: the bound moving toward the target quantile of the samples' norms), a line per run
 * that clipped adaptively, the last point the bound after the last step. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_RUNS 32

int dpplot_report_bounds(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                         dpplot_strlist *notes) {
    int usable[MAX_RUNS] = {0};
    size_t n = sel->n < MAX_RUNS ? sel->n : MAX_RUNS, idx[MAX_RUNS], n_ok = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->n_bounds > 1 ? DPPLOT_DRAWN : DPPLOT_LEFT_OUT;
        if (usable[i]) idx[n_ok++] = i;
    }
    if (n_ok == 0) return 0; /* no run clipped adaptively: nothing to say */
    dpplot_series s[MAX_RUNS];
    dpplot_legend_entry legend[MAX_RUNS];
    static double steps[MAX_RUNS][1024];
    double hi = 0, x1 = 0;
    for (size_t k = 0; k < n_ok; k++) {
        const dpplot_result *r = sel->items[idx[k]];
        size_t m = r->n_bounds < 1024 ? r->n_bounds : 1024;
        for (size_t j = 0; j < m; j++) {
            steps[k][j] = (double)j;
            if (isfinite(r->bounds[j])) hi = fmax(hi, r->bounds[j]);
        }
        x1 = fmax(x1, (double)(m - 1));
        memset(&s[k], 0, sizeof s[k]);
        s[k].name = dpplot_report_label(sel, idx[k]);
        s[k].color = dpplot_method_color(r->method);
        s[k].x = steps[k], s[k].y = r->bounds, s[k].n = m;
        s[k].marker = m <= 200 ? DPPLOT_MARKER_CIRCLE : DPPLOT_MARKER_NONE;
        s[k].line_width = 1.5;
        legend[k] = (dpplot_legend_entry){s[k].name, s[k].color, DPPLOT_SWATCH_LINE, s[k].marker};
    }
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_RUNS,
                            "Adaptive clipping: the clip bound by step") < 0)
        return -1;
    dpplot_canvas *cv = f.cv;
    double top = f.top;
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, f.W - 40, 80}, legend, n_ok) + 10;
    dpplot_panel p;
    dpplot_panel_spec ps = {0};
    ps.x_label = "Logical step (the last point: the bound after it)";
    ps.y_label = "Clip bound C";
    ps.y_unit = DPPLOT_UNIT_NONE;
    ps.x_min = 0, ps.x_max = x1 > 0 ? x1 : 1;
    ps.y_min = 0, ps.y_max = (hi > 0 ? hi : 1) * 1.08, ps.y_extend = 1;
    double bottom_note = f.leftout[0] ? 30 : 0;
    if (dpplot_panel_begin(&p, cv, (dpplot_rect){10, top, f.W - 20, f.H - top - 10 - bottom_note}, &ps) != 0) {
        (void)dpplot_strlist_addf(notes, "%s: the panel did not fit; use a larger height (dpprof plot --height H)",
                                  dpplot_report_basename(path));
    } else {
        dpplot_lines_draw(&p, s, n_ok);
        dpplot_panel_end(&p);
    }
    dpplot_figure_note(cv, f.leftout);
    return dpplot_report_save(cv, path, notes);
}
