/* report_sweep.c: sweep_<var>.png (one swept variable) and the metric heatmaps (two, the rest
 * fixed or faceted). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_heatmap.h"
#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"
#include "sweep_util.h"

#define MAX_METHODS DPPLOT_SWEEP_MAX_METHODS
#define MAX_VALUES DPPLOT_SWEEP_MAX_VALUES

/* Whether a and b show the same value at point i: within 0.1%, or within `near` (a difference
 * too small to draw apart: 3130 and 3141 ms on a 0..12 s axis). */
static int same_at(const dpplot_series *a, const dpplot_series *b, size_t i, double near) {
    if (i >= a->n || i >= b->n) return 0;
    int fa = isfinite(a->y[i]) && !(a->oom && a->oom[i]), fb = isfinite(b->y[i]) && !(b->oom && b->oom[i]);
    return fa && fb && fabs(a->y[i] - b->y[i]) <= fmax(near, 1e-3 * fmax(fabs(a->y[i]), fabs(b->y[i])));
}

/* 1% of the largest value the series show: closer than this, two lines lie under each other. */
static double near_of(const dpplot_series *s, size_t n) {
    double top = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < s[i].n; k++)
            if (isfinite(s[i].y[k])) top = fmax(top, fabs(s[i].y[k]));
    return 0.01 * top;
}

/* Keeps series that coincide visible. A point of s[i] equal to the point of a series before it
 * (the canonical method order, so the DP method is marked, not vanilla) is drawn as a ring around
 * the other's marker (ring[i][k]); a series equal at every point is also drawn dotted and last
 * (order[], the drawing order, is rewritten so). Adds "ghost = vanilla (what)" ("ghost ≈ vanilla"
 * when within 1% of the axis, not equal; "... at 3 of 4 points" where equal in part) to notes; returns how many series
 * coincide somewhere. */
static size_t mark_coinciding(dpplot_series *s, size_t n, size_t *order, unsigned char ring[][MAX_VALUES],
                              const char *what, char *notes, size_t len) {
    size_t marked = 0;
    int whole[MAX_METHODS] = {0};
    double near = near_of(s, n);
    for (size_t i = 0; i < n; i++) {
        /* first as drawn (within 1% of the axis); a series that is not under another at every
         * point then counts only its exactly equal points (lines meet near zero, not hide) */
        size_t rings = 0, finite = 0, with = n, exact = 0;
        for (int pass = 0; pass < 2; pass++) {
            double tol = pass == 0 ? near : 0;
            rings = finite = exact = 0, with = n;
            for (size_t k = 0; k < s[i].n; k++) {
                ring[i][k] = 0;
                if (!isfinite(s[i].y[k]) || (s[i].oom && s[i].oom[k])) continue;
                finite++;
                for (size_t j = 0; j < i && !ring[i][k]; j++)
                    if (same_at(&s[i], &s[j], k, tol)) {
                        ring[i][k] = 1, with = with == n ? j : with;
                        exact += same_at(&s[i], &s[j], k, 0);
                    }
                rings += ring[i][k];
            }
            if (rings == finite) break;
        }
        if (rings == 0) continue;
        s[i].ring = ring[i];
        size_t used = strlen(notes);
        const char *eq = exact < rings ? "\xe2\x89\x88" : "="; /* ≈: apart by less than 1% of the axis */
        if (rings == finite) {
            whole[i] = 1;
            s[i].dashed = DPPLOT_DASH_DOTTED;
            snprintf(notes + used, len - used, "%s%s %s %s (%s)", used ? "; " : "", s[i].name, eq, s[with].name, what);
        } else {
            snprintf(notes + used, len - used, "%s%s = %s at %zu of %zu points (%s)", used ? "; " : "", s[i].name,
                     s[with].name, rings, finite, what);
        }
        marked++;
    }
    size_t out[MAX_METHODS], k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t j = 0; j < n; j++)
            if (whole[order[j]] == pass) out[k++] = order[j];
    memcpy(order, out, n * sizeof *order);
    return marked;
}

