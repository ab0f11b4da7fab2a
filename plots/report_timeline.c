/* report_timeline.c: memory_timeline.png (a panel per method) and memory_timeline_points.png (a
 * panel per point of a sweep). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"
#include "sweep_util.h"

#define MAX_PANELS 12
#define MAX_EXAMINED 64 /* results looked at for the panels; the rest are counted as having no room */

/* The script's own snapshots (ctx:snapshot) as dashed verticals labelled at the top. */
static void draw_marks(dpplot_panel *p, const dpplot_result *r) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    double last_right = -INFINITY;
    for (size_t i = 0; i < r->n_marks; i++) {
        double x = dpplot_panel_px(p, r->marks[i].t_ms);
        if (!(x >= p->plot.x && x <= p->plot.x + p->plot.w)) continue;
        cairo_save(cr);
        dpplot_set_dash(cr, DPPLOT_DASH_DASHED, 1.5);
        cairo_set_line_width(cr, 1.5);
        dpplot_set_color(cr, DPPLOT_INK, 0.8);
        cairo_move_to(cr, round(x) + 0.5, p->plot.y);
        cairo_line_to(cr, round(x) + 0.5, p->plot.y + p->plot.h);
        cairo_stroke(cr);
        cairo_restore(cr);
        dpplot_text_style st = dpplot_style(DPPLOT_FONT_NOTE, 0, DPPLOT_INK, DPPLOT_LEFT, DPPLOT_TOP);
        dpplot_rect b = dpplot_text_bounds(p->cv, x + 4, p->plot.y + 4, r->marks[i].name, &st);
        if (b.x + b.w > p->plot.x + p->plot.w) { /* no room on the right: the label goes left of the line */
            st.halign = DPPLOT_RIGHT;
            b = dpplot_text_bounds(p->cv, x - 4, p->plot.y + 4, r->marks[i].name, &st);
        }
        double y = p->plot.y + 4 + (b.x < last_right ? b.h + 2 : 0); /* a second row when they would touch */
        /* and below any label already at the plot's top (the card's note) */
        size_t n_boxes;
        const dpplot_box *boxes = dpplot_canvas_boxes(p->cv, &n_boxes);
        for (size_t k = 0; k < n_boxes; k++) {
            dpplot_rect at = {b.x, y, b.w, b.h};
            if (boxes[k].kind == DPPLOT_BOX_TEXT && dpplot_rect_overlap(boxes[k].r, p->plot) &&
                dpplot_rect_overlap(boxes[k].r, at))
                y = boxes[k].r.y + boxes[k].r.h + 2, k = (size_t)-1; /* look again from the first */
        }
        dpplot_set_color(cr, DPPLOT_WHITE, 0.85);
        cairo_rectangle(cr, b.x - 2, y - 1, b.w + 4, b.h + 2);
        cairo_fill(cr);
        dpplot_text(p->cv, st.halign == DPPLOT_RIGHT ? x - 4 : x + 4, y, r->marks[i].name, &st);
        last_right = b.x + b.w;
    }
}

/* The x axis title of a timeline: a plan run's time is the modelled device's (its engine clock
 * advances by each op's roofline or calibrated time), an estimate. */
static const char *time_title(const dpplot_result *r) {
    if (!r->predicted) return "Time since start, each panel its own scale";
    return r->calibrated ? "Modelled device time (estimated, calibrated), each panel its own scale"
                         : "Modelled device time (estimated, roofline), each panel its own scale";
}

/* px a phase band is at least wide: bands are drawn to scale, one shorter than a pixel as a 1 px
 * line (a floor of 5 px drew vanilla's 5 us clip and noise bookkeeping as if they took time) */
#define MIN_BAND_PX 1.0

/* Draws one method's panel; returns 0, or -1 when the panel did not fit. */
/* 1 when r's reserved timeline is a line of its own (it differs from allocated somewhere): a plan
 * run's equals its allocated one, and is not drawn or named in the legend. */
static int has_reserved_line(const dpplot_result *r) {
    for (size_t k = 0; k < r->n_timeline; k++)
        if (isfinite(r->reserved_bytes[k]) && r->reserved_bytes[k] != r->allocated_bytes[k]) return 1;
    return 0;
}

