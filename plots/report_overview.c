/* report_overview.c: memory_analysis_overview.png, the one page a reader looks for first: the peak
 * of each run, its components at the peak, and its step time, side by side. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot_bars.h"
#include "dpplot_legend.h"
#include "dpplot_palette.h"
#include "report_util.h"
#include "sweep_util.h"

#define MAX_GROUPS 64

int dpplot_report_overview(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                           dpplot_strlist *notes) {
    int usable[MAX_GROUPS] = {0};
    size_t n = sel->n < MAX_GROUPS ? sel->n : MAX_GROUPS, n_ok = 0, idx[MAX_GROUPS];
    int predicted = 0, any_components = 0, any_time = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->has_peak ? DPPLOT_DRAWN : DPPLOT_LEFT_OUT;
        if (!usable[i]) continue;
        idx[n_ok++] = i;
        predicted |= r->predicted;
        any_components |= r->has_components;
        any_time |= r->has_time;
    }
    if (n_ok == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, no finished run has a peak", dpplot_report_basename(path));
        return 0;
    }
    dpplot_component comps[DPPLOT_N_COMPONENTS];
    size_t n_comp = 0;
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) {
        int used = 0;
        for (size_t k = 0; k < n_ok; k++)
            used |= sel->items[idx[k]]->has_components && sel->items[idx[k]]->component_bytes[c] > 0;
        if (used) comps[n_comp++] = (dpplot_component)c;
    }
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_GROUPS, "Memory analysis overview") < 0)
        return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top;
    dpplot_legend_entry legend[DPPLOT_N_COMPONENTS];
    dpplot_rgb comp_colors[DPPLOT_N_COMPONENTS];
    for (size_t c = 0; c < n_comp; c++) {
        comp_colors[c] = dpplot_component_color(comps[c]);
        legend[c] = (dpplot_legend_entry){dpplot_report_component_label(sel, comps[c]), comp_colors[c], DPPLOT_SWATCH_BOX,
                                          DPPLOT_MARKER_NONE};
    }
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, n_comp) + 8;
    double bottom_note = f.leftout[0] ? 30 : 0;

    const char *labels[MAX_GROUPS];
    dpplot_rgb method_colors[MAX_GROUPS];
    char peak_text[MAX_GROUPS][32], time_text[MAX_GROUPS][32];
    const char *peak_notes[MAX_GROUPS], *time_notes[MAX_GROUPS];
    double peaks[MAX_GROUPS], times[MAX_GROUPS], components[MAX_GROUPS * DPPLOT_N_COMPONENTS];
    for (size_t k = 0; k < n_ok; k++) {
        const dpplot_result *r = sel->items[idx[k]];
        labels[k] = dpplot_report_label(sel, idx[k]);
        method_colors[k] = dpplot_method_color(r->method);
        peaks[k] = r->peak_bytes;
        times[k] = dpplot_step_ms(r, NULL, NULL); /* the median, as every table and chart */
        for (size_t c = 0; c < n_comp; c++)
            components[k * n_comp + c] = r->has_components ? r->component_bytes[comps[c]] : NAN;
        dpplot_format_value(r->peak_bytes, DPPLOT_UNIT_BYTES, peak_text[k], sizeof peak_text[k]);
        dpplot_format_value(times[k], DPPLOT_UNIT_MS, time_text[k], sizeof time_text[k]);
        peak_notes[k] = peak_text[k];
        time_notes[k] = isfinite(times[k]) ? time_text[k] : NULL;
    }
    /* Three panels across: the peak, its components, the time (each only where there is data). */
    dpplot_bar_spec specs[3] = {
        {n_ok, 1, peaks, NULL, 1, peak_notes, 0, DPPLOT_UNIT_BYTES, 0.6},
        {n_ok, n_comp, components, comp_colors, 1, NULL, 1, DPPLOT_UNIT_BYTES, 0.6},
        {n_ok, 1, times, NULL, 1, time_notes, 0, DPPLOT_UNIT_MS, 0.6},
    };
    const char *titles[3] = {"Peak memory", "At the peak, by component",
                             predicted ? "Time per step (estimated)" : "Time per step (median)"};
    dpplot_unit units[3] = {DPPLOT_UNIT_BYTES, DPPLOT_UNIT_BYTES, DPPLOT_UNIT_MS};
    int shown[3] = {1, any_components && n_comp > 0, any_time};
    size_t n_shown = (size_t)(shown[0] + shown[1] + shown[2]);
    double cell_w = (W - 20) / (double)n_shown, x = 10;
    const dpplot_result *used_items[MAX_GROUPS]; /* a plan run's card on both memory axes */
    for (size_t k = 0; k < n_ok; k++) used_items[k] = sel->items[idx[k]];
    double card = dpplot_report_card_bytes(used_items, n_ok);
    for (int panel = 0; panel < 3; panel++) {
        if (!shown[panel]) continue;
        dpplot_rgb one_color[MAX_GROUPS]; /* single-series bars: each in its method's colour */
        dpplot_bar_spec b = specs[panel];
        double lo, hi;
        dpplot_bars_range(&b, &lo, &hi);
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.title = titles[panel];
        s.y_label = panel == 0 ? "Memory" : panel == 2 ? "" : NULL;
        s.y_unit = units[panel];
        double top_value = hi > 0 ? hi : 1;
        if (units[panel] == DPPLOT_UNIT_BYTES) top_value = dpplot_report_card_axis(top_value, card);
        s.y_min = 0, s.y_max = top_value * 1.12, s.y_extend = 1;
        if (b.group_notes) { /* the totals over the bars in the axis's one unit ("1100 ms" beside "682 ms") */
            const char *unit_name;
            double divisor;
            dpplot_unit_choose(units[panel], s.y_max, &unit_name, &divisor);
            char(*text)[32] = panel == 0 ? peak_text : time_text;
            for (size_t k = 0; k < n_ok; k++) {
                double shown = b.values[k] / divisor;
                if (isfinite(shown))
                    snprintf(text[k], sizeof text[k], "%.*f %s",
                             shown >= 100  ? 0
                             : shown >= 10 ? 1
                                           : 2,
                             shown, unit_name);
            }
        }
        s.x_categories = labels, s.n_x_categories = n_ok, s.x_category_colors = method_colors;
        dpplot_rect outer = {x, top, cell_w - 10, H - top - 10 - bottom_note};
        x += cell_w;
        if (dpplot_panel_begin(&p, cv, outer, &s) != 0) {
            (void)dpplot_strlist_addf(notes, "%s: panel '%s' did not fit; use a larger height (dpprof plot --height H)",
                                      dpplot_report_basename(path), titles[panel]);
            continue;
        }
        if (b.n_series == 1) { /* one bar per run in its method's colour: groups as series */
            for (size_t k = 0; k < n_ok; k++) one_color[k] = method_colors[k];
            for (size_t k = 0; k < n_ok; k++) {
                double v[MAX_GROUPS];
                const char *only[MAX_GROUPS];
                for (size_t j = 0; j < n_ok; j++) {
                    v[j] = j == k ? b.values[j] : NAN;
                    only[j] = j == k && b.group_notes ? b.group_notes[j] : NULL;
                }
                dpplot_bar_spec draw = b;
                draw.values = v, draw.series_colors = &one_color[k], draw.group_notes = only;
                dpplot_bars_draw(&p, &draw);
            }
        } else {
            dpplot_bars_draw(&p, &b);
        }
        if (units[panel] == DPPLOT_UNIT_BYTES) dpplot_report_card_line(&p, card, 0);
        dpplot_panel_end(&p);
    }
    dpplot_figure_note(cv, f.leftout);
    return dpplot_report_save(cv, path, notes);
}
