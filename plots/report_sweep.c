/* report_sweep.c: sweep_<var>.png (one swept variable) and memory_heatmap.png (two). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_heatmap.h"
#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_METHODS 16
#define MAX_VALUES 64

/* Distinct values of one swept variable across a sweep, sorted (numbers ascending, else text). */
typedef struct {
    size_t n;
    int numeric;
    double number[MAX_VALUES];
    const char *text[MAX_VALUES];
} value_set;

/* Where a value of `checkpoint` (activation checkpointing: false, "blocks" or every N-th block)
 * sorts: by the share of blocks it recomputes, 0 for off to 1 for every block, so the axis runs
 * from the most memory to the least. */
static double checkpoint_share(const char *text) {
    if (strcmp(text, "blocks") == 0) return 1.0;
    char *end;
    double n = strtod(text, &end);
    return *end == '\0' && n >= 1 ? 1.0 / n : 0.0;
}

/* The axis label of a checkpoint value: "off", "every block", "every 2nd", "every 4th". */
static void checkpoint_label(const char *text, char *out, size_t n) {
    double share = checkpoint_share(text);
    if (share == 0.0)
        snprintf(out, n, "off");
    else if (share == 1.0)
        snprintf(out, n, "every block");
    else {
        long k = lround(1.0 / share);
        const char *suffix = k % 10 == 2 && k % 100 != 12 ? "nd" : k % 10 == 3 && k % 100 != 13 ? "rd" : "th";
        snprintf(out, n, "every %ld%s", k, suffix);
    }
}

static int value_before(const value_set *vs, const char *key, size_t a, size_t b) {
    if (strcmp(key, "checkpoint") == 0) return checkpoint_share(vs->text[a]) < checkpoint_share(vs->text[b]);
    return vs->numeric ? vs->number[a] < vs->number[b] : strcmp(vs->text[a], vs->text[b]) < 0;
}

static void collect_values(const dpplot_results *rs, const char *sweep, const char *key, value_set *vs) {
    memset(vs, 0, sizeof *vs);
    vs->numeric = 1;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!r->sweep_name || strcmp(r->sweep_name, sweep) != 0) continue;
        const dpplot_vary *v = dpplot_result_vary(r, key);
        if (!v) continue;
        if (!v->is_number) vs->numeric = 0;
        size_t k = 0;
        while (k < vs->n && strcmp(vs->text[k], v->text) != 0) k++;
        if (k < vs->n || vs->n == MAX_VALUES) continue;
        vs->number[vs->n] = v->is_number ? v->number : NAN;
        vs->text[vs->n++] = v->text;
    }
    /* insertion sort: a handful of values */
    for (size_t i = 1; i < vs->n; i++)
        for (size_t j = i; j > 0; j--) {
            int swap = value_before(vs, key, j, j - 1);
            if (!swap) break;
            double tn = vs->number[j];
            const char *tt = vs->text[j];
            vs->number[j] = vs->number[j - 1], vs->text[j] = vs->text[j - 1];
            vs->number[j - 1] = tn, vs->text[j - 1] = tt;
        }
}

static size_t value_index(const value_set *vs, const dpplot_vary *v) {
    for (size_t k = 0; k < vs->n; k++)
        if (strcmp(vs->text[k], v->text) == 0) return k;
    return vs->n;
}

/* Methods of a sweep in the results' (canonical) order. */
static size_t collect_methods(const dpplot_results *rs, const char *sweep, const char **methods) {
    size_t n = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!r->sweep_name || strcmp(r->sweep_name, sweep) != 0) continue;
        size_t k = 0;
        while (k < n && strcmp(methods[k], r->method) != 0) k++;
        if (k == n && n < MAX_METHODS) methods[n++] = r->method;
    }
    return n;
}

/* log2 suits sizes that double from point to point: seq_len, batch, hidden, and any all-powers-of-
 * two sweep spanning at least 4×. */