int dpplot_report_sweep(const dpplot_results *rs, const char *sweep, const char *x_key, const char *path,
                        const dpplot_options *opt, dpplot_strlist *notes) {
    dpplot_value_set xs;
    dpplot_sweep_values(rs, sweep, x_key, &xs);
    const char *methods[MAX_METHODS];
    size_t n_m = dpplot_sweep_methods(rs, sweep, methods);
    if (xs.n == 0 || n_m == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' has no values of '%s'", dpplot_report_basename(path),
                                  sweep, x_key);
        return 0;
    }
    /* Per method: memory, time (median, min, max) and OOM flag at each x position. */
    static const double nan_init = NAN;
    double x[MAX_VALUES], mem[MAX_METHODS][MAX_VALUES], ms[MAX_METHODS][MAX_VALUES];
    double ms_lo[MAX_METHODS][MAX_VALUES], ms_hi[MAX_METHODS][MAX_VALUES];
    unsigned char oom[MAX_METHODS][MAX_VALUES];
    int log2x = dpplot_wants_log2(x_key, &xs);
    for (size_t k = 0; k < xs.n; k++) x[k] = xs.numeric ? xs.number[k] : (double)k;
    for (size_t m = 0; m < n_m; m++)
        for (size_t k = 0; k < xs.n; k++) mem[m][k] = ms[m][k] = ms_lo[m][k] = ms_hi[m][k] = nan_init, oom[m][k] = 0;
    char failed[512] = "";
    size_t failed_len = 0, n_oom_series = 0;
    int any_point = 0, predicted = 0, max_runs = 1;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep)) continue;
        const dpplot_vary *v = dpplot_result_vary(r, x_key);
        size_t k = dpplot_value_index(&xs, v), m = 0;
        while (m < n_m && strcmp(methods[m], r->method) != 0) m++;
        if (k >= xs.n || m >= n_m) continue;
        if (r->status == DPPLOT_STATUS_OOM) {
            oom[m][k] = 1;
        } else if (r->status == DPPLOT_STATUS_OK) {
            if (r->has_peak) mem[m][k] = r->peak_bytes, any_point = 1;
            ms[m][k] = dpplot_metric_value(rs, r, DPPLOT_METRIC_TIME, &ms_lo[m][k], &ms_hi[m][k]);
            if (r->predicted) ms_lo[m][k] = ms_hi[m][k] = NAN; /* one estimate: no whiskers, no entry */
            predicted |= r->predicted;
            if (r->n_runs > max_runs) max_runs = r->n_runs;
        } else if (failed_len < sizeof failed - 1) {
            int w = snprintf(failed + failed_len, sizeof failed - failed_len, "%s%s %s=%s (%s)",
                             failed_len ? ", " : "Failed, not drawn: ", r->method, x_key, v->text,
                             dpplot_status_name(r->status));
            if (w > 0) failed_len += (size_t)w;
        }
    }
    for (size_t m = 0; m < n_m; m++) {
        int any = 0;
        for (size_t k = 0; k < xs.n; k++) any |= oom[m][k];
        n_oom_series += (size_t)any;
    }
    if (!any_point && n_oom_series == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' has no finished or OOM points",
                                  dpplot_report_basename(path), sweep);
        return 0;
    }
    dpplot_series mem_s[MAX_METHODS], ms_s[MAX_METHODS];
    /* The vanilla baseline is drawn dashed after the others; a series that coincides with one
     * drawn before it (ghost's peak is often vanilla's) is dotted with rings around the markers,
     * drawn last, and named in the legend. */
    size_t mem_order[MAX_METHODS], ms_order[MAX_METHODS], n_order = 0;
    for (size_t m = 0; m < n_m; m++)
        if (dpplot_method_rank(methods[m]) != 0) mem_order[n_order++] = m;
    for (size_t m = 0; m < n_m; m++)
        if (dpplot_method_rank(methods[m]) == 0) mem_order[n_order++] = m;
    memcpy(ms_order, mem_order, sizeof mem_order);
    for (size_t m = 0; m < n_m; m++) {
        dpplot_rgb c = dpplot_method_color(methods[m]);
        dpplot_marker mk = dpplot_method_marker(methods[m]);
        int baseline = dpplot_method_rank(methods[m]) == 0;
        mem_s[m] = (dpplot_series){.name = methods[m],
                                   .color = c,
                                   .x = x,
                                   .y = mem[m],
                                   .n = xs.n,
                                   .oom = oom[m],
                                   .marker = mk,
                                   .dashed = baseline,
                                   .line_width = 2.5};
        ms_s[m] = mem_s[m];
        ms_s[m].y = ms[m], ms_s[m].y_lo = ms_lo[m], ms_s[m].y_hi = ms_hi[m];
    }
    char same[512] = "";
    unsigned char mem_ring[MAX_METHODS][MAX_VALUES], ms_ring[MAX_METHODS][MAX_VALUES];
    size_t n_same = mark_coinciding(mem_s, n_m, mem_order, mem_ring, "peak memory", same, sizeof same);
    n_same += mark_coinciding(ms_s, n_m, ms_order, ms_ring, "step time", same, sizeof same);
    dpplot_legend_entry legend[MAX_METHODS + 3];
    for (size_t m = 0; m < n_m; m++)
        legend[m] = (dpplot_legend_entry){methods[m], dpplot_method_color(methods[m]),
                                          dpplot_swatch_of_dash(dpplot_method_rank(methods[m]) == 0),
                                          dpplot_method_marker(methods[m])};
    size_t n_legend = n_m;
    if (n_oom_series)
        legend[n_legend++] =
            (dpplot_legend_entry){"out of memory", DPPLOT_MUTED, DPPLOT_SWATCH_MARKER, DPPLOT_MARKER_CROSS};
    int any_spread = 0;
    for (size_t m = 0; m < n_m; m++)
        for (size_t k = 0; k < xs.n; k++) any_spread |= isfinite(ms_lo[m][k]) && ms_hi[m][k] > ms_lo[m][k];
    char spread[96];
    if (any_spread) {
        snprintf(spread, sizeof spread, "time: median, whiskers min-max of %s",
                 max_runs > 1 ? "the repeated runs" : "the iterations");
        legend[n_legend++] = (dpplot_legend_entry){spread, DPPLOT_INK, DPPLOT_SWATCH_WHISKER, DPPLOT_MARKER_NONE};
    }
    char same_note[600];
    if (n_same) /* said on the command line too: the figures are the same, not missing */
        (void)dpplot_strlist_addf(notes, "%s: %s; drawn with rings so both show", dpplot_report_basename(path), same);
    if (n_same) {
        snprintf(same_note, sizeof same_note, "%s: ringed%s", same,
                 strstr(same, "\xe2\x89\x88") ? " (\xe2\x89\x88: within 1% of the axis)" : "");
        legend[n_legend++] = (dpplot_legend_entry){same_note, DPPLOT_INK, DPPLOT_SWATCH_DOTTED, DPPLOT_MARKER_CIRCLE};
    }

    dpplot_canvas *cv = dpplot_report_canvas(opt, path, notes);
    if (!cv) return -1;
    double W = dpplot_canvas_width(cv), H = dpplot_canvas_height(cv);
    char title[160], context[1024];
    snprintf(title, sizeof title, "Peak memory and step time against %s", x_key);
    dpplot_report_context_of(dpplot_sweep_first(rs, sweep), context, sizeof context);
    double top = dpplot_figure_title(cv, title, context[0] ? context : NULL);
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 120}, legend, n_legend) + 8;
    double bottom_note = failed[0] ? 30 : 0;

    double xmin, xmax;
    dpplot_sweep_x_range(&xs, x, log2x, 0.05, &xmin, &xmax);
    dpplot_series *sets[2] = {mem_s, ms_s};
    size_t *orders[2] = {mem_order, ms_order};
    const char *titles[2] = {"Peak memory", "Time per step"};
    const char *y_titles[2] = {"Peak memory", dpplot_metric_title(DPPLOT_METRIC_TIME, predicted)};
    double card = dpplot_sweep_card_bytes(rs, sweep); /* a plan sweep's card, on the memory axis */
    dpplot_unit units[2] = {DPPLOT_UNIT_BYTES, DPPLOT_UNIT_MS};
    for (int panel = 0; panel < 2; panel++) {
        dpplot_series drawn[MAX_METHODS];
        for (size_t k = 0; k < n_m; k++) drawn[k] = sets[panel][orders[panel][k]];
        double a, b, c, d;
        if (!dpplot_series_range(drawn, n_m, &a, &b, &c, &d)) d = 1;
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.title = titles[panel];
        s.x_label = x_key;
        s.y_label = y_titles[panel];
        s.x_scale = log2x ? DPPLOT_SCALE_LOG2 : DPPLOT_SCALE_LINEAR;
        s.x_min = xmin, s.x_max = xmax;
        if (xs.numeric && xs.n <= 12) s.x_ticks = x, s.n_x_ticks = xs.n; /* tick at the swept values */
        s.y_unit = units[panel];
        s.y_min = 0, s.y_max = (panel == 0 ? dpplot_report_card_axis(d, card) : d) * 1.08, s.y_extend = 1;
        if (!xs.numeric) s.x_categories = xs.label, s.n_x_categories = xs.n;
        s.top_band = dpplot_oom_band(n_oom_series);
        dpplot_rect outer = {10 + (W - 20) / 2 * panel, top, (W - 20) / 2 - 10, H - top - 10 - bottom_note};
        if (dpplot_panel_begin(&p, cv, outer, &s) != 0) continue;
        dpplot_lines_draw(&p, drawn, n_m);
        if (panel == 0) dpplot_report_card_line(&p, card, 0);
        dpplot_panel_end(&p);
    }
    dpplot_figure_note(cv, failed);
    return dpplot_report_save(cv, path, notes);
}

