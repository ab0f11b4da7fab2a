/* report_tradeoff.c: performance_tradeoff.png. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"
#include "sweep_util.h"

#define MAX_POINTS 128

/* Appends s to the NUL-terminated buf of size bytes, cutting what does not fit. */
static void note_add(char *buf, size_t size, const char *s) {
    size_t len = strlen(buf);
    if (len + 1 < size) snprintf(buf + len, size - len, "%s", s);
}

int dpplot_report_tradeoff(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                           dpplot_strlist *notes) {
    int usable[MAX_POINTS] = {0};
    size_t n = sel->n < MAX_POINTS ? sel->n : MAX_POINTS, n_ok = 0;
    const dpplot_result *vanilla = NULL;
    double max_mem = 0, max_ms = 0, min_mem = INFINITY;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->has_peak && r->has_time ? DPPLOT_DRAWN : DPPLOT_LEFT_OUT;
        if (!usable[i]) continue;
        n_ok++;
        max_mem = fmax(max_mem, r->peak_bytes), max_ms = fmax(max_ms, dpplot_step_ms(r, NULL, NULL));
        min_mem = fmin(min_mem, r->peak_bytes);
        if (!vanilla && dpplot_method_rank(r->method) == 0) vanilla = r;
    }
    if (n_ok == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, no finished run has both peak memory and time",
                                  dpplot_report_basename(path));
        return 0;
    }
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_POINTS, "Peak memory against step time") < 0)
        return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top;
    char *leftout = f.leftout;

    dpplot_panel p;
    dpplot_panel_spec s = {0};
    int predicted = 0, calibrated = 0, spread = 0, runs = 1;
    for (size_t i = 0; i < n; i++)
        if (usable[i] == DPPLOT_DRAWN) {
            const dpplot_result *r = sel->items[i];
            predicted |= r->predicted;
            calibrated |= r->predicted && r->calibrated;
            spread |= isfinite(r->time_lo_ms) && r->time_hi_ms > r->time_lo_ms;
            if (r->n_runs > runs) runs = r->n_runs;
            if (isfinite(r->time_hi_ms)) max_ms = fmax(max_ms, r->time_hi_ms);
        }
    /* A plan run's step time is its device model's, one number: no spread to speak of. */
    if (predicted) spread = 0;
    char y_title[96];
    snprintf(y_title, sizeof y_title, "%s%s",
             !predicted ? "Time per step"
             : calibrated ? "Time per step (estimated, calibrated model)"
                          : "Time per step (estimated, roofline model)",
             !spread    ? ""
             : runs > 1 ? ": median, min-max of the runs"
                        : ": median, min-max of the iterations");
    s.y_label = y_title;
    s.x_unit = DPPLOT_UNIT_BYTES, s.y_unit = DPPLOT_UNIT_MS;
    /* Time from zero, so distances read as proportions. Memory from zero too (with a plan run's
     * card when the data reach half of it) unless the points crowd into a sliver of it (every method
     * near 55 of 80 GiB): then the axis spans the data, with room for the labels, says it does not
     * start at zero, and the card beyond it is noted at the axis's end. */
    const dpplot_result *used_items[MAX_POINTS];
    size_t n_used = 0;
    for (size_t i = 0; i < n; i++)
        if (usable[i] && n_used < MAX_POINTS) used_items[n_used++] = sel->items[i];
    double card = dpplot_report_card_bytes(used_items, n_used); /* a plan run's card, on the memory axis */
    s.x_label = "Peak memory";
    s.x_min = 0, s.x_max = fmax(max_mem * 1.25, dpplot_report_card_axis(max_mem, card) * 1.05), s.x_extend = 1;
    double span = max_mem - min_mem;
    if (n_ok > 1 && min_mem > 0.4 * max_mem) {
        double pad = fmax(span * 0.3, max_mem * 0.02);
        s.x_min = min_mem - pad, s.x_max = max_mem + pad * 1.6;
        s.x_label = "Peak memory (axis zoomed to the points, not from zero)";
    }
    s.y_min = 0, s.y_max = max_ms * 1.2, s.y_extend = 1;
    /* Marker shapes say the method as the colours do (for greyscale prints): a legend of both. */
    dpplot_legend_entry legend[MAX_POINTS + 1];
    size_t nl = 0;
    for (size_t i = 0; i < n && nl < MAX_POINTS; i++) {
        if (!usable[i]) continue;
        const dpplot_result *r = sel->items[i];
        legend[nl++] = (dpplot_legend_entry){dpplot_report_label(sel, i), dpplot_method_color(r->method),
                                             DPPLOT_SWATCH_MARKER, dpplot_method_marker(r->method)};
    }
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, nl) + 4;
    double note_h = dpplot_line_height(cv, DPPLOT_FONT_LEGEND) + 8; /* a line for the coincidence note */
    double bottom_note = leftout[0] ? 30 : 0;
    if (dpplot_panel_begin(&p, cv, (dpplot_rect){10, top + note_h, W - 20, H - top - note_h - 10 - bottom_note}, &s) !=
        0) {
        dpplot_canvas_free(cv);
        return 0;
    }
    dpplot_report_card_line(&p, card, 1);
    cairo_t *cr = dpplot_canvas_cr(cv);
    if (vanilla && n_ok > 1) { /* vanilla's memory and time as dashed references */
        cairo_save(cr);
        double dash[2] = {6.0, 5.0};
        cairo_set_dash(cr, dash, 2, 0);
        cairo_set_line_width(cr, 1.5);
        dpplot_set_color(cr, dpplot_method_color(vanilla->method), 0.7);
        double x = dpplot_panel_px(&p, vanilla->peak_bytes);
        double y = dpplot_panel_py(&p, dpplot_metric_value(NULL, vanilla, DPPLOT_METRIC_TIME, NULL, NULL));
        cairo_move_to(cr, x, p.plot.y);
        cairo_line_to(cr, x, p.plot.y + p.plot.h);
        cairo_move_to(cr, p.plot.x, y);
        cairo_line_to(cr, p.plot.x + p.plot.w, y);
        cairo_stroke(cr);
        cairo_restore(cr);
    }
    dpplot_point pts[MAX_POINTS];
    char text[MAX_POINTS][160];
    size_t m = 0;
    double vanilla_ms = vanilla ? dpplot_metric_value(NULL, vanilla, DPPLOT_METRIC_TIME, NULL, NULL) : NAN;
    for (size_t i = 0; i < n; i++) {
        if (!usable[i]) continue;
        const dpplot_result *r = sel->items[i];
        double lo, hi, t = dpplot_metric_value(NULL, r, DPPLOT_METRIC_TIME, &lo, &hi);
        char mem[32], ms[32];
        dpplot_format_value(r->peak_bytes, DPPLOT_UNIT_BYTES, mem, sizeof mem);
        dpplot_format_value(t, DPPLOT_UNIT_MS, ms, sizeof ms);
        if (vanilla && r != vanilla)
            snprintf(text[m], sizeof text[m], "%s\n%s (%+.0f%%), %s (×%.2f)", dpplot_report_label(sel, i), mem,
                     100.0 * (r->peak_bytes / vanilla->peak_bytes - 1.0), ms, t / vanilla_ms);
        else
            snprintf(text[m], sizeof text[m], "%s\n%s, %s", dpplot_report_label(sel, i), mem, ms);
        pts[m] = (dpplot_point){
            r->peak_bytes, t, text[m], dpplot_method_color(r->method), dpplot_method_marker(r->method), r->predicted};
        if (isfinite(lo) && hi > lo) { /* the spread as a whisker through the point */
            double x = dpplot_panel_px(&p, r->peak_bytes), y0 = dpplot_panel_py(&p, lo), y1 = dpplot_panel_py(&p, hi);
            cairo_save(cr);
            cairo_set_line_width(cr, 2.0);
            dpplot_set_color(cr, dpplot_method_color(r->method), 0.9);
            cairo_move_to(cr, x, y0), cairo_line_to(cr, x, y1);
            cairo_move_to(cr, x - 7, y0), cairo_line_to(cr, x + 7, y0);
            cairo_move_to(cr, x - 7, y1), cairo_line_to(cr, x + 7, y1);
            cairo_stroke(cr);
            cairo_restore(cr);
        }
        m++;
    }
    /* Points whose markers would cover each other are drawn side by side; the line above the
     * plot says which, as the chart would otherwise seem to show them apart. */
    size_t group[MAX_POINTS];
    if (dpplot_points_coincide(&p, pts, m, 22.0, group) > 0) {
        char note[512] = "";
        for (size_t g = 0; g < m; g++) {
            size_t members = 0;
            for (size_t i = 0; i < m; i++) members += group[i] == g;
            if (members < 2) continue;
            if (note[0]) note_add(note, sizeof note, "; ");
            for (size_t i = 0, k = 0; i < m; i++) {
                if (group[i] != g) continue;
                char name[96];
                snprintf(name, sizeof name, "%s", pts[i].label ? pts[i].label : "?");
                name[strcspn(name, "\n")] = '\0'; /* the label's first line is its method */
                if (k++) note_add(note, sizeof note, ", ");
                note_add(note, sizeof note, name);
            }
            note_add(note, sizeof note, " coincide");
        }
        /* one line within the canvas: a long list (many runs at one value) is cut with an
         * ellipsis, the explanation after it kept */
        static const char why[] = " (markers drawn side by side around the shared value)";
        char line[640];
        double room = W - 160 - dpplot_text_width(cv, why, DPPLOT_FONT_LEGEND, 0); /* clear of the y title */
        dpplot_text_fit(cv, note, room > 100 ? room : 100, DPPLOT_FONT_LEGEND, DPPLOT_FONT_LEGEND, 0, 1, line,
                        sizeof line - sizeof why);
        strcat(line, why);
        dpplot_text_style st = dpplot_style(DPPLOT_FONT_LEGEND, 0, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_TOP);
        dpplot_text(cv, W / 2, top, line, &st);
    }
    dpplot_scatter_draw(&p, pts, m, 22.0);
    dpplot_panel_end(&p);
    dpplot_figure_note(cv, leftout);
    return dpplot_report_save(cv, path, notes);
}
