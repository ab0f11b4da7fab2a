/* report_steps.c: step_peaks.png, the peak of every timed step of runs whose steps differ (Poisson
 * batch sizes, samples of their own lengths padded per physical batch): a line per run, and on
 * plan runs the card's memory, so a step that would not fit shows as a point above it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_RUNS 32

int dpplot_report_steps(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                        dpplot_strlist *notes) {
    int usable[MAX_RUNS] = {0};
    size_t n = sel->n < MAX_RUNS ? sel->n : MAX_RUNS, idx[MAX_RUNS], n_ok = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->n_steps > 0 ? DPPLOT_DRAWN : DPPLOT_LEFT_OUT;
        if (usable[i]) idx[n_ok++] = i;
    }
    if (n_ok == 0) return 0; /* runs of fixed, equal steps (the usual ones): nothing to say */
    dpplot_series s[MAX_RUNS];
    dpplot_legend_entry legend[MAX_RUNS];
    const dpplot_result *used[MAX_RUNS];
    double hi = 0, x0 = INFINITY, x1 = -INFINITY;
    size_t over = 0, total = 0; /* steps above the card, of all drawn */
    for (size_t k = 0; k < n_ok; k++) {
        const dpplot_result *r = sel->items[idx[k]];
        used[k] = r;
        memset(&s[k], 0, sizeof s[k]);
        s[k].name = dpplot_report_label(sel, idx[k]);
        s[k].color = dpplot_method_color(r->method);
        s[k].x = r->step_index, s[k].y = r->step_peak_bytes, s[k].n = r->n_steps;
        s[k].marker = r->n_steps <= 200 ? DPPLOT_MARKER_CIRCLE : DPPLOT_MARKER_NONE;
        s[k].line_width = 1.5;
        legend[k] = (dpplot_legend_entry){s[k].name, s[k].color, DPPLOT_SWATCH_LINE, s[k].marker};
        for (size_t j = 0; j < r->n_steps; j++) {
            if (isfinite(r->step_peak_bytes[j])) hi = fmax(hi, r->step_peak_bytes[j]);
            x0 = fmin(x0, r->step_index[j]), x1 = fmax(x1, r->step_index[j]);
        }
    }
    double card = dpplot_report_card_bytes(used, n_ok);
    if (isfinite(card))
        for (size_t k = 0; k < n_ok; k++)
            for (size_t j = 0; j < used[k]->n_steps; j++) over += used[k]->step_peak_bytes[j] > card, total++;
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_RUNS, "Peak memory of each step") < 0) return -1;
    dpplot_canvas *cv = f.cv;
    double top = f.top;
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, f.W - 40, 80}, legend, n_ok) + 10;
    if (isfinite(card)) {
        size_t used_len = strlen(f.leftout);
        snprintf(f.leftout + used_len, sizeof f.leftout - used_len, "%s%zu of %zu steps above the card's memory",
                 used_len ? ".  " : "", over, total);
    }
    dpplot_panel p;
    dpplot_panel_spec ps = {0};
    ps.x_label = "Step";
    ps.y_label = "Peak memory";
    ps.y_unit = DPPLOT_UNIT_BYTES;
    ps.x_min = x0 == x1 ? x0 - 1 : x0, ps.x_max = x0 == x1 ? x1 + 1 : x1;
    ps.y_min = 0, ps.y_max = dpplot_report_card_axis(hi > 0 ? hi : 1, card) * 1.08, ps.y_extend = 1;
    double bottom_note = f.leftout[0] ? 30 : 0;
    if (dpplot_panel_begin(&p, cv, (dpplot_rect){10, top, f.W - 20, f.H - top - 10 - bottom_note}, &ps) != 0) {
        (void)dpplot_strlist_addf(notes, "%s: the panel did not fit; use a larger height (dpprof plot --height H)",
                                  dpplot_report_basename(path));
    } else {
        dpplot_lines_draw(&p, s, n_ok);
        dpplot_report_card_line(&p, card, 0);
        dpplot_panel_end(&p);
    }
    dpplot_figure_note(cv, f.leftout);
    return dpplot_report_save(cv, path, notes);
}