/* One heatmap panel: a method at one combination of the other keys (a facet). */
typedef struct {
    const char *method;
    char facet[160]; /* "lora_rank=8, max_physical_batch_size=2" ("" without facets) */
    double *values;
    unsigned char *oom;
    unsigned char *unfit; /* a plan point that does not fit the card */
} heat_panel;

/* The facet of r: its values of the keys other than x, y and method, "k=v, k=v". */
static void facet_of(const dpplot_result *r, const char *x_key, const char *y_key, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_vary; i++) {
        const char *k = r->vary[i].key;
        if (!strcmp(k, "method") || !strcmp(k, x_key) || !strcmp(k, y_key)) continue;
        int w = snprintf(buf + used, len - used, "%s%s=%s", used ? ", " : "", k, r->vary[i].text);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
}

#define MAX_HEAT_PANELS 24
#define HEAT_NO_FIT (-2) /* heatmap_at: the panels do not fit one chart (nothing written, no note) */

static void free_panels(heat_panel *panels, size_t n_p) {
    for (size_t j = 0; j < n_p; j++) free(panels[j].values), free(panels[j].oom), free(panels[j].unfit);
}

/* The heatmap of the points matching filter: 1 written, 0 skipped (with a note), -1 failed (with
 * a note), HEAT_NO_FIT when its panels (*n_panels of them) do not fit the canvas. */
