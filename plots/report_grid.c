/* report_grid.c: sweep_grid_<metric>.png, small multiples of a sweep over three or four variables:
 * the metric against the first variable, a line per value of the second (and per method), one
 * panel per value of the third (columns) and the fourth (rows), on shared axes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"
#include "sweep_util.h"

#define MAX_SERIES 32
#define MAX_PANELS 16

typedef struct {
    double y[DPPLOT_SWEEP_MAX_VALUES], lo[DPPLOT_SWEEP_MAX_VALUES], hi[DPPLOT_SWEEP_MAX_VALUES];
    unsigned char oom[DPPLOT_SWEEP_MAX_VALUES];
} series_data;

/* A line's colour: one method, a sequential (viridis) colour per value of the series variable;
 * several methods, the method's colour (the value then tells itself by its dash pattern). */
static dpplot_rgb line_color(size_t n_methods, const char *method, size_t j, size_t nj) {
    if (n_methods > 1) return dpplot_method_color(method);
    return dpplot_viridis(nj > 1 ? 0.78 * (double)j / (double)(nj - 1) : 0.3);
}

/* 1 when series a and b have the same values wherever either has one, in every panel, and at
 * least one value: to 1e-4 of the larger, or within `near` (a fraction of the axis too small to
 * draw apart: 682 and 698 ms lines on a 0..2000 ms axis lie under each other). */
static int series_coincide(const series_data *data, size_t n_panels, size_t n_series, size_t a, size_t b, size_t nx,
                           double near) {
    int any = 0;
    for (size_t p = 0; p < n_panels; p++) {
        const series_data *da = &data[p * n_series + a], *db = &data[p * n_series + b];
        for (size_t k = 0; k < nx; k++) {
            if (da->oom[k] != db->oom[k] || isfinite(da->y[k]) != isfinite(db->y[k])) return 0;
            if (!isfinite(da->y[k])) continue;
            if (fabs(da->y[k] - db->y[k]) > fmax(near, 1e-4 * fmax(fabs(da->y[k]), fabs(db->y[k])))) return 0;
            any = 1;
        }
    }
    return any;
}

/* "batch=8,16,32 coincide" (one method, or the same method throughout: "ghost: batch=8,16
 * coincide"), "vanilla, bk, flash_clip coincide at batch=8", or the lines' names in full. */
static void coincide_note(const size_t *members, size_t nm, const char *const *methods, size_t n_values,
                          const char *key, const dpplot_value_set *ss, size_t n_m, char *buf, size_t len) {
    size_t m0 = members[0] / n_values, j0 = members[0] % n_values;
    int same_method = 1, same_value = 1;
    for (size_t i = 1; i < nm; i++) {
        same_method &= members[i] / n_values == m0;
        same_value &= members[i] % n_values == j0;
    }
    size_t used = 0;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        int w_ = snprintf(buf + used, len - used, __VA_ARGS__);                                                        \
        if (w_ > 0) used = used + (size_t)w_ < len ? used + (size_t)w_ : len - 1;                                      \
    } while (0)
    buf[0] = '\0';
    if (same_method) {
        if (n_m > 1) ADD("%s: ", methods[m0]);
        ADD("%s=", key);
        for (size_t i = 0; i < nm; i++) ADD("%s%s", i ? "," : "", ss->text[members[i] % n_values]);
        ADD(" coincide");
    } else if (same_value) {
        for (size_t i = 0; i < nm; i++) ADD("%s%s", i ? ", " : "", methods[members[i] / n_values]);
        ADD(" coincide at %s=%s", key, ss->text[j0]);
    } else {
        /* every method of the group at every value of it: "vanilla, ghost at batch=8,16 coincide" */
        size_t um[MAX_SERIES], uv[MAX_SERIES], n_um = 0, n_uv = 0;
        for (size_t i = 0; i < nm; i++) {
            size_t m = members[i] / n_values, j = members[i] % n_values, a = 0, b = 0;
            while (a < n_um && um[a] != m) a++;
            if (a == n_um) um[n_um++] = m;
            while (b < n_uv && uv[b] != j) b++;
            if (b == n_uv) uv[n_uv++] = j;
        }
        if (n_um * n_uv == nm) {
            for (size_t a = 0; a < n_um; a++) ADD("%s%s", a ? ", " : "", methods[um[a]]);
            ADD(" at %s=", key);
            for (size_t b = 0; b < n_uv; b++) ADD("%s%s", b ? "," : "", ss->text[uv[b]]);
        } else {
            for (size_t i = 0; i < nm; i++)
                ADD("%s%s %s=%s", i ? ", " : "", methods[members[i] / n_values], key, ss->text[members[i] % n_values]);
        }
        ADD(" coincide");
    }