/* The layout of r's panel (its colour in *color, which the spec points at). */
static dpplot_panel_spec panel_spec(const dpplot_result *r, const char *label, double t_max, double y_max, int x_title,
                                    int y_title, dpplot_rgb *color) {
    *color = dpplot_method_color(r->method);
    dpplot_panel_spec s = {0};
    s.title = label;
    s.title_swatch = color;
    s.x_label = !x_title ? NULL : time_title(r);
    s.y_label = y_title ? "Memory" : NULL;
    s.x_unit = DPPLOT_UNIT_MS, s.y_unit = DPPLOT_UNIT_BYTES;
    s.x_min = 0, s.x_max = t_max;
    s.y_min = 0, s.y_max = y_max, s.y_extend = 1;
    return s;
}

static int draw_panel(dpplot_canvas *cv, dpplot_rect outer, const dpplot_result *r, const char *label, double t_max,
                      double y_max, int x_title, int y_title, double card) {
    dpplot_rgb color;
    dpplot_panel p;
    dpplot_panel_spec s = panel_spec(r, label, t_max, y_max, x_title, y_title, &color);
    if (dpplot_panel_begin(&p, cv, outer, &s) != 0) return -1;
    dpplot_shade shades[1024];
    size_t n_sh = 0;
    for (size_t i = 0; i < r->n_spans && n_sh < 1024; i++)
        shades[n_sh++] = (dpplot_shade){r->spans[i].start_ms, r->spans[i].end_ms,
                                        dpplot_phase_color((dpplot_phase)r->spans[i].phase), 0.30, MIN_BAND_PX};
    dpplot_shades_draw(&p, shades, n_sh);
    dpplot_series series[2] = {
        {.name = "reserved",
         .color = dpplot_rgb_mix(color, DPPLOT_INK, 0.35),
         .x = r->t_ms,
         .y = r->reserved_bytes,
         .n = r->n_timeline,
         .dashed = DPPLOT_DASH_DASHED,
         .step = 1,
         .line_width = 1.8},
        {.name = "allocated",
         .color = color,
         .x = r->t_ms,
         .y = r->allocated_bytes,
         .n = r->n_timeline,
         .step = 1,
         .line_width = 2.6,
         .fill_alpha = 0.15},
    };
    /* the reserved line only where it is one (the legend names it only then) */
    if (has_reserved_line(r))
        dpplot_lines_draw(&p, series, 2);
    else
        dpplot_lines_draw(&p, series + 1, 1);
    dpplot_report_card_line(&p, card, 0);
    draw_marks(&p, r);
    size_t peak = 0;
    for (size_t i = 0; i < r->n_timeline; i++)
        if (isfinite(r->allocated_bytes[i]) &&
            (!isfinite(r->allocated_bytes[peak]) || r->allocated_bytes[i] > r->allocated_bytes[peak]))
            peak = i;
    if (r->n_timeline > 0 && isfinite(r->allocated_bytes[peak])) {
        /* The label names the file's peak (memory.peak_bytes, or peak_memory_mb): a legacy file's
         * snapshots may miss it (its highest read 39.1 GiB where the file's peak is 42.4). A peak
         * above every snapshot is drawn as a dotted line at its height, the label on it. */
        char v[32], snap[32], text[96];
        double y = r->allocated_bytes[peak];
        dpplot_format_value(y, DPPLOT_UNIT_BYTES, snap, sizeof snap);
        dpplot_format_value(r->has_peak ? r->peak_bytes : y, DPPLOT_UNIT_BYTES, v, sizeof v);
        if (r->has_peak && r->peak_bytes > y && strcmp(v, snap) != 0) {
            double xs[2] = {p.x.lo, p.x.hi}, ys[2] = {r->peak_bytes, r->peak_bytes};
            dpplot_series line = {.color = color, .x = xs, .y = ys, .n = 2, .dashed = DPPLOT_DASH_DOTTED,
                                  .line_width = 1.4};
            dpplot_lines_draw(&p, &line, 1);
            snprintf(text, sizeof text, "peak %s (snapshots reach %s)", v, snap);
            y = r->peak_bytes;
        } else {
            snprintf(text, sizeof text, "peak %s", v);
        }
        dpplot_annotate_clear(&p, r->t_ms[peak], y, text, color, series, 2);
    }
    dpplot_panel_end(&p);
    return 0;
}

/* Columns of a timeline chart of n panels: one up to 3, two up to 8, then three. */
static size_t timeline_cols(size_t n) { return n <= 3 ? 1 : n <= 8 ? 2 : 3; }

