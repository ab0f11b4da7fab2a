/* report_phases.c: operation_level_breakdown.png, memory by phase: for each method, what was live
 * at the peak of each training phase (forward, backward, clip, noise, optimizer), by component,
 * with the bytes still live at the phase's end marked; the host's peak RSS in a note. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot_bars.h"
#include "dpplot_legend.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_PANELS 12
#define MAX_EXAMINED 64 /* results looked at for the panels; the rest are counted as having no room */

/* The "host peak RSS: vanilla 1.2 GiB, ghost 1.3 GiB" note of a selection ("" when none has it). */
void dpplot_report_rss_note(const dpplot_selection *sel, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sel->n && used < len - 1; i++) {
        const dpplot_result *r = sel->items[i];
        if (r->status != DPPLOT_STATUS_OK || !isfinite(r->host_peak_rss_bytes)) continue;
        char v[32];
        dpplot_format_value(r->host_peak_rss_bytes, DPPLOT_UNIT_BYTES, v, sizeof v);
        int w = snprintf(buf + used, len - used, "%s%s %s",
                         used ? ", " : "Host peak RSS: ", dpplot_report_label(sel, i), v);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Draws each phase's end-of-phase bytes as a black bar across its column. */
static void draw_ends(dpplot_panel *p, const double *ends, size_t n, double width) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    double slot = fabs(dpplot_panel_px(p, 1.0) - dpplot_panel_px(p, 0.0)), w = slot * width;
    cairo_save(cr);
    cairo_set_line_width(cr, 3.0);
    dpplot_set_color(cr, DPPLOT_INK, 1.0);
    for (size_t g = 0; g < n; g++) {
        if (!isfinite(ends[g])) continue;
        double x = dpplot_panel_px(p, (double)g), y = round(dpplot_panel_py(p, ends[g])) + 0.5;
        cairo_move_to(cr, x - w / 2 - 6, y);
        cairo_line_to(cr, x + w / 2 + 6, y);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

/* Columns of a phases chart of n panels: n up to 3, two for 4, then three. */
static size_t phase_cols(size_t n) { return n <= 3 ? n : n <= 4 ? 2 : 3; }

int dpplot_report_phases(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                         dpplot_strlist *notes) {
    int usable[MAX_EXAMINED] = {0};
    size_t n = sel->n < MAX_EXAMINED ? sel->n : MAX_EXAMINED, idx[MAX_PANELS], n_ok = 0;
    int phase_used[DPPLOT_N_PHASES] = {0}, comp_used[DPPLOT_N_COMPONENTS] = {0};
    double y_max = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status != DPPLOT_STATUS_OK || !r->has_phase_memory ? DPPLOT_LEFT_OUT
                    : n_ok < MAX_PANELS                                   ? DPPLOT_DRAWN
                                                                          : DPPLOT_NO_ROOM;
        if (usable[i] != DPPLOT_DRAWN) continue;
        idx[n_ok++] = i;
        for (int p = 0; p < DPPLOT_N_PHASES; p++) {
            if (!isfinite(r->phase_peak_bytes[p])) continue;
            phase_used[p] = 1;
            y_max = fmax(y_max, r->phase_peak_bytes[p]);
            for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) comp_used[c] |= r->phase_components[p][c] > 0;
        }
    }
    if (n_ok == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, no finished run has memory by phase (memory.phases)",
                                  dpplot_report_basename(path));
        return 0;
    }
    const char *phase_names[DPPLOT_N_PHASES];
    int phases[DPPLOT_N_PHASES];
    size_t n_ph = 0;
    for (int p = 0; p < DPPLOT_N_PHASES; p++)
        if (phase_used[p]) phases[n_ph] = p, phase_names[n_ph++] = dpplot_phase_name((dpplot_phase)p);
    int comps[DPPLOT_N_COMPONENTS];
    size_t n_comp = 0;
    dpplot_legend_entry legend[DPPLOT_N_COMPONENTS + 1];
    dpplot_rgb comp_colors[DPPLOT_N_COMPONENTS];
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) {
        if (!comp_used[c]) continue;
        comp_colors[n_comp] = dpplot_component_color((dpplot_component)c);
        legend[n_comp] = (dpplot_legend_entry){dpplot_report_component_label(sel, (dpplot_component)c), comp_colors[n_comp],
                                               DPPLOT_SWATCH_BOX, DPPLOT_MARKER_NONE};
        comps[n_comp++] = c;
    }
    legend[n_comp] =
        (dpplot_legend_entry){"live at the phase's end", DPPLOT_INK, DPPLOT_SWATCH_LINE, DPPLOT_MARKER_NONE};
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_PANELS,
                            "Memory at the peak of each phase, by component") < 0)
        return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top + dpplot_legend_draw(cv, (dpplot_rect){20, f.top, W - 40, 80}, legend, n_comp + 1) + 8;
    char rss[600], note[1200];
    dpplot_report_rss_note(sel, rss, sizeof rss);
    snprintf(note, sizeof note, "%s%s%s", f.leftout, f.leftout[0] && rss[0] ? ".  " : "", rss);
    /* As many panels as fit the height; the rest are named in the note and printed, never a
     * chart of titles over white. The tightest panel: the longest title. */
    dpplot_panel_spec probe = {0};
    probe.title = dpplot_report_label(sel, idx[0]);
    for (size_t k = 1; k < n_ok; k++)
        if (strlen(dpplot_report_label(sel, idx[k])) > strlen(probe.title))
            probe.title = dpplot_report_label(sel, idx[k]);
    dpplot_rgb swatch = DPPLOT_INK;
    probe.title_swatch = &swatch, probe.y_label = "Memory", probe.y_unit = DPPLOT_UNIT_BYTES;
    const dpplot_result *used_items[MAX_PANELS]; /* a plan run's card on the memory axes */
    for (size_t k = 0; k < n_ok; k++) used_items[k] = sel->items[idx[k]];
    double card = dpplot_report_card_bytes(used_items, n_ok);
    y_max = dpplot_report_card_axis(y_max, card);
    probe.y_min = 0, probe.y_max = y_max * 1.12, probe.y_extend = 1;
    probe.x_categories = phase_names, probe.n_x_categories = n_ph;
    size_t n_fit = dpplot_report_panels_fit(W, H, top, note[0] ? 30 : 0, n_ok, phase_cols, &probe);
    if (n_fit == 0) {
        dpplot_canvas_free(cv);
        (void)dpplot_strlist_addf(notes, "%s: skipped, not one panel fits at a height of %.0f px",
                                  dpplot_report_basename(path), H);
        return 0;
    }
    if (n_fit < n_ok) {
        for (size_t k = n_fit; k < n_ok; k++) usable[idx[k]] = DPPLOT_NO_ROOM;
        size_t more = dpplot_report_left_out(sel, usable, n, n_fit, f.leftout, sizeof f.leftout);
        snprintf(note, sizeof note, "%s at %.0f px high%s%s", f.leftout, H, rss[0] ? ".  " : "", rss);
        (void)dpplot_strlist_addf(notes,
                                  "%s: %zu of %zu panels fit at a height of %.0f px; %zu more left out (plot them "
                                  "from a directory of their own, or taller: dpprof plot --height H)",
                                  dpplot_report_basename(path), n_fit, n_ok, H, more);
        n_ok = n_fit;
    }
    double bottom_note = note[0] ? 30 : 0;
    size_t cols = phase_cols(n_ok), rows = (n_ok + cols - 1) / cols;
    double cell_w = (W - 20) / (double)cols, cell_h = (H - top - 10 - bottom_note) / (double)rows;
    for (size_t k = 0; k < n_ok; k++) {
        const dpplot_result *r = sel->items[idx[k]];
        double values[DPPLOT_N_PHASES * DPPLOT_N_COMPONENTS], ends[DPPLOT_N_PHASES];
        char peak_text[DPPLOT_N_PHASES][32];
        const char *peak_notes[DPPLOT_N_PHASES];
        for (size_t g = 0; g < n_ph; g++) {
            int p = phases[g];
            for (size_t c = 0; c < n_comp; c++)
                values[g * n_comp + c] = isfinite(r->phase_peak_bytes[p]) ? r->phase_components[p][comps[c]] : NAN;
            ends[g] = r->phase_end_bytes[p];
            peak_notes[g] = NULL;
            if (isfinite(r->phase_peak_bytes[p])) {
                dpplot_format_value(r->phase_peak_bytes[p], DPPLOT_UNIT_BYTES, peak_text[g], sizeof peak_text[g]);
                peak_notes[g] = peak_text[g];
            }
        }
        dpplot_bar_spec b = {n_ph, n_comp, values, comp_colors, 1, peak_notes, n_ok <= 4, DPPLOT_UNIT_BYTES, 0.62};
        size_t row = k / cols, col = k % cols;
        dpplot_rgb color = dpplot_method_color(r->method);
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.title = dpplot_report_label(sel, idx[k]);
        s.title_swatch = &color;
        s.y_label = "Memory"; /* on every panel, so all have the same width and tick size */
        s.y_unit = DPPLOT_UNIT_BYTES;
        s.y_min = 0, s.y_max = y_max * 1.12, s.y_extend = 1;
        s.x_categories = phase_names, s.n_x_categories = n_ph;
        dpplot_rect outer = {10 + cell_w * (double)col, top + cell_h * (double)row, cell_w - 10, cell_h - 6};
        if (dpplot_panel_begin(&p, cv, outer, &s) != 0) {
            (void)dpplot_strlist_addf(notes, "%s: panel for %s did not fit; use a larger height (dpprof plot --height H)",
                                      dpplot_report_basename(path), s.title);
            continue;
        }
        dpplot_bars_draw(&p, &b);
        draw_ends(&p, ends, n_ph, 0.62);
        dpplot_report_card_line(&p, card, 0);
        dpplot_panel_end(&p);
    }
    dpplot_figure_note(cv, note);
    return dpplot_report_save(cv, path, notes);
}