static int heatmap_at(const dpplot_results *rs, const char *sweep, const char *x_key, const char *y_key,
                      dpplot_metric metric, const char *filter, const char *chosen, const char *path,
                      const dpplot_options *opt, dpplot_strlist *notes, size_t *n_panels) {
    dpplot_value_set xs, ys;
    dpplot_sweep_values(rs, sweep, x_key, &xs);
    dpplot_sweep_values(rs, sweep, y_key, &ys);
    if (xs.n == 0 || ys.n == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' lacks values of '%s' or '%s'",
                                  dpplot_report_basename(path), sweep, x_key, y_key);
        return 0;
    }
    size_t cells = xs.n * ys.n, n_p = 0, dropped = 0;
    heat_panel panels[MAX_HEAT_PANELS];
    double vmin = INFINITY, vmax = -INFINITY, card = NAN;
    int predicted = 0, any_value = 0, any_unfit = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep) || !dpplot_point_matches(r, filter)) continue;
        if (metric == DPPLOT_METRIC_EXTRA && dpplot_method_rank(r->method) == 0) continue; /* its own baseline */
        const dpplot_vary *vx = dpplot_result_vary(r, x_key), *vy = dpplot_result_vary(r, y_key);
        size_t cx = dpplot_value_index(&xs, vx), cy = dpplot_value_index(&ys, vy);
        if (cx >= xs.n || cy >= ys.n) continue;
        char facet[160];
        facet_of(r, x_key, y_key, facet, sizeof facet);
        size_t k = 0;
        while (k < n_p && !(strcmp(panels[k].method, r->method) == 0 && strcmp(panels[k].facet, facet) == 0)) k++;
        if (k == n_p) {
            if (n_p == MAX_HEAT_PANELS) {
                dropped++;
                continue;
            }
            panels[k].method = r->method;
            snprintf(panels[k].facet, sizeof panels[k].facet, "%s", facet);
            panels[k].values = malloc(cells * sizeof(double));
            panels[k].oom = calloc(cells, 1);
            panels[k].unfit = calloc(cells, 1);
            if (!panels[k].values || !panels[k].oom || !panels[k].unfit) {
                free_panels(panels, n_p + 1);
                (void)dpplot_strlist_addf(notes, "%s: out of memory", dpplot_report_basename(path));
                return -1;
            }
            for (size_t c = 0; c < cells; c++) panels[k].values[c] = NAN;
            n_p++;
        }
        size_t at = cy * xs.n + cx;
        if (r->status == DPPLOT_STATUS_OOM) {
            panels[k].oom[at] = 1;
            continue;
        }
        double v = dpplot_metric_value(rs, r, metric, NULL, NULL);
        if (!isfinite(v)) continue;
        panels[k].values[at] = v;
        if (r->fit == 0) { /* a plan point beyond the card: marked, never shown as if it ran */
            panels[k].unfit[at] = 1, any_unfit = 1;
            if (isfinite(r->card_bytes)) card = r->card_bytes;
        }
        vmin = fmin(vmin, v), vmax = fmax(vmax, v);
        predicted |= r->predicted;
        any_value = 1;
    }
    *n_panels = dropped ? MAX_HEAT_PANELS + 1 : n_p; /* more than a chart holds, however many */
    if (!any_value) {
        free_panels(panels, n_p);
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' has no %s values%s", dpplot_report_basename(path),
                                  sweep, dpplot_metric_name(metric),
                                  metric == DPPLOT_METRIC_EXTRA ? " (no vanilla run at the same points)" : "");
        return 0;
    }
    if (dropped) {
        free_panels(panels, n_p);
        return HEAT_NO_FIT;
    }
    /* The colour scale from the data's range: log2 over a wide positive range; linear otherwise,
     * unless most cells would sit in the darkest tenth of it (extra memory: a few GiB among
     * kilobytes), then log2 from the smallest positive value (at most 12 octaves down), cells at or
     * under it darkest. The colour bar says which. */
    if (vmax == vmin) vmin = vmin > 0 ? vmin * 0.5 : vmin - 1, vmax = vmax * 1.5 + 1;
    dpplot_scale cscale = vmin > 0 && vmax / vmin > 4 ? DPPLOT_SCALE_LOG2 : DPPLOT_SCALE_LINEAR;
    double floor_shown = NAN; /* log2 after all: cells at or under this are darkest */
    if (cscale == DPPLOT_SCALE_LINEAR && vmax > 0) {
        size_t n_vals = 0, n_low = 0;
        double min_pos = INFINITY;
        for (size_t k = 0; k < n_p; k++)
            for (size_t c = 0; c < cells; c++) {
                double v = panels[k].values[c];
                if (!isfinite(v)) continue;
                n_vals++;
                n_low += (v - vmin) < 0.1 * (vmax - vmin);
                if (v > 0) min_pos = fmin(min_pos, v);
            }
        if (n_vals > 0 && 2 * n_low > n_vals && isfinite(min_pos) && vmax / min_pos > 4) {
            cscale = DPPLOT_SCALE_LOG2;
            floor_shown = fmax(min_pos, vmax / 4096.0);
            if (vmin < floor_shown) vmin = floor_shown;
        }
    }
    dpplot_unit unit = dpplot_metric_unit(metric);

    dpplot_canvas *cv = dpplot_report_canvas(opt, path, notes);
    if (!cv) {
        free_panels(panels, n_p);
        return -1;
    }
    double W = dpplot_canvas_width(cv), H = dpplot_canvas_height(cv);
    char title[200], context[1024], fit_note[160] = "";
    snprintf(title, sizeof title, "%s over %s × %s", dpplot_metric_title(metric, predicted), x_key, y_key);
    dpplot_report_context_of(dpplot_sweep_first(rs, sweep), context, sizeof context);
    const char *at_text = chosen && *chosen ? chosen : filter;
    if (at_text && *at_text) {
        size_t used = strlen(context);
        snprintf(context + used, sizeof context - used, "%sat %.200s", used ? "  ·  " : "", at_text);
    }
    if (any_unfit) {
        char c[32] = "the card";
        if (isfinite(card)) dpplot_format_value(card, DPPLOT_UNIT_BYTES, c, sizeof c);
        snprintf(fit_note, sizeof fit_note, "red hatched cells: predicted not to fit the card (%s): plan.fits is false",
                 c);
    }
    double top = dpplot_figure_title(cv, title, context[0] ? context : NULL);
    double bar_space = 190, bottom_note = fit_note[0] ? 30 : 0;
    size_t cols = n_p <= 3 ? n_p : n_p <= 4 ? 2 : n_p <= 9 ? 3 : 4, rows = (n_p + cols - 1) / cols;
    double cell_w = (W - 20 - bar_space) / (double)cols, cell_h = (H - top - 10 - bottom_note) / (double)rows;
    double plot_top = INFINITY, plot_bottom = -INFINITY;
    int show_values = cells * n_p <= 240; /* numbers in the cells while they stay readable */
    size_t drawn = 0;
    for (size_t k = 0; k < n_p; k++) {
        size_t row = k / cols, col = k % cols;
        dpplot_rgb color = dpplot_method_color(panels[k].method);
        char ptitle[220];
        if (panels[k].facet[0])
            snprintf(ptitle, sizeof ptitle, "%s · %s", panels[k].method, panels[k].facet);
        else
            snprintf(ptitle, sizeof ptitle, "%s", panels[k].method);
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.title = ptitle;
        s.title_swatch = &color;
        s.x_label = row == rows - 1 || k + cols >= n_p ? x_key : NULL;
        s.y_label = col == 0 ? y_key : NULL;
        s.x_categories = xs.label, s.n_x_categories = xs.n;
        s.y_categories = ys.label, s.n_y_categories = ys.n;
        s.no_grid = 1;
        dpplot_rect outer = {10 + cell_w * (double)col, top + cell_h * (double)row, cell_w - 10, cell_h - 8};
        if (dpplot_panel_begin(&p, cv, outer, &s) != 0) break; /* too small: fewer panels, below */
        dpplot_heatmap_spec h = {xs.n,   ys.n, panels[k].values, panels[k].oom,  vmin, vmax,
                                 cscale, unit, show_values,      panels[k].unfit};
        dpplot_heatmap_draw(&p, &h);
        dpplot_panel_end(&p);
        drawn++;
        plot_top = fmin(plot_top, p.plot.y), plot_bottom = fmax(plot_bottom, p.plot.y + p.plot.h);
    }
    free_panels(panels, n_p);
    if (drawn < n_p) {
        dpplot_canvas_free(cv);
        return HEAT_NO_FIT;
    }
    /* The colorbar spans the panels' plot areas, so its ends line up with the cells. */
    char bar_label[200], low[32];
    snprintf(bar_label, sizeof bar_label, "%s, %s colour scale", dpplot_metric_title(metric, predicted),
             cscale == DPPLOT_SCALE_LINEAR ? "linear" : "log\xe2\x82\x82");
    if (isfinite(floor_shown)) {
        dpplot_format_value(floor_shown, unit, low, sizeof low);
        size_t used = strlen(bar_label);
        snprintf(bar_label + used, sizeof bar_label - used, " (\xe2\x89\xa4 %s darkest)", low);
    }
    dpplot_colorbar_draw(cv, (dpplot_rect){W - bar_space + 10, plot_top, 24, plot_bottom - plot_top}, vmin, vmax,
                         cscale, unit, bar_label);
    if (fit_note[0]) dpplot_figure_note(cv, fit_note);
    return dpplot_report_save(cv, path, notes);
}