static int wants_log2(const char *key, const value_set *vs) {
    if (!vs->numeric || vs->n < 2) return 0;
    for (size_t k = 0; k < vs->n; k++)
        if (!(vs->number[k] > 0)) return 0;
    if (vs->number[vs->n - 1] / vs->number[0] < 4) return 0;
    if (strcmp(key, "seq_len") == 0 || strcmp(key, "batch") == 0 || strcmp(key, "hidden") == 0) return 1;
    for (size_t k = 0; k < vs->n; k++) {
        double l = log2(vs->number[k]);
        if (fabs(l - round(l)) > 1e-9) return 0;
    }
    return 1;
}

static const dpplot_result *first_point(const dpplot_results *rs, const char *sweep) {
    for (size_t i = 0; i < rs->n; i++)
        if (rs->items[i].sweep_name && strcmp(rs->items[i].sweep_name, sweep) == 0) return &rs->items[i];
    return NULL;
}

int dpplot_report_sweep(const dpplot_results *rs, const char *sweep, const char *x_key, const char *path,
                        const dpplot_options *opt, dpplot_strlist *notes) {
    value_set xs;
    collect_values(rs, sweep, x_key, &xs);
    const char *methods[MAX_METHODS];
    size_t n_m = collect_methods(rs, sweep, methods);
    if (xs.n == 0 || n_m == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' has no values of '%s'", dpplot_report_basename(path),
                                  sweep, x_key);
        return 0;
    }
    /* Per method: memory, time and OOM flag at each x position. */
    static const double nan_init = NAN;
    double x[MAX_VALUES], mem[MAX_METHODS][MAX_VALUES], ms[MAX_METHODS][MAX_VALUES];
    unsigned char oom[MAX_METHODS][MAX_VALUES];
    /* checkpoint: off, every N-th, every block as categories */
    const int is_checkpoint = strcmp(x_key, "checkpoint") == 0;
    char label_text[MAX_VALUES][24];
    const char *labels[MAX_VALUES];
    if (is_checkpoint) {
        xs.numeric = 0;
        for (size_t k = 0; k < xs.n; k++) {
            checkpoint_label(xs.text[k], label_text[k], sizeof label_text[k]);
            labels[k] = label_text[k];
        }
    }
    int log2x = wants_log2(x_key, &xs);
    for (size_t k = 0; k < xs.n; k++) x[k] = xs.numeric ? xs.number[k] : (double)k;
    for (size_t m = 0; m < n_m; m++)
        for (size_t k = 0; k < xs.n; k++) mem[m][k] = ms[m][k] = nan_init, oom[m][k] = 0;
    char failed[512] = "";
    size_t failed_len = 0, n_oom_series = 0;
    int any_point = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!r->sweep_name || strcmp(r->sweep_name, sweep) != 0) continue;
        const dpplot_vary *v = dpplot_result_vary(r, x_key);
        size_t k = v ? value_index(&xs, v) : xs.n, m = 0;
        while (m < n_m && strcmp(methods[m], r->method) != 0) m++;
        if (k >= xs.n || m >= n_m) continue;
        if (r->status == DPPLOT_STATUS_OOM) {
            oom[m][k] = 1;
        } else if (r->status == DPPLOT_STATUS_OK) {
            if (r->has_peak) mem[m][k] = r->peak_bytes, any_point = 1;
            if (r->has_time) ms[m][k] = r->avg_ms;
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
    dpplot_legend_entry legend[MAX_METHODS + 1];
    /* The vanilla baseline is drawn last and dashed, so a method that matches it (flash_clip's
     * memory often does) does not hide it. Series order stays canonical in the legend. */
    size_t order[MAX_METHODS], n_order = 0;
    for (size_t m = 0; m < n_m; m++)
        if (dpplot_method_rank(methods[m]) != 0) order[n_order++] = m;
    for (size_t m = 0; m < n_m; m++)
        if (dpplot_method_rank(methods[m]) == 0) order[n_order++] = m;
    for (size_t m = 0; m < n_m; m++) {
        dpplot_rgb c = dpplot_method_color(methods[m]);
        dpplot_marker mk = dpplot_method_marker(methods[m]);
        int baseline = dpplot_method_rank(methods[m]) == 0;
        legend[m] = (dpplot_legend_entry){methods[m], c, baseline ? DPPLOT_SWATCH_DASHED : DPPLOT_SWATCH_LINE, mk};
    }
    for (size_t k = 0; k < n_m; k++) {
        size_t m = order[k];
        dpplot_rgb c = dpplot_method_color(methods[m]);
        dpplot_marker mk = dpplot_method_marker(methods[m]);
        int baseline = dpplot_method_rank(methods[m]) == 0;
        mem_s[k] = (dpplot_series){methods[m], c, x, mem[m], xs.n, oom[m], mk, baseline, 0, 2.5, 0};
        ms_s[k] = (dpplot_series){methods[m], c, x, ms[m], xs.n, oom[m], mk, baseline, 0, 2.5, 0};
    }
    size_t n_legend = n_m;
    if (n_oom_series)
        legend[n_legend++] =
            (dpplot_legend_entry){"out of memory", DPPLOT_MUTED, DPPLOT_SWATCH_MARKER, DPPLOT_MARKER_CROSS};

    dpplot_canvas *cv = dpplot_report_canvas(opt, path, notes);
    if (!cv) return -1;
    double W = dpplot_canvas_width(cv), H = dpplot_canvas_height(cv);
    char title[160], context[256];
    snprintf(title, sizeof title, "Peak memory and step time against %s", x_key);
    dpplot_report_context_of(first_point(rs, sweep), context, sizeof context);
    double top = dpplot_figure_title(cv, title, context[0] ? context : NULL);
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, n_legend) + 8;
    double bottom_note = failed[0] ? 30 : 0;

    double xmin = x[0], xmax = x[xs.n - 1];
    if (!xs.numeric)
        xmin = -0.5, xmax = (double)xs.n - 0.5;
    else if (log2x)
        xmin /= pow(2, 0.35), xmax *= pow(2, 0.35);
    else {
        double pad = (xmax - xmin) * 0.05 + (xmax == xmin ? 1 : 0);
        xmin -= pad, xmax += pad;
    }
    const dpplot_series *sets[2] = {mem_s, ms_s};
    const char *titles[2] = {"Peak memory", "Time per step"};
    dpplot_unit units[2] = {DPPLOT_UNIT_BYTES, DPPLOT_UNIT_MS};
    for (int panel = 0; panel < 2; panel++) {
        double a, b, c, d;
        if (!dpplot_series_range(sets[panel], n_m, &a, &b, &c, &d)) d = 1;
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.title = titles[panel];
        s.x_label = x_key;
        s.y_label = titles[panel];
        s.x_scale = log2x ? DPPLOT_SCALE_LOG2 : DPPLOT_SCALE_LINEAR;
        s.x_min = xmin, s.x_max = xmax;
        s.y_unit = units[panel];
        s.y_min = 0, s.y_max = d * 1.08, s.y_extend = 1;
        if (!xs.numeric) s.x_categories = is_checkpoint ? labels : xs.text, s.n_x_categories = xs.n;
        s.top_band = dpplot_oom_band(n_oom_series);
        dpplot_rect outer = {10 + (W - 20) / 2 * panel, top, (W - 20) / 2 - 10, H - top - 10 - bottom_note};
        if (dpplot_panel_begin(&p, cv, outer, &s) != 0) continue;
        dpplot_lines_draw(&p, sets[panel], n_m);
        dpplot_panel_end(&p);
    }
    dpplot_figure_note(cv, failed);
    return dpplot_report_save(cv, path, notes);
}