#undef ADD
}

int dpplot_report_sweep_grid(const dpplot_results *rs, const char *sweep, const char *const *keys, size_t nk,
                             int metric_i, const char *filter, const char *path, const dpplot_options *opt,
                             dpplot_strlist *notes) {
    dpplot_metric metric = (dpplot_metric)metric_i;
    if (nk < 3) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, small multiples need three swept variables",
                                  dpplot_report_basename(path));
        return 0;
    }
    dpplot_value_set xs, ss, cs, rws;
    dpplot_sweep_values(rs, sweep, keys[0], &xs);
    dpplot_sweep_values(rs, sweep, keys[1], &ss);
    dpplot_sweep_values(rs, sweep, keys[2], &cs);
    if (nk > 3)
        dpplot_sweep_values(rs, sweep, keys[3], &rws);
    else
        memset(&rws, 0, sizeof rws), rws.n = 1;
    const char *methods[DPPLOT_SWEEP_MAX_METHODS];
    size_t n_m = dpplot_sweep_methods(rs, sweep, methods);
    size_t n_series = n_m * ss.n, n_panels = cs.n * rws.n;
    if (xs.n == 0 || n_series == 0 || n_series > MAX_SERIES || n_panels > MAX_PANELS) {
        (void)dpplot_strlist_addf(notes,
                                  "%s: skipped, %zu lines in %zu panels is more than a chart holds (%d and %d); fix "
                                  "a variable with --point KEY=VALUE",
                                  dpplot_report_basename(path), n_series, n_panels, MAX_SERIES, MAX_PANELS);
        return 0;
    }
    series_data *data = calloc(n_panels * n_series, sizeof *data);
    if (!data) {
        (void)dpplot_strlist_addf(notes, "%s: out of memory", dpplot_report_basename(path));
        return -1;
    }
    for (size_t i = 0; i < n_panels * n_series; i++)
        for (size_t k = 0; k < DPPLOT_SWEEP_MAX_VALUES; k++) data[i].y[k] = data[i].lo[k] = data[i].hi[k] = NAN;
    int any = 0, predicted = 0, max_runs = 1, any_oom = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep) || !dpplot_point_matches(r, filter)) continue;
        size_t kx = dpplot_value_index(&xs, dpplot_result_vary(r, keys[0]));
        size_t ks = dpplot_value_index(&ss, dpplot_result_vary(r, keys[1]));
        size_t kc = dpplot_value_index(&cs, dpplot_result_vary(r, keys[2]));
        size_t kr = nk > 3 ? dpplot_value_index(&rws, dpplot_result_vary(r, keys[3])) : 0, m = 0;
        while (m < n_m && strcmp(methods[m], r->method) != 0) m++;
        if (kx >= xs.n || ks >= ss.n || kc >= cs.n || kr >= rws.n || m >= n_m) continue;
        series_data *d = &data[(kr * cs.n + kc) * n_series + m * ss.n + ks];
        if (r->status == DPPLOT_STATUS_OOM) {
            d->oom[kx] = 1, any_oom = 1;
            continue;
        }
        double v = dpplot_metric_value(rs, r, metric, &d->lo[kx], &d->hi[kx]);
        if (!isfinite(v)) continue;
        d->y[kx] = v, any = 1;
        if (r->predicted) d->lo[kx] = d->hi[kx] = NAN; /* one estimate: no spread to draw */
        predicted |= r->predicted;
        if (r->n_runs > max_runs) max_runs = r->n_runs;
    }
    if (!any) {
        free(data);
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' has no %s values", dpplot_report_basename(path),
                                  sweep, dpplot_metric_name(metric));
        return 0;
    }
    double x[DPPLOT_SWEEP_MAX_VALUES];
    for (size_t k = 0; k < xs.n; k++) x[k] = xs.numeric ? xs.number[k] : (double)k;
    int log2x = dpplot_wants_log2(keys[0], &xs);
    /* Lines: colour per value (one method) or per method; dash pattern per value with several
     * methods; the legend says which. */
    dpplot_legend_entry legend[MAX_SERIES + DPPLOT_SWEEP_MAX_METHODS + 8];
    char value_labels[DPPLOT_SWEEP_MAX_VALUES][96];
    size_t nl = 0;
    static const dpplot_marker by_value[] = {DPPLOT_MARKER_CIRCLE,  DPPLOT_MARKER_SQUARE,        DPPLOT_MARKER_TRIANGLE,
                                             DPPLOT_MARKER_DIAMOND, DPPLOT_MARKER_TRIANGLE_DOWN, DPPLOT_MARKER_HEXAGON};
    for (size_t j = 0; j < ss.n; j++) snprintf(value_labels[j], sizeof value_labels[j], "%s=%s", keys[1], ss.text[j]);
    if (n_m == 1) {
        for (size_t j = 0; j < ss.n; j++)
            legend[nl++] = (dpplot_legend_entry){value_labels[j], line_color(1, methods[0], j, ss.n),
                                                 DPPLOT_SWATCH_LINE, by_value[j % 6]};
    } else {
        for (size_t m = 0; m < n_m; m++)
            legend[nl++] = (dpplot_legend_entry){methods[m], dpplot_method_color(methods[m]), DPPLOT_SWATCH_BOX,
                                                 DPPLOT_MARKER_NONE};
        for (size_t j = 0; j < ss.n; j++)
            legend[nl++] = (dpplot_legend_entry){value_labels[j], DPPLOT_INK, dpplot_swatch_of_dash((int)(j % 4)),
                                                 DPPLOT_MARKER_NONE};
    }
    if (any_oom)
        legend[nl++] = (dpplot_legend_entry){"out of memory", DPPLOT_MUTED, DPPLOT_SWATCH_MARKER, DPPLOT_MARKER_CROSS};
    /* The whiskers' entry only where a whisker is drawn (a plan run's estimate is one number). */
    int any_spread = 0;
    for (size_t i = 0; i < n_panels * n_series; i++)
        for (size_t k = 0; k < xs.n; k++) any_spread |= isfinite(data[i].lo[k]) && data[i].hi[k] > data[i].lo[k];
    /* shared y range */
    double y_max = 0;
    for (size_t i = 0; i < n_panels * n_series; i++)
        for (size_t k = 0; k < xs.n; k++) {
            if (isfinite(data[i].y[k])) y_max = fmax(y_max, data[i].y[k]);
            if (isfinite(data[i].hi[k])) y_max = fmax(y_max, data[i].hi[k]);
        }
    double y_min = 0;
    if (metric == DPPLOT_METRIC_EXTRA)
        for (size_t i = 0; i < n_panels * n_series; i++)
            for (size_t k = 0; k < xs.n; k++)
                if (isfinite(data[i].y[k])) y_min = fmin(y_min, data[i].y[k]);
    /* Lines that coincide in every panel (batch under micro-batching: three identical curves), or
     * lie within 1% of the axis of each other, are said in the legend rather than left hidden
     * under each other. */
    double near = 0.01 * (y_max - y_min);
    char same[4][240];
    size_t n_same = 0;
    size_t group[MAX_SERIES];
    for (size_t a = 0; a < n_series; a++) {
        group[a] = a;
        for (size_t b = 0; b < a && group[a] == a; b++)
            if (group[b] == b && series_coincide(data, n_panels, n_series, a, b, xs.n, near)) group[a] = b;
    }
    for (size_t g = 0; g < n_series && n_same < 4; g++) {
        size_t members[MAX_SERIES], nm = 0;
        for (size_t a = 0; a < n_series; a++)
            if (group[a] == g) members[nm++] = a;
        if (nm < 2) continue;
        coincide_note(members, nm, methods, ss.n, keys[1], &ss, n_m, same[n_same], sizeof same[n_same]);
        int exact = 1; /* else say how near: they differ, by less than can be drawn */
        for (size_t i = 1; i < nm; i++)
            exact &= series_coincide(data, n_panels, n_series, members[0], members[i], xs.n, 0);
        if (!exact) {
            size_t used = strlen(same[n_same]);
            snprintf(same[n_same] + used, sizeof same[n_same] - used, " (within 1%% of the axis)");
        }
        legend[nl++] = (dpplot_legend_entry){same[n_same++], DPPLOT_INK, DPPLOT_SWATCH_NOTE, DPPLOT_MARKER_NONE};
    }
    char spread[96];
    if ((metric == DPPLOT_METRIC_TIME || metric == DPPLOT_METRIC_TOKENS_PER_S) && any_spread) {
        snprintf(spread, sizeof spread, "median, whiskers min-max of %s",
                 max_runs > 1 ? "the repeated runs" : "the iterations");
        legend[nl++] = (dpplot_legend_entry){spread, DPPLOT_INK, DPPLOT_SWATCH_WHISKER, DPPLOT_MARKER_NONE};
    }

    double card = metric == DPPLOT_METRIC_PEAK ? dpplot_sweep_card_bytes(rs, sweep) : NAN; /* plan: the card */
    y_max = dpplot_report_card_axis(y_max, card);
    dpplot_canvas *cv = dpplot_report_canvas(opt, path, notes);
    if (!cv) {
        free(data);
        return -1;
    }
    double W = dpplot_canvas_width(cv), H = dpplot_canvas_height(cv);
    char title[200], context[1024];
    snprintf(title, sizeof title, "%s against %s, by %s%s%s", dpplot_metric_title(metric, predicted), keys[0], keys[1],
             nk > 3 ? ", panels by " : " (panels by ", nk > 3 ? "" : keys[2]);
    if (nk > 3) {
        size_t used = strlen(title);
        snprintf(title + used, sizeof title - used, "%s and %s", keys[2], keys[3]);
    } else {
        strncat(title, ")", sizeof title - strlen(title) - 1);
    }
    dpplot_report_context_of(dpplot_sweep_first(rs, sweep), context, sizeof context);
    if (n_m == 1) { /* a one-method sweep says which method, as its lines do not */
        size_t used = strlen(context);
        snprintf(context + used, sizeof context - used, "%s%s", used ? "  ·  " : "", methods[0]);
    }
    if (filter && *filter) {
        size_t used = strlen(context);
        snprintf(context + used, sizeof context - used, "%sat %s", used ? "  ·  " : "", filter);
    }
    double top = dpplot_figure_title(cv, title, context[0] ? context : NULL);
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 120}, legend, nl) + 6;
    size_t cols = cs.n, rows = rws.n;
    double cell_w = (W - 20) / (double)cols, cell_h = (H - top - 10) / (double)rows;
    double xmin, xmax;
    dpplot_sweep_x_range(&xs, x, log2x, 0.06, &xmin, &xmax);
    for (size_t kr = 0; kr < rows; kr++)
        for (size_t kc = 0; kc < cols; kc++) {
            char ptitle[200];
            if (nk > 3)
                snprintf(ptitle, sizeof ptitle, "%s=%s, %s=%s", keys[2], cs.text[kc], keys[3], rws.text[kr]);
            else
                snprintf(ptitle, sizeof ptitle, "%s=%s", keys[2], cs.text[kc]);
            dpplot_series s[MAX_SERIES];
            for (size_t m = 0; m < n_m; m++)
                for (size_t j = 0; j < ss.n; j++) {
                    series_data *d = &data[(kr * cs.n + kc) * n_series + m * ss.n + j];
                    s[m * ss.n + j] =
                        (dpplot_series){.name = n_m > 1 ? methods[m] : value_labels[j],
                                        .color = line_color(n_m, methods[m], j, ss.n),
                                        .x = x,
                                        .y = d->y,
                                        .n = xs.n,
                                        .oom = d->oom,
                                        .marker = n_m > 1 ? dpplot_method_marker(methods[m]) : by_value[j % 6],
                                        .dashed = n_m > 1 ? (int)(j % 4) : DPPLOT_DASH_SOLID,
                                        .line_width = 2.5,
                                        .y_lo = d->lo,
                                        .y_hi = d->hi};
                }
            dpplot_panel p;
            dpplot_panel_spec sp = {0};
            sp.title = ptitle;
            sp.x_label = kr == rows - 1 ? keys[0] : NULL;
            sp.y_label = kc == 0 ? dpplot_metric_title(metric, predicted) : NULL;
            sp.x_scale = log2x ? DPPLOT_SCALE_LOG2 : DPPLOT_SCALE_LINEAR;
            sp.x_min = xmin, sp.x_max = xmax;
            if (xs.numeric && xs.n <= 12) sp.x_ticks = x, sp.n_x_ticks = xs.n; /* tick at the swept values */
            sp.y_unit = dpplot_metric_unit(metric);
            sp.y_min = y_min < 0 ? y_min * 1.1 : 0, sp.y_max = (y_max > 0 ? y_max : 1) * 1.08, sp.y_extend = 1;
            if (!xs.numeric) sp.x_categories = xs.label, sp.n_x_categories = xs.n;
            sp.top_band = any_oom ? dpplot_oom_band(n_series) : 0;
            dpplot_rect outer = {10 + cell_w * (double)kc, top + cell_h * (double)kr, cell_w - 10, cell_h - 6};
            if (dpplot_panel_begin(&p, cv, outer, &sp) != 0) {
                (void)dpplot_strlist_addf(
                    notes, "%s: panel %s did not fit; use --point, or a larger height (dpprof plot --height H)",
                    dpplot_report_basename(path), ptitle);
                continue;
            }
            dpplot_lines_draw(&p, s, n_series);
            dpplot_report_card_line(&p, card, 0);
            dpplot_panel_end(&p);
        }
    free(data);
    return dpplot_report_save(cv, path, notes);
}
