/* report_breakdown.c: memory_breakdown_comparison.png. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_bars.h"
#include "dpplot_legend.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_GROUPS 64

int dpplot_report_breakdown(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                            dpplot_strlist *notes) {
    int usable[MAX_GROUPS] = {0};
    size_t n = sel->n < MAX_GROUPS ? sel->n : MAX_GROUPS, n_ok = 0;
    size_t idx[MAX_GROUPS];
    const dpplot_result *vanilla = NULL;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->has_peak && r->has_components ? DPPLOT_DRAWN : DPPLOT_LEFT_OUT;
        if (!usable[i]) continue;
        idx[n_ok++] = i;
        if (!vanilla && dpplot_method_rank(r->method) == 0) vanilla = r;
    }
    if (n_ok == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, no finished run has a memory breakdown",
                                  dpplot_report_basename(path));
        return 0;
    }
    /* Components any run uses, in stacking order. */
    dpplot_component comps[DPPLOT_N_COMPONENTS];
    size_t n_comp = 0;
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) {
        int used = 0;
        for (size_t k = 0; k < n_ok; k++) used |= sel->items[idx[k]]->component_bytes[c] > 0;
        if (used) comps[n_comp++] = (dpplot_component)c;
    }
    size_t n_dp = 0;
    for (size_t k = 0; k < n_ok && vanilla; k++)
        if (sel->items[idx[k]] != vanilla) n_dp++;

    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_GROUPS, "Memory at the peak, by component") < 0)
        return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top;
    char *leftout = f.leftout;
    dpplot_legend_entry legend[DPPLOT_N_COMPONENTS];
    for (size_t c = 0; c < n_comp; c++)
        legend[c] = (dpplot_legend_entry){dpplot_report_component_label(sel, comps[c]), dpplot_component_color(comps[c]),
                                          DPPLOT_SWATCH_BOX, DPPLOT_MARKER_NONE};
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, n_comp) + 10;
    char rss[600];
    dpplot_report_rss_note(sel, rss, sizeof rss); /* CPU and plan runs live in host memory */
    if (rss[0]) {
        if (leftout[0]) strncat(leftout, ".  ", sizeof f.leftout - strlen(leftout) - 1);
        strncat(leftout, rss, sizeof f.leftout - strlen(leftout) - 1);
    }
    double bottom_note = leftout[0] ? 30 : 0;

    /* Left: stacked components per method. */
    const char *labels[MAX_GROUPS];
    dpplot_rgb method_colors[MAX_GROUPS], comp_colors[DPPLOT_N_COMPONENTS];
    char peak_text[MAX_GROUPS][32];
    const char *peak_notes[MAX_GROUPS];
    double values[MAX_GROUPS * DPPLOT_N_COMPONENTS];
    for (size_t c = 0; c < n_comp; c++) comp_colors[c] = dpplot_component_color(comps[c]);
    for (size_t k = 0; k < n_ok; k++) {
        const dpplot_result *r = sel->items[idx[k]];
        labels[k] = dpplot_report_label(sel, idx[k]);
        method_colors[k] = dpplot_method_color(r->method);
        for (size_t c = 0; c < n_comp; c++) values[k * n_comp + c] = r->component_bytes[comps[c]];
        dpplot_format_value(r->peak_bytes, DPPLOT_UNIT_BYTES, peak_text[k], sizeof peak_text[k]);
        peak_notes[k] = peak_text[k];
    }
    dpplot_bar_spec bars = {n_ok, n_comp, values, comp_colors, 1, peak_notes, 1, DPPLOT_UNIT_BYTES, 0.6};
    double lo, hi;
    dpplot_bars_range(&bars, &lo, &hi);
    double split = n_dp > 0 ? W * 0.56 : W;
    dpplot_panel left;
    dpplot_panel_spec ls = {0};
    ls.title = "Peak memory per method";
    ls.y_label = "Memory";
    ls.y_unit = DPPLOT_UNIT_BYTES;
    /* a plan run's card on its memory axis, as on every other (a 595 GiB bar beside an 80 GiB card) */
    const dpplot_result *used_items[MAX_GROUPS];
    for (size_t k = 0; k < n_ok; k++) used_items[k] = sel->items[idx[k]];
    double card = dpplot_report_card_bytes(used_items, n_ok);
    ls.y_min = 0, ls.y_max = dpplot_report_card_axis(hi, card) * 1.12, ls.y_extend = 1;
    ls.x_categories = labels, ls.n_x_categories = n_ok, ls.x_category_colors = method_colors;
    if (dpplot_panel_begin(&left, cv, (dpplot_rect){10, top, split - 20, H - top - 10 - bottom_note}, &ls) == 0) {
        dpplot_bars_draw(&left, &bars);
        dpplot_report_card_line(&left, card, 0);
        dpplot_panel_end(&left);
    }

    /* Right: extra memory of each DP method over vanilla, by component. */
    if (n_dp > 0) {
        const char *dp_labels[MAX_GROUPS];
        dpplot_rgb dp_colors[MAX_GROUPS];
        char extra_text[MAX_GROUPS][48];
        const char *extra_notes[MAX_GROUPS];
        double extra[MAX_GROUPS * DPPLOT_N_COMPONENTS];
        size_t m = 0;
        for (size_t k = 0; k < n_ok; k++) {
            const dpplot_result *r = sel->items[idx[k]];
            if (r == vanilla) continue;
            dp_labels[m] = labels[k];
            dp_colors[m] = method_colors[k];
            for (size_t c = 0; c < n_comp; c++)
                extra[m * n_comp + c] = r->component_bytes[comps[c]] - vanilla->component_bytes[comps[c]];
            double d = r->peak_bytes - vanilla->peak_bytes;
            char v[32];
            dpplot_format_value(fabs(d), DPPLOT_UNIT_BYTES, v, sizeof v);
            snprintf(extra_text[m], sizeof extra_text[m], "%s%s\n(%+.0f%%)", d < 0 ? "-" : "+", v,
                     100.0 * d / vanilla->peak_bytes);
            extra_notes[m] = extra_text[m];
            m++;
        }
        dpplot_bar_spec eb = {m, n_comp, extra, comp_colors, 1, extra_notes, 1, DPPLOT_UNIT_BYTES, 0.62};
        dpplot_bars_range(&eb, &lo, &hi);
        /* The axis spans at least 5 % of the largest peak, so a difference stays in proportion to
         * the totals (+8 KiB on a 16 GiB peak is not a full bar); a panel of such differences says
         * they are negligible. */
        double biggest = vanilla->peak_bytes, largest_d = 0;
        for (size_t k = 0; k < n_ok; k++) {
            const dpplot_result *r = sel->items[idx[k]];
            biggest = fmax(biggest, r->peak_bytes);
            if (r != vanilla) largest_d = fmax(largest_d, fabs(r->peak_bytes - vanilla->peak_bytes));
        }
        double y_lo = lo < 0 ? lo * 1.1 : 0, y_hi = hi > 0 ? hi * 1.15 : 0, span = 0.05 * biggest;
        if (y_hi - y_lo < span) {
            if (y_hi <= 0)
                y_lo = y_hi - span;
            else
                y_hi = y_lo + span;
        }
        char extra_title[160];
        if (largest_d < 0.01 * vanilla->peak_bytes) {
            char v[32];
            dpplot_format_value(largest_d, DPPLOT_UNIT_BYTES, v, sizeof v);
            snprintf(extra_title, sizeof extra_title, "Extra memory over vanilla: negligible (at most %s, under 1%%)",
                     v);
        } else {
            snprintf(extra_title, sizeof extra_title, "Extra memory over vanilla");
        }
        dpplot_panel right;
        dpplot_panel_spec rs = {0};
        rs.title = extra_title;
        rs.y_label = "Extra memory";
        rs.y_unit = DPPLOT_UNIT_BYTES;
        rs.y_min = y_lo, rs.y_max = y_hi > y_lo ? y_hi : y_lo + 1, rs.y_extend = 1;
        rs.x_categories = dp_labels, rs.n_x_categories = m, rs.x_category_colors = dp_colors;
        if (dpplot_panel_begin(&right, cv, (dpplot_rect){split, top, W - split - 10, H - top - 10 - bottom_note},
                               &rs) == 0) {
            dpplot_bars_draw(&right, &eb);
            dpplot_panel_end(&right);
        }
    } else if (!vanilla) {
        (void)dpplot_strlist_addf(notes, "%s: no vanilla run, so no overhead panel", dpplot_report_basename(path));
    }
    dpplot_figure_note(cv, leftout);
    return dpplot_report_save(cv, path, notes);
}
