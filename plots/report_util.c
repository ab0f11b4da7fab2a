/* report_util.c: canvas sizing, saving, context lines and labels for the standard charts. */
#include "report_util.h"

#include "dpplot_panel.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

dpplot_options dpplot_options_default(void) {
    dpplot_options o = {DPPLOT_DEFAULT_WIDTH, DPPLOT_DEFAULT_HEIGHT, 1.0, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    return o;
}

dpplot_options dpplot_options_resolve(const dpplot_options *opt) {
    dpplot_options o = dpplot_options_default();
    if (!opt) return o;
    if (opt->width > 0) o.width = opt->width;
    if (opt->height > 0) o.height = opt->height;
    if (opt->scale > 0) o.scale = opt->scale;
    o.warn = opt->warn, o.warn_user = opt->warn_user;
    o.point = opt->point, o.heatmap = opt->heatmap;
    o.layout = opt->layout, o.layout_user = opt->layout_user;
    o.timelines_each = opt->timelines_each;
    return o;
}

const char *dpplot_report_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

dpplot_canvas *dpplot_report_canvas(const dpplot_options *opt, const char *path, dpplot_strlist *notes) {
    dpplot_options o = dpplot_options_resolve(opt);
    dpplot_canvas *cv = dpplot_canvas_new(o.width, o.height, o.scale);
    if (cv) dpplot_canvas_set_layout_hook(cv, o.layout, o.layout_user);
    if (!cv)
        (void)dpplot_strlist_addf(notes, "%s: cannot create a %d×%d canvas at scale %g", dpplot_report_basename(path),
                                  o.width, o.height, o.scale);
    return cv;
}

int dpplot_report_begin(dpplot_report_frame *f, const dpplot_options *opt, const char *path, dpplot_strlist *notes,
                        const dpplot_selection *sel, const int *usable, const char *title) {
    memset(f, 0, sizeof *f);
    f->cv = dpplot_report_canvas(opt, path, notes);
    if (!f->cv) return -1;
    f->W = dpplot_canvas_width(f->cv);
    f->H = dpplot_canvas_height(f->cv);
    char context[256];
    dpplot_report_context(sel, context, sizeof context);
    dpplot_report_left_out(sel, usable, f->leftout, sizeof f->leftout);
    f->top = dpplot_figure_title(f->cv, title, context[0] ? context : NULL);
    return 0;
}

int dpplot_report_save(dpplot_canvas *cv, const char *path, dpplot_strlist *notes) {
    char why[1024];
    int rc = dpplot_canvas_write_png(cv, path, why, sizeof why);
    dpplot_canvas_free(cv);
    if (rc != 0) {
        (void)dpplot_strlist_addf(notes, "%s", why);
        return -1;
    }
    return 1;
}

/* Appends " · " and a formatted piece to buf. */
static void append(char *buf, size_t len, const char *piece) {
    size_t used = strlen(buf);
    if (used >= len - 1) return;
    snprintf(buf + used, len - used, "%s%s", used ? "  ·  " : "", piece);
}

/* Whether r's sweep varies model key `key` (named "layers" or "model.layers"). */
static int swept(const dpplot_result *r, const char *key) {
    char dotted[64];
    snprintf(dotted, sizeof dotted, "model.%s", key);
    return dpplot_result_vary(r, key) != NULL || dpplot_result_vary(r, dotted) != NULL;
}

void dpplot_report_context_of(const dpplot_result *r, char *buf, size_t len) {
    buf[0] = '\0';
    char piece[96];
    if (r->arch && !swept(r, "arch")) append(buf, len, r->arch);
    if (isfinite(r->layers) && !swept(r, "layers"))
        snprintf(piece, sizeof piece, "%.0f layer%s", r->layers, r->layers == 1 ? "" : "s"), append(buf, len, piece);
    if (isfinite(r->hidden) && !swept(r, "hidden"))
        snprintf(piece, sizeof piece, "d=%.0f", r->hidden), append(buf, len, piece);
    if (isfinite(r->seq_len) && !swept(r, "seq_len"))
        snprintf(piece, sizeof piece, "seq %.0f", r->seq_len), append(buf, len, piece);
    if (isfinite(r->batch) && !swept(r, "batch"))
        snprintf(piece, sizeof piece, "batch %.0f", r->batch), append(buf, len, piece);
    if (r->dtype && !swept(r, "dtype")) append(buf, len, r->dtype);
    if (r->device_name) append(buf, len, r->device_name);
}

void dpplot_report_context(const dpplot_selection *sel, char *buf, size_t len) {
    buf[0] = '\0';
    if (sel->context) {
        snprintf(buf, len, "%s", sel->context);
        return;
    }
    if (sel->n == 0) return;
    dpplot_report_context_of(sel->items[0], buf, len);
    int predicted = 0;
    for (size_t i = 0; i < sel->n; i++) predicted |= sel->items[i]->predicted;
    if (predicted) append(buf, len, "hollow markers: plan-backend estimates");
}

const char *dpplot_report_label(const dpplot_selection *sel, size_t i) {
    for (size_t j = 0; j < sel->n; j++)
        if (j != i && strcmp(sel->items[j]->method, sel->items[i]->method) == 0) return sel->items[i]->experiment;
    return sel->items[i]->method;
}

void dpplot_report_left_out(const dpplot_selection *sel, const int *usable, char *buf, size_t len) {
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < sel->n && used < len - 1; i++) {
        if (usable[i]) continue;
        const dpplot_result *r = sel->items[i];
        const char *why = r->status != DPPLOT_STATUS_OK ? dpplot_status_name(r->status) : "incomplete";
        int w = snprintf(buf + used, len - used, "%s%s (%s)", used ? ", " : "Not shown: ", dpplot_report_label(sel, i),
                         why);
        if (w < 0) break;
        used += (size_t)w;
    }
}
