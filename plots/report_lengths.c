/* report_lengths.c: the lengths chart (dpplot_lengths.h). Reads the document's fields by name:
 * kind, dataset, tokenizer, samples, tokens, p50, p90, p99, max, seq_len (optional), over_seq_len,
 * bad, and histogram {edges[n + 1], counts[n]}. */
#include "dpplot_lengths.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_axis.h"
#include "dpplot_canvas.h"
#include "dpplot_charts.h"
#include "report_util.h"

static double num(const cJSON *o, const char *key, char *err, size_t errlen) {
    return dpplot_json_number(o, key, "lengths chart", "", err, errlen);
}

int dpplot_lengths_chart(const char *json, const char *path, int width, int height, double scale, char *err,
                         size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) err = dummy, errlen = sizeof dummy;
    err[0] = '\0';
    cJSON *doc = json ? cJSON_Parse(json) : NULL;
    if (!doc) {
        snprintf(err, errlen, "lengths chart: the document is not JSON");
        return -1;
    }
    int rc = -1;
    double *x = NULL, *y = NULL;
    dpplot_canvas *cv = NULL;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
    const cJSON *hist = cJSON_GetObjectItemCaseSensitive(doc, "histogram");
    const cJSON *edges = cJSON_GetObjectItemCaseSensitive(hist, "edges");
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(hist, "counts");
    const cJSON *dataset = cJSON_GetObjectItemCaseSensitive(doc, "dataset");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(doc, "tokenizer");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "dpprof.data") != 0) {
        snprintf(err, errlen, "lengths chart: 'kind' is not \"dpprof.data\" (not a dpprof data document)");
        goto done;
    }
    int nb = cJSON_GetArraySize(counts);
    if (!cJSON_IsArray(edges) || !cJSON_IsArray(counts) || nb < 1 || cJSON_GetArraySize(edges) != nb + 1) {
        snprintf(err, errlen, "lengths chart: 'histogram' needs 'counts' (n >= 1 numbers) and 'edges' (n + 1)");
        goto done;
    }
    double samples = num(doc, "samples", err, errlen), p50 = num(doc, "p50", err, errlen);
    double p90 = num(doc, "p90", err, errlen), p99 = num(doc, "p99", err, errlen), mx = num(doc, "max", err, errlen);
    double bad = num(doc, "bad", err, errlen), total = num(doc, "tokens", err, errlen);
    if (err[0]) goto done;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(doc, "seq_len");
    double seq_len = cJSON_IsNumber(seq) ? seq->valuedouble : NAN;
    x = malloc((size_t)(nb + 1) * sizeof *x), y = malloc((size_t)(nb + 1) * sizeof *y);
    if (!x || !y) {
        snprintf(err, errlen, "lengths chart: out of memory");
        goto done;
    }
    double y_max = 1;
    for (int i = 0; i <= nb; i++) {
        const cJSON *e = cJSON_GetArrayItem(edges, i), *c = cJSON_GetArrayItem(counts, i < nb ? i : nb - 1);
        if (!cJSON_IsNumber(e) || !cJSON_IsNumber(c)) {
            snprintf(err, errlen, "lengths chart: histogram entry %d is not a number", i);
            goto done;
        }
        x[i] = e->valuedouble, y[i] = c->valuedouble;
        if (y[i] > y_max) y_max = y[i];
    }
    dpplot_series s[5];
    memset(s, 0, sizeof s);
    s[0] = (dpplot_series){.name = "samples a bin",
                           .color = {0.20, 0.40, 0.70},
                           .x = x,
                           .y = y,
                           .n = (size_t)nb + 1,
                           .marker = DPPLOT_MARKER_NONE,
                           .step = 1,
                           .fill_alpha = 0.35,
                           .line_width = 1.5};
    double vx[4][2], vy[2] = {0, y_max * 1.08};
    const double at[4] = {p50, p90, p99, seq_len};
    const char *what[4] = {"p50", "p90", "p99", "seq_len"};
    const dpplot_rgb color[4] = {{0.1, 0.55, 0.2}, {0.85, 0.55, 0.05}, {0.75, 0.15, 0.15}, {0.2, 0.2, 0.2}};
    char names[4][96];
    size_t ns = 1;
    for (int k = 0; k < 4; k++) {
        if (isnan(at[k])) continue;
        double v = k == 3 ? at[k] + 1 : at[k]; /* seq_len T: samples of T + 1 tokens fit */
        vx[k][0] = vx[k][1] = v;
        if (k == 3)
            snprintf(names[k], sizeof names[k], "seq_len %.0f (%.0f tokens; %.0f samples longer)", at[k], v,
                     num(doc, "over_seq_len", err, errlen));
        else
            snprintf(names[k], sizeof names[k], "%s: %.0f tokens", what[k], v);
        s[ns++] = (dpplot_series){.name = names[k],
                                  .color = color[k],
                                  .x = vx[k],
                                  .y = vy,
                                  .n = 2,
                                  .marker = DPPLOT_MARKER_NONE,
                                  .dashed = k == 3 ? DPPLOT_DASH_DASHED : DPPLOT_DASH_DOTTED,
                                  .line_width = 2.0};
    }
    if (err[0]) goto done;
    char title[400], subtitle[800];
    snprintf(title, sizeof title, "Tokens a sample: %s",
             cJSON_IsString(dataset) ? dpplot_report_basename(dataset->valuestring) : "?");
    snprintf(subtitle, sizeof subtitle, "%.0f samples, %.0f tokens, longest %.0f; %.0f bad record%s; tokenizer %s",
             samples, total, mx, bad, bad == 1 ? "" : "s", cJSON_IsString(tok) ? tok->valuestring : "?");
    dpplot_chart_axes ax = dpplot_chart_axes_default();
    ax.title = title, ax.subtitle = subtitle;
    ax.x_label = "Tokens a sample (the tokenizer's, the template's included)";
    ax.y_label = "Samples";
    double hi = x[nb];
    if (!isnan(seq_len) && seq_len + 1 > hi) hi = seq_len + 1;
    ax.x_min = x[0] > 0 ? 0 : x[0], ax.x_max = hi * 1.04 + 1, ax.y_min = 0, ax.y_max = y_max * 1.12;
    cv = dpplot_canvas_new(width, height, scale);
    if (!cv) {
        snprintf(err, errlen, "lengths chart: cannot create a %d x %d canvas at scale %g", width, height, scale);
        goto done;
    }
    if (dpplot_chart_lines(cv, &ax, s, ns) != 0) {
        snprintf(err, errlen, "lengths chart: the axes do not fit the canvas");
        goto done;
    }
    if (dpplot_canvas_write_png(cv, path, err, errlen) != 0) {
        if (!err[0]) snprintf(err, errlen, "lengths chart: cannot write '%s'", path);
        goto done;
    }
    rc = 0;
done:
    free(x);
    free(y);
    dpplot_canvas_free(cv);
    cJSON_Delete(doc);
    return rc;
}
