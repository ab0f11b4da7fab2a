/* report_risk.c: the risk chart (dpplot_risk.h). Reads the document's fields by name: kind,
 * budget_bytes, steps, sample_rate, dataset_size, max_physical_batch_size, whole_logical_batch,
 * and methods[] with method, probability, per_step and cdf[] of {bytes, p}. */
#include "dpplot_risk.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_axis.h"
#include "dpplot_canvas.h"
#include "dpplot_charts.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define RISK_MAX_METHODS 16

/* A probability as the chart writes it: 3 decimals from 0.01, else 2 significant digits. */
static void format_p(char *buf, size_t len, double p) {
    if (p == 0)
        snprintf(buf, len, "0");
    else if (p >= 0.01)
        snprintf(buf, len, "%.3f", p);
    else
        snprintf(buf, len, "%.2g", p);
}

static double number_field(const cJSON *obj, const char *key, const char *where, char *err, size_t errlen) {
    return dpplot_json_number(obj, key, "risk chart", where, err, errlen);
}

typedef struct {
    char name[200];  /* the legend's text */
    char method[64]; /* the method alone */
    double *x, *y;
    size_t n;
} risk_curve;

/* Whether curves a and b draw as one line: the same steps, each within a thousandth of the x
 * range (x_span) and of the probability axis. */
static int curves_coincide(const risk_curve *a, const risk_curve *b, double x_span) {
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (!(fabs(a->x[i] - b->x[i]) <= x_span * 1e-3) || !(fabs(a->y[i] - b->y[i]) <= 1e-3)) return 0;
    return 1;
}

/* Appends " · " and text to buf. */
static void add_piece(char *buf, size_t len, const char *text) {
    size_t used = strlen(buf);
    if (text && *text && used + 1 < len) snprintf(buf + used, len - used, "%s%s", used ? "  \xc2\xb7  " : "", text);
}

/* The configuration the risk was planned for, as the other charts' subtitles name it: the model
 * (a checkpoint's directory name, else its arch), dtype, the cut, LoRA (rank and targets, or full
 * fine-tuning), the optimizer and the device model; "" for what the document does not say. */
static void risk_config(const cJSON *doc, char *buf, size_t len) {
    buf[0] = '\0';
    char piece[600];
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    const cJSON *mpath = cJSON_GetObjectItemCaseSensitive(model, "path");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(model, "arch");
    if (cJSON_IsString(mpath) && *mpath->valuestring) {
        const char *s = mpath->valuestring;
        size_t n = strlen(s);
        while (n > 1 && s[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && s[b - 1] != '/') b--;
        snprintf(piece, sizeof piece, "%.*s", (int)(n - b), s + b);
        add_piece(buf, len, piece);
    } else if (cJSON_IsString(arch)) {
        add_piece(buf, len, arch->valuestring);
    }
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(model, "dtype");
    if (cJSON_IsString(dtype)) add_piece(buf, len, dtype->valuestring);
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(doc, "seq_len");
    if (cJSON_IsNumber(seq))
        snprintf(piece, sizeof piece, "seq_len %.0f", seq->valuedouble), add_piece(buf, len, piece);
    if (cJSON_IsObject(model)) {
        const cJSON *lora = cJSON_GetObjectItemCaseSensitive(model, "lora");
        const cJSON *rank = cJSON_GetObjectItemCaseSensitive(lora, "rank");
        const cJSON *targets = cJSON_GetObjectItemCaseSensitive(lora, "targets");
        if (cJSON_IsNumber(rank)) {
            char t[512] = "";
            const cJSON *e;
            const cJSON *list = cJSON_IsArray(targets) ? targets : (const cJSON *)NULL;
            cJSON_ArrayForEach(e, list) {
                size_t used = strlen(t);
                if (cJSON_IsString(e)) snprintf(t + used, sizeof t - used, "%s%s", used ? "," : "", e->valuestring);
            }
            snprintf(piece, sizeof piece, "LoRA rank %.0f on %s", rank->valuedouble, t[0] ? t : "qkv (the default)");
            add_piece(buf, len, piece);
        } else if (!lora || cJSON_IsNull(lora)) {
            add_piece(buf, len, "full fine-tuning");
        }
    }
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "optimizer"), "name");
    if (cJSON_IsString(opt)) add_piece(buf, len, opt->valuestring);
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(doc, "device_model");
    const cJSON *dname = cJSON_IsString(dm) ? dm : cJSON_GetObjectItemCaseSensitive(dm, "name");
    if (cJSON_IsString(dname)) {
        snprintf(piece, sizeof piece, "%s model", dname->valuestring);
        add_piece(buf, len, piece);
    }
}