int dpplot_report_timeline(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                           dpplot_strlist *notes) {
    int usable[MAX_EXAMINED] = {0};
    size_t n = sel->n < MAX_EXAMINED ? sel->n : MAX_EXAMINED, idx[MAX_PANELS], n_ok = 0;
    double t_max = 0, y_max = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status != DPPLOT_STATUS_OK || r->n_timeline < 2 ? DPPLOT_LEFT_OUT
                    : n_ok < MAX_PANELS                                ? DPPLOT_DRAWN
                                                                       : DPPLOT_NO_ROOM;
        if (usable[i] != DPPLOT_DRAWN) continue;
        idx[n_ok++] = i;
        for (size_t k = 0; k < r->n_timeline; k++) {
            if (isfinite(r->t_ms[k])) t_max = fmax(t_max, r->t_ms[k]);
            if (isfinite(r->allocated_bytes[k])) y_max = fmax(y_max, r->allocated_bytes[k]);
            if (isfinite(r->reserved_bytes[k])) y_max = fmax(y_max, r->reserved_bytes[k]);
        }
        if (r->has_peak) y_max = fmax(y_max, r->peak_bytes); /* a peak between snapshots is drawn too */
    }
    if (n_ok == 0 || !(t_max > 0) || !(y_max > 0)) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, no finished run has a memory timeline",
                                  dpplot_report_basename(path));
        return 0;
    }
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_PANELS, "Memory over time") < 0) return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top;
    char *leftout = f.leftout;
    dpplot_legend_entry legend[DPPLOT_N_PHASES + 4];
    size_t nl = 0;
    legend[nl++] = (dpplot_legend_entry){"allocated", DPPLOT_MUTED, DPPLOT_SWATCH_LINE, DPPLOT_MARKER_NONE};
    int any_reserved = 0;
    for (size_t k = 0; k < n_ok; k++) any_reserved |= has_reserved_line(sel->items[idx[k]]);
    if (any_reserved)
        legend[nl++] = (dpplot_legend_entry){"reserved", DPPLOT_MUTED, DPPLOT_SWATCH_DASHED, DPPLOT_MARKER_NONE};
    const dpplot_result *used_items[MAX_PANELS];
    for (size_t k = 0; k < n_ok; k++) used_items[k] = sel->items[idx[k]];
    double card = dpplot_report_card_bytes(used_items, n_ok);
    y_max = dpplot_report_card_axis(y_max, card);
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
    if (nl > 2) /* phases drawn: say that they are to scale, and what a very short one looks like */
        legend[nl++] = (dpplot_legend_entry){"(phase bands to scale; under 1 px: a 1 px line)", DPPLOT_MUTED,
                                             DPPLOT_SWATCH_NOTE,
                                             DPPLOT_MARKER_NONE};
    int any_marks = 0;
    for (size_t k = 0; k < n_ok; k++) any_marks |= sel->items[idx[k]]->n_marks > 0;
    if (any_marks)
        legend[nl++] =
            (dpplot_legend_entry){"snapshot taken by the script", DPPLOT_INK, DPPLOT_SWATCH_DASHED, DPPLOT_MARKER_NONE};
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, nl) + 6;
    /* As many panels as fit the canvas's height: the rest are left out and named, never a chart
     * of titles over white (12 panels at 1000 px, or any number at a small height). */
    size_t longest = 0; /* the tightest panel: the longest title, both axis titles */
    for (size_t k = 1; k < n_ok; k++)
        if (strlen(dpplot_report_label(sel, idx[k])) > strlen(dpplot_report_label(sel, idx[longest]))) longest = k;
    dpplot_rgb probe_color;
    dpplot_panel_spec probe = panel_spec(sel->items[idx[longest]], dpplot_report_label(sel, idx[longest]), t_max,
                                         y_max * 1.12, 1, 1, &probe_color);
    size_t n_fit = dpplot_report_panels_fit(W, H, top, leftout[0] ? 30 : 0, n_ok, timeline_cols, &probe);
    if (n_fit == 0) { /* not one panel: no chart rather than a title over white */
        dpplot_canvas_free(cv);
        (void)dpplot_strlist_addf(
            notes, "%s: skipped, not one panel fits at a height of %.0f px (dpprof plot --height H draws taller)",
            dpplot_report_basename(path), H);
        return 0;
    }
    if (n_fit < n_ok) {
        for (size_t k = n_fit; k < n_ok; k++) usable[idx[k]] = DPPLOT_NO_ROOM;
        size_t more = dpplot_report_left_out(sel, usable, n, n_fit, f.leftout, sizeof f.leftout);
        size_t used = strlen(f.leftout);
        snprintf(f.leftout + used, sizeof f.leftout - used,
                 " at %.0f px high (a taller chart draws more: dpprof plot --height H)", H);
        (void)dpplot_strlist_addf(notes,
                                  "%s: %zu of %zu panels fit at a height of %.0f px; %zu more left out (plot them "
                                  "from a directory of their own, or taller: dpprof plot --height H)",
                                  dpplot_report_basename(path), n_fit, n_ok, H, more);
        n_ok = n_fit;
    }
    double bottom_note = leftout[0] ? 30 : 0;
    size_t cols = timeline_cols(n_ok), rows = (n_ok + cols - 1) / cols;
    double cell_w = (W - 20) / (double)cols, cell_h = (H - top - 10 - bottom_note) / (double)rows;
    for (size_t k = 0; k < n_ok; k++) {
        size_t row = k / cols, col = k % cols;
        dpplot_rect outer = {10 + cell_w * (double)col, top + cell_h * (double)row, cell_w - 10, cell_h - 6};
        /* Axis titles once: x on the bottom panel of each column, y on the left column. */
        int last_in_col = row == rows - 1 || (row == rows - 2 && k + cols >= n_ok);
        /* Each panel its own time axis: a method whose run is a third as long would otherwise
         * fill a third of a shared one. Memory stays shared, to compare peaks across panels. */
        const dpplot_result *r = sel->items[idx[k]];
        double own_t = 0;
        for (size_t i = 0; i < r->n_timeline; i++)
            if (isfinite(r->t_ms[i])) own_t = fmax(own_t, r->t_ms[i]);
        if (draw_panel(cv, outer, r, dpplot_report_label(sel, idx[k]), own_t > 0 ? own_t : t_max, y_max * 1.12,
                       last_in_col, col == 0, card) != 0)
            (void)dpplot_strlist_addf(notes, "%s: panel for %s did not fit; use a larger height (dpprof plot --height H)",
                                      dpplot_report_basename(path), dpplot_report_label(sel, idx[k]));
    }
    dpplot_figure_note(cv, leftout);
    return dpplot_report_save(cv, path, notes);
}

