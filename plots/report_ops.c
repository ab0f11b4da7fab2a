/* report_ops.c: op_breakdown.png, the per-op profile (profile = "ops") of each method: time per
 * step and bytes moved per step, stacked by op category. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot_bars.h"
#include "dpplot_legend.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_METHODS 32

int dpplot_report_ops(const dpplot_selection *sel, const char *path, const dpplot_options *opt, dpplot_strlist *notes) {
    int usable[MAX_METHODS] = {0};
    size_t n = sel->n < MAX_METHODS ? sel->n : MAX_METHODS, idx[MAX_METHODS], n_ok = 0;
    int predicted = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->n_ops > 0 ? DPPLOT_DRAWN : DPPLOT_LEFT_OUT;
        if (!usable[i]) continue;
        idx[n_ok++] = i;
        predicted |= r->profile_predicted;
    }
    if (n_ok == 0) {
        (void)dpplot_strlist_addf(notes,
                                  "%s: skipped, no finished run has a per-op profile (run with profile = \"ops\")",
                                  dpplot_report_basename(path));
        return 0;
    }
    /* Categories any run spent time in, in chart order. */
    int cats[DPPLOT_N_OPCATS];
    size_t n_cat = 0;
    for (int c = 0; c < DPPLOT_N_OPCATS; c++) {
        int used = 0;
        for (size_t k = 0; k < n_ok; k++) used |= sel->items[idx[k]]->opcat_ms[c] > 0;
        if (used) cats[n_cat++] = c;
    }
    const char *labels[MAX_METHODS];
    dpplot_rgb method_colors[MAX_METHODS], cat_colors[DPPLOT_N_OPCATS];
    dpplot_legend_entry legend[DPPLOT_N_OPCATS];
    double ms[MAX_METHODS * DPPLOT_N_OPCATS], bytes[MAX_METHODS * DPPLOT_N_OPCATS];
    char ms_text[MAX_METHODS][48], bytes_text[MAX_METHODS][32];
    const char *ms_notes[MAX_METHODS], *bytes_notes[MAX_METHODS];
    for (size_t c = 0; c < n_cat; c++) {
        cat_colors[c] = dpplot_op_category_color((dpplot_op_category)cats[c]);
        legend[c] = (dpplot_legend_entry){dpplot_op_category_label((dpplot_op_category)cats[c]), cat_colors[c],
                                          DPPLOT_SWATCH_BOX, DPPLOT_MARKER_NONE};
    }
    char overhead[512] = "";
    size_t used = 0;
    for (size_t k = 0; k < n_ok; k++) {
        const dpplot_result *r = sel->items[idx[k]];
        labels[k] = dpplot_report_label(sel, idx[k]);
        method_colors[k] = dpplot_method_color(r->method);
        double t = 0, b = 0;
        for (size_t c = 0; c < n_cat; c++) {
            ms[k * n_cat + c] = r->opcat_ms[cats[c]];
            bytes[k * n_cat + c] = r->opcat_bytes[cats[c]];
            t += r->opcat_ms[cats[c]], b += r->opcat_bytes[cats[c]];
        }
        char v[32];
        dpplot_format_value(t, DPPLOT_UNIT_MS, v, sizeof v);
        if (r->has_time && r->avg_ms > 0)
            snprintf(ms_text[k], sizeof ms_text[k], "%s\n(%.0f%% of step)", v, 100.0 * t / r->avg_ms);
        else
            snprintf(ms_text[k], sizeof ms_text[k], "%s", v);
        dpplot_format_value(b, DPPLOT_UNIT_BYTES, bytes_text[k], sizeof bytes_text[k]);
        ms_notes[k] = ms_text[k], bytes_notes[k] = bytes_text[k];
        if (!r->profile_predicted && isfinite(r->profile_overhead_ms) && used < sizeof overhead - 1) {
            dpplot_format_value(r->profile_overhead_ms, DPPLOT_UNIT_MS, v, sizeof v);
            int w = snprintf(overhead + used, sizeof overhead - used, "%s%s %s", used ? ", " : "", labels[k], v);
            if (w > 0) used += (size_t)w;
        }
    }
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_METHODS,
                            predicted ? "Time and bytes by op category (modelled per op: estimated)"
                                      : "Time and bytes by op category (measured per op)") < 0)
        return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top + dpplot_legend_draw(cv, (dpplot_rect){20, f.top, W - 40, 80}, legend, n_cat) + 10;
    char note[900];
    snprintf(note, sizeof note, "%s%s%s%s", f.leftout, f.leftout[0] && overhead[0] ? ".  " : "",
             overhead[0] ? "Profiling's own cost per step: " : "", overhead);
    double bottom_note = note[0] ? 30 : 0;
    const double *vals[2] = {ms, bytes};
    const char **group_notes[2] = {ms_notes, bytes_notes};
    const char *titles[2] = {"Time per step", "Bytes moved per step (read + written)"};
    const char *y_labels[2] = {predicted ? "Time per step (estimated)" : "Time per step", "Bytes per step"};
    dpplot_unit units[2] = {DPPLOT_UNIT_MS, DPPLOT_UNIT_BYTES};
    for (int panel = 0; panel < 2; panel++) {
        dpplot_bar_spec b = {n_ok, n_cat, vals[panel], cat_colors, 1, group_notes[panel], 1, units[panel], 0.6};
        double lo, hi;
        dpplot_bars_range(&b, &lo, &hi);
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.title = titles[panel];
        s.y_label = y_labels[panel];
        s.y_unit = units[panel];
        s.y_min = 0, s.y_max = (hi > 0 ? hi : 1) * 1.15, s.y_extend = 1;
        /* The totals over the bars in the axis's own unit, chosen once from the same range the
         * ticks choose it from: "1.09 TiB" bars under a TiB axis, never "1115 GiB". */
        const char *unit_name;
        double divisor;
        dpplot_unit_choose(units[panel], s.y_max, &unit_name, &divisor);
        for (size_t k = 0; k < n_ok; k++) {
            double total = 0;
            for (size_t c = 0; c < n_cat; c++) total += vals[panel][k * n_cat + c];
            char v[32];
            double shown = total / divisor;
            snprintf(v, sizeof v, "%.*f %s", shown >= 100 ? 0 : shown >= 10 ? 1 : 2, shown, unit_name);
            const dpplot_result *r = sel->items[idx[k]];
            if (panel == 0 && r->has_time && r->avg_ms > 0)
                snprintf(ms_text[k], sizeof ms_text[k], "%s\n(%.0f%% of step)", v, 100.0 * total / r->avg_ms);
            else if (panel == 0)
                snprintf(ms_text[k], sizeof ms_text[k], "%s", v);
            else
                snprintf(bytes_text[k], sizeof bytes_text[k], "%s", v);
        }
        s.x_categories = labels, s.n_x_categories = n_ok, s.x_category_colors = method_colors;
        dpplot_rect outer = {10 + (W - 20) / 2 * panel, top, (W - 20) / 2 - 10, H - top - 10 - bottom_note};
        if (dpplot_panel_begin(&p, cv, outer, &s) != 0) continue;
        dpplot_bars_draw(&p, &b);
        dpplot_panel_end(&p);
    }
    dpplot_figure_note(cv, note);
    return dpplot_report_save(cv, path, notes);
}