/* The values of key among the sweep's points that match filter: 1 and the first (in the sweep's
 * order) in *first when it takes two or more, else 0. */
static int facet_choice(const dpplot_results *rs, const char *sweep, const char *key, const char *filter,
                        const char **first, size_t *n_values) {
    dpplot_value_set vs;
    dpplot_sweep_values(rs, sweep, key, &vs);
    unsigned char seen[DPPLOT_SWEEP_MAX_VALUES] = {0};
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep) || !dpplot_point_matches(r, filter)) continue;
        size_t j = dpplot_value_index(&vs, dpplot_result_vary(r, key));
        if (j < vs.n) seen[j] = 1;
    }
    size_t n = 0;
    *first = NULL;
    for (size_t j = 0; j < vs.n; j++)
        if (seen[j]) {
            if (!*first) *first = vs.text[j];
            n++;
        }
    *n_values = n;
    return n > 1;
}

/* The heatmap of a metric. When its panels (a method and a combination of the other swept values
 * each) are more than one chart holds, the other variables are fixed one at a time, the one with
 * the most values first, at their first value, until the panels fit; the chart and a note say
 * where. It is never written empty: what cannot be drawn is skipped with a note saying why. */
int dpplot_report_heatmap_metric(const dpplot_results *rs, const char *sweep, const char *x_key, const char *y_key,
                                 int metric_i, const char *filter, const char *path, const dpplot_options *opt,
                                 dpplot_strlist *notes) {
    dpplot_metric metric = (dpplot_metric)metric_i;
    char filt[1024], chosen[512] = "";
    snprintf(filt, sizeof filt, "%s", filter ? filter : "");
    size_t first_panels = 0;
    for (;;) {
        size_t n_p = 0;
        int rc = heatmap_at(rs, sweep, x_key, y_key, metric, filt[0] ? filt : NULL, filt, path, opt, notes, &n_p);
        if (!first_panels) first_panels = n_p;
        if (rc != HEAT_NO_FIT) {
            if (rc > 0 && chosen[0])
                (void)dpplot_strlist_addf(notes,
                                          "%s: %s%zu panels are more than one chart holds; drawn at %s (choose "
                                          "others with --point KEY=VALUE)",
                                          dpplot_report_basename(path), first_panels > MAX_HEAT_PANELS ? "over " : "",
                                          first_panels > MAX_HEAT_PANELS ? (size_t)MAX_HEAT_PANELS : first_panels,
                                          chosen);
            return rc;
        }
        const char *keys[DPPLOT_SWEEP_MAX_KEYS], *best = NULL, *best_value = NULL;
        size_t nk = dpplot_sweep_keys(rs, sweep, keys, DPPLOT_SWEEP_MAX_KEYS), best_n = 0;
        for (size_t k = 0; k < nk; k++) {
            const char *value;
            size_t n_values;
            if (!strcmp(keys[k], x_key) || !strcmp(keys[k], y_key) || !strcmp(keys[k], "method")) continue;
            if (facet_choice(rs, sweep, keys[k], filt[0] ? filt : NULL, &value, &n_values) && n_values > best_n)
                best = keys[k], best_value = value, best_n = n_values;
        }
        size_t used = strlen(filt), used_c = strlen(chosen);
        if (!best || used + strlen(best) + strlen(best_value) + 3 >= sizeof filt ||
            used_c + strlen(best) + strlen(best_value) + 4 >= sizeof chosen) {
            (void)dpplot_strlist_addf(notes,
                                      "%s: skipped, its %s%zu panels do not fit one chart%s%s (fix variables with "
                                      "--point KEY=VALUE)",
                                      dpplot_report_basename(path), n_p > MAX_HEAT_PANELS ? "over " : "",
                                      n_p > MAX_HEAT_PANELS ? (size_t)MAX_HEAT_PANELS : n_p,
                                      chosen[0] ? " even at " : "", chosen);
            return 0;
        }
        snprintf(filt + used, sizeof filt - used, "%s%s=%s", used ? "," : "", best, best_value);
        snprintf(chosen + used_c, sizeof chosen - used_c, "%s%s=%s", used_c ? ", " : "", best, best_value);
    }
}

int dpplot_report_heatmap(const dpplot_results *rs, const char *sweep, const char *x_key, const char *y_key,
                          const char *path, const dpplot_options *opt, dpplot_strlist *notes) {
    return dpplot_report_heatmap_metric(rs, sweep, x_key, y_key, DPPLOT_METRIC_PEAK, NULL, path, opt, notes);
}