/* ---- memory_timeline_points.png */

#define MAX_POINT_PANELS 30
#define MAX_POINT_METHODS 8

/* A point's swept values but the method, values only ("256 · 4 · 8"), for panel titles keyed by
 * a legend line naming the variables in the same order. */
static void point_values(const dpplot_result *r, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_vary; i++) {
        if (strcmp(r->vary[i].key, "method") == 0) continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? " \xc2\xb7 " : "", r->vary[i].text);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
}

/* The key to point_values: "panels: seq_len · batch · lora_rank". */
static void point_key(const dpplot_result *r, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "panels: ");
    int first = 1;
    for (size_t i = 0; i < r->n_vary && used < len; i++) {
        if (strcmp(r->vary[i].key, "method") == 0) continue;
        int w = snprintf(buf + used, len - used, "%s%s", first ? "" : " \xc2\xb7 ", r->vary[i].key);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w, first = 0;
    }
}

int dpplot_report_timeline_points(const dpplot_results *rs, const char *sweep, const char *filter, const char *path,
                                  const dpplot_options *opt, dpplot_strlist *notes) {
    /* Points in the results' order (method rank first, then the swept values): group by label. */
    char labels[MAX_POINT_PANELS][160];
    const dpplot_result *members[MAX_POINT_PANELS][MAX_POINT_METHODS];
    size_t n_members[MAX_POINT_PANELS] = {0}, n_p = 0, dropped = 0;
    const char *methods[MAX_POINT_METHODS];
    size_t n_m = 0;
    double y_max = 0;
    int predicted = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!r->sweep_name || strcmp(r->sweep_name, sweep) != 0 || r->status != DPPLOT_STATUS_OK || r->n_timeline < 2 ||
            !dpplot_point_matches(r, filter))
            continue;
        char label[160];
        dpplot_point_label(r, label, sizeof label);
        size_t k = 0;
        while (k < n_p && strcmp(labels[k], label) != 0) k++;
        if (k == n_p) {
            if (n_p == MAX_POINT_PANELS) {
                dropped++;
                continue;
            }
            snprintf(labels[n_p++], sizeof labels[0], "%s", label);
        }
        if (n_members[k] < MAX_POINT_METHODS) members[k][n_members[k]++] = r;
        size_t m = 0;
        while (m < n_m && strcmp(methods[m], r->method) != 0) m++;
        if (m == n_m && n_m < MAX_POINT_METHODS) methods[n_m++] = r->method;
        for (size_t j = 0; j < r->n_timeline; j++)
            if (isfinite(r->allocated_bytes[j])) y_max = fmax(y_max, r->allocated_bytes[j]);
        predicted |= r->predicted;
    }
    if (n_p < 2 || !(y_max > 0)) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' has fewer than two finished points with a timeline",
                                  dpplot_report_basename(path), sweep);
        return 0;
    }
    if (dropped)
        (void)dpplot_strlist_addf(notes,
                                  "%s: %d panels at most; %zu further run(s) left out (choose points with "
                                  "--point KEY=VALUE)",
                                  dpplot_report_basename(path), MAX_POINT_PANELS, dropped);
    const dpplot_result *all[MAX_POINT_PANELS * MAX_POINT_METHODS];
    size_t n_all = 0;
    for (size_t k = 0; k < n_p; k++)
        for (size_t j = 0; j < n_members[k]; j++) all[n_all++] = members[k][j];
    double card = dpplot_report_card_bytes(all, n_all);
    y_max = dpplot_report_card_axis(y_max, card);
    dpplot_canvas *cv = dpplot_report_canvas(opt, path, notes);
    if (!cv) return -1;
    double W = dpplot_canvas_width(cv), H = dpplot_canvas_height(cv);
    char context[1024];
    dpplot_report_context_of(members[0][0], context, sizeof context);
    double top = dpplot_figure_title(cv, "Memory over time, one panel per point", context[0] ? context : NULL);
    dpplot_legend_entry legend[MAX_POINT_METHODS + 2];
    for (size_t m = 0; m < n_m; m++)
        legend[m] =
            (dpplot_legend_entry){methods[m], dpplot_method_color(methods[m]), DPPLOT_SWATCH_LINE, DPPLOT_MARKER_NONE};
    size_t nl = n_m;
    char axis_note[160];
    snprintf(axis_note, sizeof axis_note, "x: %s, each panel its own; memory axis shared",
             predicted ? "modelled device time (estimated)" : "time since start");
    legend[nl++] = (dpplot_legend_entry){axis_note, DPPLOT_MUTED, DPPLOT_SWATCH_NOTE, DPPLOT_MARKER_NONE};
    size_t cols = n_p <= 4 ? n_p : n_p <= 9 ? 3 : n_p <= 16 ? 4 : n_p <= 25 ? 5 : 6;
    size_t rows = (n_p + cols - 1) / cols;
    /* Titles "seq_len=256, batch=4, ..." wider than a panel read as one run of text across the
     * row: the panels then show the values alone and the legend names them once. */
    double cell_w = (W - 20) / (double)cols;
    int keyed = 0;
    for (size_t k = 0; k < n_p && !keyed; k++)
        keyed = dpplot_text_width(cv, labels[k], DPPLOT_FONT_PANEL * 0.8, 1) > cell_w - 16;
    char key_note[300];
    if (keyed) {
        point_key(members[0][0], key_note, sizeof key_note);
        legend[nl++] = (dpplot_legend_entry){key_note, DPPLOT_INK, DPPLOT_SWATCH_NOTE, DPPLOT_MARKER_NONE};
        for (size_t k = 0; k < n_p; k++) point_values(members[k][0], labels[k], sizeof labels[k]);
    }
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, nl) + 4;
    double cell_h = (H - top - 10) / (double)rows;
    for (size_t k = 0; k < n_p; k++) {
        double t_max = 0;
        dpplot_series s[MAX_POINT_METHODS];
        for (size_t j = 0; j < n_members[k]; j++) {
            const dpplot_result *r = members[k][j];
            for (size_t i = 0; i < r->n_timeline; i++)
                if (isfinite(r->t_ms[i])) t_max = fmax(t_max, r->t_ms[i]);
            s[j] = (dpplot_series){.name = r->method,
                                   .color = dpplot_method_color(r->method),
                                   .x = r->t_ms,
                                   .y = r->allocated_bytes,
                                   .n = r->n_timeline,
                                   .step = 1,
                                   .line_width = 2.0,
                                   .fill_alpha = n_members[k] == 1 ? 0.15 : 0.0};
        }
        size_t row = k / cols, col = k % cols;
        dpplot_panel p;
        dpplot_panel_spec sp = {0};
        sp.title = labels[k];
        sp.x_unit = DPPLOT_UNIT_MS, sp.y_unit = DPPLOT_UNIT_BYTES;
        sp.x_min = 0, sp.x_max = t_max > 0 ? t_max : 1;
        sp.y_min = 0, sp.y_max = y_max * 1.1, sp.y_extend = 1;
        sp.y_label = col == 0 ? "" : NULL;
        sp.x_label = row == rows - 1 || k + cols >= n_p ? "" : NULL;
        dpplot_rect outer = {10 + cell_w * (double)col, top + cell_h * (double)row, cell_w - 8, cell_h - 6};
        if (dpplot_panel_begin(&p, cv, outer, &sp) != 0) {
            (void)dpplot_strlist_addf(
                notes, "%s: panel %s did not fit; use --point, or a larger height (dpprof plot --height H)",
                dpplot_report_basename(path), labels[k]);
            continue;
        }
        dpplot_lines_draw(&p, s, n_members[k]);
        dpplot_report_card_line(&p, card, 0);
        dpplot_panel_end(&p);
    }
    return dpplot_report_save(cv, path, notes);
}

