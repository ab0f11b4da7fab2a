/* report_timeline.c: memory_timeline.png. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_PANELS 12

/* Draws one method's panel; returns 0, or -1 when the panel did not fit. */
static int draw_panel(dpplot_canvas *cv, dpplot_rect outer, const dpplot_result *r, const char *label, double t_max,
                      double y_max, int x_title, int y_title) {
    dpplot_rgb color = dpplot_method_color(r->method);
    dpplot_panel p;
    dpplot_panel_spec s = {0};
    s.title = label;
    s.title_swatch = &color;
    /* a plan run's timeline is the host's accounting run, not the modelled device's time */
    s.x_label = !x_title ? NULL : r->predicted ? "Host time of the plan run, not device time" : "Time since start";
    s.y_label = y_title ? "Memory" : NULL;
    s.x_unit = DPPLOT_UNIT_MS, s.y_unit = DPPLOT_UNIT_BYTES;
    s.x_min = 0, s.x_max = t_max;
    s.y_min = 0, s.y_max = y_max, s.y_extend = 1;
    if (dpplot_panel_begin(&p, cv, outer, &s) != 0) return -1;
    dpplot_shade shades[1024];
    size_t n_sh = 0;
    for (size_t i = 0; i < r->n_spans && n_sh < 1024; i++)
        shades[n_sh++] = (dpplot_shade){r->spans[i].start_ms, r->spans[i].end_ms,
                                        dpplot_phase_color((dpplot_phase)r->spans[i].phase), 0.30};
    dpplot_shades_draw(&p, shades, n_sh);
    dpplot_series series[2] = {
        {"reserved", dpplot_rgb_mix(color, DPPLOT_INK, 0.35), r->t_ms, r->reserved_bytes, r->n_timeline, NULL,
         DPPLOT_MARKER_NONE, 1, 1, 1.8, 0.0},
        {"allocated", color, r->t_ms, r->allocated_bytes, r->n_timeline, NULL, DPPLOT_MARKER_NONE, 0, 1, 2.6, 0.15},
    };
    dpplot_lines_draw(&p, series, 2);
    size_t peak = 0;
    for (size_t i = 0; i < r->n_timeline; i++)
        if (isfinite(r->allocated_bytes[i]) &&
            (!isfinite(r->allocated_bytes[peak]) || r->allocated_bytes[i] > r->allocated_bytes[peak]))
            peak = i;
    if (r->n_timeline > 0 && isfinite(r->allocated_bytes[peak])) {
        char v[32], text[48];
        dpplot_format_value(r->allocated_bytes[peak], DPPLOT_UNIT_BYTES, v, sizeof v);
        snprintf(text, sizeof text, "peak %s", v);
        dpplot_annotate(&p, r->t_ms[peak], r->allocated_bytes[peak], text, color);
    }
    dpplot_panel_end(&p);
    return 0;
}

int dpplot_report_timeline(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                           dpplot_strlist *notes) {
    int usable[64] = {0};
    size_t n = sel->n < 64 ? sel->n : 64, idx[MAX_PANELS], n_ok = 0;
    double t_max = 0, y_max = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->n_timeline > 1 && n_ok < MAX_PANELS;
        if (!usable[i]) continue;
        idx[n_ok++] = i;
        for (size_t k = 0; k < r->n_timeline; k++) {
            if (isfinite(r->t_ms[k])) t_max = fmax(t_max, r->t_ms[k]);
            if (isfinite(r->allocated_bytes[k])) y_max = fmax(y_max, r->allocated_bytes[k]);
            if (isfinite(r->reserved_bytes[k])) y_max = fmax(y_max, r->reserved_bytes[k]);
        }
    }
    if (n_ok == 0 || !(t_max > 0) || !(y_max > 0)) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, no finished run has a memory timeline",
                                  dpplot_report_basename(path));
        return 0;
    }
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, "Memory over time") < 0) return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top;
    char *leftout = f.leftout;
    dpplot_legend_entry legend[DPPLOT_N_PHASES + 2];
    size_t nl = 0;
    legend[nl++] = (dpplot_legend_entry){"allocated", DPPLOT_MUTED, DPPLOT_SWATCH_LINE, DPPLOT_MARKER_NONE};
    legend[nl++] = (dpplot_legend_entry){"reserved", DPPLOT_MUTED, DPPLOT_SWATCH_DASHED, DPPLOT_MARKER_NONE};
    for (int ph = 0; ph < DPPLOT_N_PHASES; ph++) {
        int used = 0;
        for (size_t k = 0; k < n_ok; k++) {
            const dpplot_result *r = sel->items[idx[k]];
            for (size_t s = 0; s < r->n_spans && !used; s++) used = r->spans[s].phase == ph;
        }
        if (used)
            legend[nl++] =
                (dpplot_legend_entry){dpplot_phase_name((dpplot_phase)ph), dpplot_phase_color((dpplot_phase)ph),
                                      DPPLOT_SWATCH_SHADE, DPPLOT_MARKER_NONE};
    }
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, nl) + 6;
    double bottom_note = leftout[0] ? 30 : 0;
    size_t cols = n_ok <= 3 ? 1 : 2, rows = (n_ok + cols - 1) / cols;
    double cell_w = (W - 20) / (double)cols, cell_h = (H - top - 10 - bottom_note) / (double)rows;
    for (size_t k = 0; k < n_ok; k++) {
        size_t row = k / cols, col = k % cols;
        dpplot_rect outer = {10 + cell_w * (double)col, top + cell_h * (double)row, cell_w - 10, cell_h - 6};
        /* Axis titles once: x on the bottom panel of each column, y on the left column. */
        int last_in_col = row == rows - 1 || (row == rows - 2 && k + cols >= n_ok);
        if (draw_panel(cv, outer, sel->items[idx[k]], dpplot_report_label(sel, idx[k]), t_max, y_max * 1.12,
                       last_in_col, col == 0) != 0)
            (void)dpplot_strlist_addf(notes, "%s: panel for %s did not fit; use a larger --height",
                                      dpplot_report_basename(path), dpplot_report_label(sel, idx[k]));
    }
    dpplot_figure_note(cv, leftout);
    return dpplot_report_save(cv, path, notes);
}