int dpplot_risk_config(const char *json, char *buf, size_t len) {
    if (!buf || len == 0) return -1;
    buf[0] = '\0';
    cJSON *doc = json ? cJSON_Parse(json) : NULL;
    if (!doc) return -1;
    risk_config(doc, buf, len);
    cJSON_Delete(doc);
    return 0;
}

int dpplot_risk_chart(const char *json, const char *path, int width, int height, double scale, char *err,
                      size_t errlen) {
    return dpplot_risk_chart_noted(json, path, width, height, scale, NULL, 0, err, errlen);
}

int dpplot_risk_chart_noted(const char *json, const char *path, int width, int height, double scale, char *note,
                            size_t notelen, char *err, size_t errlen) {
    if (note && notelen) note[0] = '\0';
    char dummy[8];
    if (!err || errlen == 0) err = dummy, errlen = sizeof dummy;
    err[0] = '\0';
    cJSON *doc = json ? cJSON_Parse(json) : NULL;
    if (!doc) {
        snprintf(err, errlen, "risk chart: the document is not JSON");
        return -1;
    }
    int rc = -1;
    risk_curve curves[RISK_MAX_METHODS];
    size_t nc = 0;
    dpplot_canvas *cv = NULL;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
    const cJSON *methods = cJSON_GetObjectItemCaseSensitive(doc, "methods");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "dpprof.risk") != 0) {
        snprintf(err, errlen, "risk chart: 'kind' is not \"dpprof.risk\" (not a dpprof risk document)");
        goto done;
    }
    double budget = number_field(doc, "budget_bytes", "", err, errlen);
    double steps = number_field(doc, "steps", "", err, errlen);
    double q = number_field(doc, "sample_rate", "", err, errlen);
    double n_data = number_field(doc, "dataset_size", "", err, errlen);
    double m = number_field(doc, "max_physical_batch_size", "", err, errlen);
    if (err[0]) goto done;
    if (!cJSON_IsArray(methods) || cJSON_GetArraySize(methods) == 0) {
        snprintf(err, errlen, "risk chart: 'methods' is missing or not a non-empty array");
        goto done;
    }
    int whole = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "whole_logical_batch"));
    char risks[512] = "";
    double x_max = budget;
    const cJSON *e;
    cJSON_ArrayForEach(e, methods) {
        if (nc == RISK_MAX_METHODS) break;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "method");
        const cJSON *cdf = cJSON_GetObjectItemCaseSensitive(e, "cdf");
        double prob = number_field(e, "probability", "methods[]: ", err, errlen);
        double per_step = number_field(e, "per_step", "methods[]: ", err, errlen);
        if (err[0]) goto done;
        if (!cJSON_IsString(name) || !cJSON_IsArray(cdf) || cJSON_GetArraySize(cdf) == 0) {
            snprintf(err, errlen,
                     "risk chart: methods[%zu]: 'method' (a string) and 'cdf' (a non-empty array) are required", nc);
            goto done;
        }
        size_t n = (size_t)cJSON_GetArraySize(cdf);
        risk_curve *c = &curves[nc];
        c->x = malloc((n + 1) * sizeof *c->x), c->y = malloc((n + 1) * sizeof *c->y), c->n = 0;
        nc++;
        if (!c->x || !c->y) {
            snprintf(err, errlen, "risk chart: out of memory");
            goto done;
        }
        const cJSON *pt;
        cJSON_ArrayForEach(pt, cdf) {
            double x = number_field(pt, "bytes", "methods[].cdf[]: ", err, errlen);
            double y = number_field(pt, "p", "methods[].cdf[]: ", err, errlen);
            if (err[0]) goto done;
            c->x[c->n] = x, c->y[c->n] = y, c->n++;
            if (x > x_max) x_max = x;
        }
        char ps[32], pr[32];
        format_p(ps, sizeof ps, per_step);
        format_p(pr, sizeof pr, prob);
        snprintf(c->name, sizeof c->name, "%s: P(step over) %s, P(run over) %s", name->valuestring, ps, pr);
        snprintf(c->method, sizeof c->method, "%s", name->valuestring);
        size_t len = strlen(risks);
        snprintf(risks + len, sizeof risks - len, "%s%s %s", len ? ", " : "", name->valuestring, pr);
    }
    /* A curve the same as a later one lies under it (later series are drawn on top): said in the
     * legend ("(under flash_clip)") and in the subtitle ("vanilla coincides with flash_clip"). */
    char coincide[512] = "";
    for (size_t t = 0; t < nc; t++) { /* t: a curve drawn on top of others */
        char under[256] = "";
        size_t n_under = 0;
        for (size_t i = 0; i < t; i++) {
            size_t top = nc;
            for (size_t j = i + 1; j < nc; j++)
                if (curves_coincide(&curves[i], &curves[j], x_max)) top = j; /* the last one, on top */
            if (top != t) continue;
            size_t ul = strlen(under);
            snprintf(under + ul, sizeof under - ul, "%s%s", ul ? ", " : "", curves[i].method);
            n_under++;
            size_t nl = strlen(curves[i].name);
            snprintf(curves[i].name + nl, sizeof curves[i].name - nl, " (under %s)", curves[t].method);
        }
        if (!n_under) continue;
        size_t cl = strlen(coincide);
        snprintf(coincide + cl, sizeof coincide - cl, "%s%s %s with %s (drawn under it)", cl ? "; " : "", under,
                 n_under > 1 ? "coincide" : "coincides", curves[t].method);
    }
    if (note && notelen) snprintf(note, notelen, "%s", coincide);
    dpplot_series s[RISK_MAX_METHODS + 1];
    memset(s, 0, sizeof s);
    for (size_t i = 0; i < nc; i++) {
        const char *base = curves[i].method;
        s[i] = (dpplot_series){.name = curves[i].name,
                               .color = dpplot_method_color(base),
                               .x = curves[i].x,
                               .y = curves[i].y,
                               .n = curves[i].n,
                               .marker = dpplot_method_marker(base),
                               .step = 1};
    }
    /* the budget: a vertical dashed line from 0 to 1 */
    double bx[2] = {budget, budget}, by[2] = {0, 1};
    char bname[96], bval[64];
    snprintf(bname, sizeof bname, "the card's budget (%s for the pool)",
             dpplot_format_value(budget, DPPLOT_UNIT_BYTES, bval, sizeof bval));
    s[nc] = (dpplot_series){.name = bname,
                            .color = {0.85, 0.1, 0.1},
                            .x = bx,
                            .y = by,
                            .n = 2,
                            .marker = DPPLOT_MARKER_NONE,
                            .dashed = DPPLOT_DASH_DASHED,
                            .line_width = 2.0};
    char title[160], subtitle[2560];
    snprintf(title, sizeof title, "Out-of-memory risk of the run: P(some step of %.0f over the card) %s", steps, risks);
    char mtext[64];
    if (whole)
        snprintf(mtext, sizeof mtext, "each logical batch whole");
    else
        snprintf(mtext, sizeof mtext, "max_physical_batch_size %.0f", m);
    char config[1024];
    risk_config(doc, config, sizeof config);
    snprintf(subtitle, sizeof subtitle,
             "%s%sPoisson sampling q = %g over %.0f samples, %s; reserved peaks of plan runs (predicted, not "
             "measured)%s%s",
             config, config[0] ? "  \xc2\xb7  " : "", q, n_data, mtext, coincide[0] ? "; " : "", coincide);
    dpplot_chart_axes ax = dpplot_chart_axes_default();
    ax.title = title, ax.subtitle = subtitle;
    ax.x_label = "Peak memory of a step (reserved by the pool)";
    ax.y_label = "P(a step's peak <= x)";
    ax.x_unit = DPPLOT_UNIT_BYTES;
    ax.x_min = 0, ax.x_max = x_max * 1.05, ax.y_min = 0, ax.y_max = 1.05;
    cv = dpplot_canvas_new(width, height, scale);
    if (!cv) {
        snprintf(err, errlen, "risk chart: cannot create a %d x %d canvas at scale %g", width, height, scale);
        goto done;
    }
    if (dpplot_chart_lines(cv, &ax, s, nc + 1) != 0) {
        snprintf(err, errlen, "risk chart: the axes do not fit the canvas");
        goto done;
    }
    if (dpplot_canvas_write_png(cv, path, err, errlen) != 0) {
        if (!err[0]) snprintf(err, errlen, "risk chart: cannot write '%s'", path);
        goto done;
    }
    rc = 0;
done:
    for (size_t i = 0; i < nc; i++) free(curves[i].x), free(curves[i].y);
    dpplot_canvas_free(cv);
    cJSON_Delete(doc);
    return rc;
}