/* ---- memory_timeline_<point>.png, one per configuration (--timelines each) */

#define MAX_EACH_FILES 256

/* File-name part of a point: "seq_len256_batch4" (letters, digits, '.', '-', '_' kept). */
static void point_file_part(const dpplot_result *r, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_vary && used + 1 < len; i++) {
        if (strcmp(r->vary[i].key, "method") == 0) continue;
        char piece[160];
        snprintf(piece, sizeof piece, "%s%s%s", used ? "_" : "", r->vary[i].key, r->vary[i].text);
        for (const char *c = piece; *c && used + 1 < len; c++) {
            int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
                     *c == '-' || *c == '_';
            buf[used++] = ok ? *c : '_';
        }
        buf[used] = '\0';
    }
}

int dpplot_report_timelines_each(const dpplot_results *rs, const char *out_dir, const dpplot_options *opt,
                                 dpplot_strlist *notes) {
    const dpplot_result **items = malloc((rs->n ? rs->n : 1) * sizeof *items);
    unsigned char *done = calloc(rs->n ? rs->n : 1, 1);
    int failures = 0;
    size_t written = 0, skipped = 0;
    if (!items || !done) {
        free(items), free(done);
        (void)dpplot_strlist_addf(notes, "--timelines each: out of memory");
        return 1;
    }
    int several_sweeps = 0;
    for (size_t i = 0; i < rs->n; i++)
        if (rs->items[i].sweep_name && rs->items[0].sweep_name &&
            strcmp(rs->items[i].sweep_name, rs->items[0].sweep_name) != 0)
            several_sweeps = 1;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (done[i] || !r->sweep_name || !dpplot_point_matches(r, opt ? opt->point : NULL)) continue;
        char label[256], other[256];
        dpplot_point_label(r, label, sizeof label);
        size_t n = 0;
        for (size_t j = i; j < rs->n; j++) { /* the point's methods, in the results' order */
            const dpplot_result *q = &rs->items[j];
            if (done[j] || !q->sweep_name || strcmp(q->sweep_name, r->sweep_name) != 0) continue;
            dpplot_point_label(q, other, sizeof other);
            if (strcmp(label, other) == 0) items[n++] = q, done[j] = 1;
        }
        if (written == MAX_EACH_FILES) {
            skipped++;
            continue;
        }
        char part[200], path[4096], context[1536], model[1024];
        point_file_part(r, part, sizeof part);
        snprintf(path, sizeof path, "%s/%s%smemory_timeline_%s.png", out_dir, several_sweeps ? r->sweep_name : "",
                 several_sweeps ? "_" : "", part[0] ? part : "point");
        dpplot_report_context_of(r, model, sizeof model);
        snprintf(context, sizeof context, "%s%sat %s (sweep '%s')", model, model[0] ? "  ·  " : "", label,
                 r->sweep_name);
        dpplot_selection sel = {items, n, context};
        int rc = dpplot_report_timeline(&sel, path, opt, notes);
        if (rc < 0) failures++;
        if (rc > 0) written++;
    }
    if (skipped)
        (void)dpplot_strlist_addf(notes,
                                  "--timelines each: %d files at most; %zu further configuration(s) left out (choose "
                                  "points with --point KEY=VALUE)",
                                  MAX_EACH_FILES, skipped);
    free(items), free(done);
    return failures;
}