int dpplot_report_heatmap(const dpplot_results *rs, const char *sweep, const char *x_key, const char *y_key,
                          const char *path, const dpplot_options *opt, dpplot_strlist *notes) {
    value_set xs, ys;
    collect_values(rs, sweep, x_key, &xs);
    collect_values(rs, sweep, y_key, &ys);
    const char *methods[MAX_METHODS];
    size_t n_m = collect_methods(rs, sweep, methods);
    if (xs.n == 0 || ys.n == 0 || n_m == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, sweep '%s' lacks values of '%s' or '%s'",
                                  dpplot_report_basename(path), sweep, x_key, y_key);
        return 0;
    }
    size_t cells = xs.n * ys.n;
    double *values = malloc(n_m * cells * sizeof *values);
    unsigned char *oom = calloc(n_m * cells, 1);
    if (!values || !oom) {
        free(values), free(oom);
        (void)dpplot_strlist_addf(notes, "%s: out of memory", dpplot_report_basename(path));
        return -1;
    }
    for (size_t i = 0; i < n_m * cells; i++) values[i] = NAN;
    double vmin = INFINITY, vmax = -INFINITY;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!r->sweep_name || strcmp(r->sweep_name, sweep) != 0) continue;
        const dpplot_vary *vx = dpplot_result_vary(r, x_key), *vy = dpplot_result_vary(r, y_key);
        if (!vx || !vy) continue;
        size_t cx = value_index(&xs, vx), cy = value_index(&ys, vy), m = 0;
        while (m < n_m && strcmp(methods[m], r->method) != 0) m++;
        if (cx >= xs.n || cy >= ys.n || m >= n_m) continue;
        size_t at = m * cells + cy * xs.n + cx;
        if (r->status == DPPLOT_STATUS_OOM)
            oom[at] = 1;
        else if (r->status == DPPLOT_STATUS_OK && r->has_peak) {
            values[at] = r->peak_bytes;
            vmin = fmin(vmin, r->peak_bytes), vmax = fmax(vmax, r->peak_bytes);
        }
    }
    if (!(vmax >= vmin)) vmin = 0, vmax = 1;
    if (vmax == vmin) vmin *= 0.5, vmax = vmax * 1.5 + 1;
    dpplot_scale cscale = vmin > 0 && vmax / vmin > 4 ? DPPLOT_SCALE_LOG2 : DPPLOT_SCALE_LINEAR;

    dpplot_canvas *cv = dpplot_report_canvas(opt, path, notes);
    if (!cv) {
        free(values), free(oom);
        return -1;
    }
    double W = dpplot_canvas_width(cv), H = dpplot_canvas_height(cv);
    char title[160], context[256];
    snprintf(title, sizeof title, "Peak memory over %s × %s", x_key, y_key);
    dpplot_report_context_of(first_point(rs, sweep), context, sizeof context);
    double top = dpplot_figure_title(cv, title, context[0] ? context : NULL);
    double bar_space = 190;
    size_t cols = n_m <= 3 ? n_m : (n_m + 1) / 2, rows = (n_m + cols - 1) / cols;
    double cell_w = (W - 20 - bar_space) / (double)cols, cell_h = (H - top - 10) / (double)rows;
    double plot_top = INFINITY, plot_bottom = -INFINITY;
    for (size_t m = 0; m < n_m; m++) {
        size_t row = m / cols, col = m % cols;
        dpplot_rgb color = dpplot_method_color(methods[m]);
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.title = methods[m];
        s.title_swatch = &color;
        s.x_label = x_key;
        s.y_label = col == 0 ? y_key : NULL;
        s.x_categories = xs.text, s.n_x_categories = xs.n;
        s.y_categories = ys.text, s.n_y_categories = ys.n;
        s.no_grid = 1;
        dpplot_rect outer = {10 + cell_w * (double)col, top + cell_h * (double)row, cell_w - 10, cell_h - 8};
        if (dpplot_panel_begin(&p, cv, outer, &s) != 0) continue;
        dpplot_heatmap_spec h = {xs.n, ys.n, values + m * cells, oom + m * cells, vmin, vmax, cscale, DPPLOT_UNIT_BYTES,
                                 1};
        dpplot_heatmap_draw(&p, &h);
        dpplot_panel_end(&p);
        plot_top = fmin(plot_top, p.plot.y), plot_bottom = fmax(plot_bottom, p.plot.y + p.plot.h);
    }
    if (!(plot_bottom > plot_top)) plot_top = top + 40, plot_bottom = H - 90;
    /* The colorbar spans the panels' plot areas, so its ends line up with the cells. */
    dpplot_colorbar_draw(cv, (dpplot_rect){W - bar_space + 10, plot_top, 24, plot_bottom - plot_top}, vmin, vmax,
                         cscale, DPPLOT_UNIT_BYTES, "Peak memory");
    free(values), free(oom);
    return dpplot_report_save(cv, path, notes);
}
