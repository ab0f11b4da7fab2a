/* report_util.c: canvas sizing, saving, context lines and labels for the standard charts. */
#include "report_util.h"

#include "dpplot_panel.h"

#include <cjson/cJSON.h>

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
                        const dpplot_selection *sel, const int *usable, size_t n_usable, size_t cap,
                        const char *title) {
    memset(f, 0, sizeof *f);
    f->cv = dpplot_report_canvas(opt, path, notes);
    if (!f->cv) return -1;
    f->W = dpplot_canvas_width(f->cv);
    f->H = dpplot_canvas_height(f->cv);
    char context[1024];
    dpplot_report_context(sel, context, sizeof context);
    size_t no_room = dpplot_report_left_out(sel, usable, n_usable, cap, f->leftout, sizeof f->leftout);
    if (no_room > 0)
        (void)dpplot_strlist_addf(notes,
                                  "%s: draws at most %zu results; %zu more left out (plot them from a directory "
                                  "of their own)",
                                  dpplot_report_basename(path), cap, no_room);
    f->top = dpplot_figure_title(f->cv, title, context[0] ? context : NULL);
    return 0;
}

size_t dpplot_report_panels_fit(double W, double H, double top, double bottom, size_t n, size_t (*cols_of)(size_t),
                                const dpplot_panel_spec *tightest) {
    dpplot_canvas *probe = dpplot_canvas_new((int)W, (int)H, 1.0);
    if (!probe) return n;
    size_t m = n;
    for (; m > 0; m--) {
        size_t cols = cols_of(m), rows = (m + cols - 1) / cols;
        double cell_w = (W - 20) / (double)cols, cell_h = (H - top - 10 - bottom - (m < n ? 30 : 0)) / (double)rows;
        dpplot_panel p;
        if (dpplot_panel_begin(&p, probe, (dpplot_rect){10, top, cell_w - 10, cell_h - 6}, tightest) == 0) break;
    }
    dpplot_canvas_free(probe);
    return m;
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

/* The pieces of a configuration a title or summary names, in their order. */
enum { P_MODEL, P_LAYERS, P_HIDDEN, P_SEQ, P_BATCH, P_DTYPE, P_LORA, P_OPTIMIZER, P_STRATEGY, P_DEVICE, N_PIECES };

/* Piece k of r's configuration into buf ("" when the file does not say, or r's sweep varies it). */
static void piece_of(const dpplot_result *r, int k, char *buf, size_t len) {
    buf[0] = '\0';
    switch (k) {
    case P_MODEL: /* a checkpoint by its directory's name, else the architecture */
        if (r->model_name && !swept(r, "path"))
            snprintf(buf, len, "%s", r->model_name);
        else if (r->arch && !swept(r, "arch") && !swept(r, "path"))
            snprintf(buf, len, "%s", r->arch);
        break;
    case P_LAYERS:
        if (isfinite(r->layers) && !swept(r, "layers"))
            snprintf(buf, len, "%.0f layer%s", r->layers, r->layers == 1 ? "" : "s");
        break;
    case P_HIDDEN:
        if (isfinite(r->hidden) && !swept(r, "hidden")) snprintf(buf, len, "d=%.0f", r->hidden);
        break;
    case P_SEQ:
        if (isfinite(r->seq_len) && !swept(r, "seq_len")) snprintf(buf, len, "seq %.0f", r->seq_len);
        break;
    case P_BATCH:
        if (isfinite(r->batch) && !swept(r, "batch")) snprintf(buf, len, "batch %.0f", r->batch);
        break;
    case P_DTYPE:
        if (r->dtype && !swept(r, "dtype")) snprintf(buf, len, "%s", r->dtype);
        break;
    case P_LORA: { /* full fine-tuning, or LoRA's rank and targets, each unless swept */
        int rank_swept = swept(r, "lora_rank") || swept(r, "lora.rank") || swept(r, "lora");
        int targets_swept = swept(r, "lora_targets") || swept(r, "lora.targets") || swept(r, "lora");
        if (!isfinite(r->lora_rank) || (r->lora_rank == 0 && rank_swept)) break;
        if (r->lora_rank == 0) {
            snprintf(buf, len, "full fine-tuning");
            break;
        }
        const char *targets = targets_swept ? NULL : r->lora_targets;
        if (rank_swept && !targets) break;
        if (rank_swept)
            snprintf(buf, len, "LoRA on %s", targets);
        else
            snprintf(buf, len, "LoRA rank %.0f%s%s", r->lora_rank, targets ? " on " : "", targets ? targets : "");
        break;
    }
    case P_OPTIMIZER:
        if (r->optimizer && !swept(r, "optimizer") && !swept(r, "optimizer.name") &&
            !dpplot_result_vary(r, "optimizer.name"))
            snprintf(buf, len, "%s", r->optimizer);
        break;
    case P_STRATEGY:
        if (r->strategy && !dpplot_result_vary(r, "strategy") && !dpplot_result_vary(r, "distributed.strategy") &&
            !dpplot_result_vary(r, "world_size") && !dpplot_result_vary(r, "distributed.world_size")) {
            if (isfinite(r->world_size))
                snprintf(buf, len, "%s over %.0f ranks (rank 0's memory)", r->strategy, r->world_size);
            else
                snprintf(buf, len, "%s", r->strategy);
        }
        break;
    case P_DEVICE:
        if (r->device_name) snprintf(buf, len, "%s", r->device_name);
        break;
    default: break;
    }
}

/* Whether r is the point without LoRA of a sweep over LoRA's rank (rank 0): it says nothing of
 * the targets the other points share. */
static int lora_swept_off(const dpplot_result *r) {
    return isfinite(r->lora_rank) && r->lora_rank == 0 &&
           (swept(r, "lora_rank") || swept(r, "lora.rank") || swept(r, "lora"));
}

/* The pieces every one of items[0..n) has alike (a piece one of them lacks or words otherwise
 * is left out; for LoRA, a sweep's point without it is passed over), joined by " · " into buf. */
static void common_pieces(const dpplot_result *const *items, size_t n, char *buf, size_t len) {
    buf[0] = '\0';
    char first[640], other[640];
    for (int k = 0; k < N_PIECES && n > 0; k++) {
        size_t f = 0;
        if (k == P_LORA)
            while (f + 1 < n && lora_swept_off(items[f])) f++;
        piece_of(items[f], k, first, sizeof first);
        int same = first[0] != '\0';
        for (size_t i = 0; i < n && same; i++) {
            if (i == f || (k == P_LORA && lora_swept_off(items[i]))) continue;
            piece_of(items[i], k, other, sizeof other);
            same = strcmp(first, other) == 0;
        }
        if (same) append(buf, len, first);
    }
}

void dpplot_report_context_of(const dpplot_result *r, char *buf, size_t len) { common_pieces(&r, 1, buf, len); }

void dpplot_report_fixed_config(const dpplot_result *const *items, size_t n, char *buf, size_t len) {
    common_pieces(items, n, buf, len);
}

void dpplot_report_load_note(const dpplot_result *const *items, size_t n, char *buf, size_t len) {
    buf[0] = '\0';
    size_t measured = 0, loaded = 0;
    double worst = NAN;
    for (size_t i = 0; i < n; i++) {
        if (items[i]->predicted) continue;
        measured++;
        if (!items[i]->loaded) continue;
        loaded++;
        if (isfinite(items[i]->others_share) && !(worst >= items[i]->others_share)) worst = items[i]->others_share;
    }
    if (loaded == 0) return;
    char share[64] = "";
    if (isfinite(worst))
        snprintf(share, sizeof share, " (other processes kept up to %.0f%% of the CPUs busy)", 100 * worst);
    snprintf(buf, len, "%zu of %zu measured run%s taken on a loaded machine%s", loaded, measured,
             measured == 1 ? "" : "s", share);
}

void dpplot_report_context(const dpplot_selection *sel, char *buf, size_t len) {
    buf[0] = '\0';
    if (sel->context) {
        snprintf(buf, len, "%s", sel->context);
        return;
    }
    if (sel->n == 0) return;
    common_pieces(sel->items, sel->n, buf, len);
    int predicted = 0;
    for (size_t i = 0; i < sel->n; i++) predicted |= sel->items[i]->predicted;
    if (predicted) append(buf, len, "hollow markers: plan-backend estimates");
    char load[160];
    dpplot_report_load_note(sel->items, sel->n, load, sizeof load);
    if (load[0]) append(buf, len, load);
}

const char *dpplot_report_component_label(const dpplot_selection *sel, dpplot_component c) {
    if (c == DPPLOT_COMP_NORM_SAMPLES)
        for (size_t i = 0; i < sel->n; i++)
            if (sel->items[i]->has_components && !sel->items[i]->components_exact)
                return "Norm samples + per-sample grads";
    return dpplot_component_label(c);
}

const char *dpplot_report_label(const dpplot_selection *sel, size_t i) {
    for (size_t j = 0; j < sel->n; j++)
        if (j != i && strcmp(sel->items[j]->method_style, sel->items[i]->method_style) == 0)
            return sel->items[i]->experiment;
    return sel->items[i]->method_style;
}

size_t dpplot_report_left_out(const dpplot_selection *sel, const int *usable, size_t n_usable, size_t cap, char *buf,
                              size_t len) {
    buf[0] = '\0';
    size_t no_room = sel->n > n_usable ? sel->n - n_usable : 0;
    for (size_t i = 0; i < sel->n && i < n_usable; i++) no_room += usable[i] == DPPLOT_NO_ROOM;
    char tail[96] = ""; /* kept whole: the list before it is cut short instead */
    if (no_room > 0) snprintf(tail, sizeof tail, "%zu more: the chart draws at most %zu", no_room, cap);
    size_t room = len > strlen(tail) + 3 ? len - strlen(tail) - 2 : 1, used = 0;
    for (size_t i = 0; i < sel->n && i < n_usable && used < room - 1; i++) {
        if (usable[i] != DPPLOT_LEFT_OUT) continue;
        const dpplot_result *r = sel->items[i];
        const char *why = r->status != DPPLOT_STATUS_OK ? dpplot_status_name(r->status) : "incomplete";
        int w = snprintf(buf + used, room - used, "%s%s (%s)", used ? ", " : "Not shown: ", dpplot_report_label(sel, i),
                         why);
        if (w < 0) break;
        used = used + (size_t)w < room - 1 ? used + (size_t)w : room - 1;
    }
    if (tail[0]) snprintf(buf + used, len - used, "%s%s", used ? "; " : "Not shown: ", tail);
    return no_room;
}

double dpplot_report_card_bytes(const dpplot_result *const *items, size_t n) {
    double card = NAN;
    for (size_t i = 0; i < n; i++) {
        double c = items[i]->predicted ? items[i]->card_bytes : NAN;
        if (!isfinite(c)) continue;
        if (isfinite(card) && c != card) return NAN;
        card = c;
    }
    return card;
}

double dpplot_report_card_axis(double data_max, double card) {
    if (isfinite(card) && data_max >= 0.5 * card) return fmax(data_max, card);
    return data_max;
}

void dpplot_report_card_line(const dpplot_panel *p, double card, int on_x) {
    if (!isfinite(card)) return;
    char v[32], text[64];
    dpplot_format_value(card, DPPLOT_UNIT_BYTES, v, sizeof v);
    const dpplot_axis *ax = on_x ? &p->x : &p->y;
    double lo = ax->lo, hi = ax->hi;
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    dpplot_rgb red = dpplot_rgb_hex(0xD0103A);
    dpplot_text_style st = dpplot_style(DPPLOT_FONT_NOTE, 1, red, DPPLOT_RIGHT, DPPLOT_BOTTOM);
    if (card > hi || card < lo) { /* beyond the axis: said inside the plot, in the words that fit it */
        const char *where = card < lo ? "(below the axis)" : on_x ? "(right of the axis)" : "(above the axis)";
        const char *arrow = card < lo ? "\xe2\x86\x93" : on_x ? "\xe2\x86\x92" : "\xe2\x86\x91";
        for (int form = 0; form < 4; form++) {
            if (form == 3) return; /* not even "card 80 GiB" fits a plot this narrow */
            snprintf(text, sizeof text, "card %s%s%s", v, form < 2 ? " " : "",
                     form == 0   ? where
                     : form == 1 ? arrow
                                 : "");
            if (dpplot_text_width(p->cv, text, st.size, 1) <= p->plot.w - 8) break;
        }
        double ty = p->plot.y + 2 + dpplot_line_height(p->cv, st.size);
        dpplot_rect b = dpplot_text_bounds(p->cv, p->plot.x + p->plot.w - 4, ty, text, &st);
        dpplot_set_color(cr, DPPLOT_WHITE, 0.85);
        cairo_rectangle(cr, b.x - 2, b.y - 1, b.w + 4, b.h + 2);
        cairo_fill(cr);
        dpplot_text(p->cv, p->plot.x + p->plot.w - 4, ty, text, &st);
        return;
    }
    snprintf(text, sizeof text, "card %s", v);
    cairo_save(cr);
    double dash[2] = {10.0, 5.0};
    cairo_set_dash(cr, dash, 2, 0);
    cairo_set_line_width(cr, 2.0);
    dpplot_set_color(cr, red, 0.9);
    if (on_x) {
        double x = dpplot_panel_px(p, card);
        cairo_move_to(cr, x, p->plot.y);
        cairo_line_to(cr, x, p->plot.y + p->plot.h);
    } else {
        double y = dpplot_panel_py(p, card);
        cairo_move_to(cr, p->plot.x, y);
        cairo_line_to(cr, p->plot.x + p->plot.w, y);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
    double tx = p->plot.x + p->plot.w - 4, ty = dpplot_panel_py(p, card) - 2;
    if (on_x) st.halign = DPPLOT_RIGHT, st.valign = DPPLOT_TOP, tx = dpplot_panel_px(p, card) - 4, ty = p->plot.y + 4;
    /* on a white ground: the label may lie across a bar (a run far beyond the card) */
    dpplot_rect b = dpplot_text_bounds(p->cv, tx, ty, text, &st);
    dpplot_set_color(cr, DPPLOT_WHITE, 0.85);
    cairo_rectangle(cr, b.x - 2, b.y - 1, b.w + 4, b.h + 2);
    cairo_fill(cr);
    dpplot_text(p->cv, tx, ty, text, &st);
}

double dpplot_json_number(const cJSON *obj, const char *key, const char *chart, const char *where, char *err,
                          size_t errlen) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(it)) {
        if (err[0] == '\0') snprintf(err, errlen, "%s: %s'%s' is missing or not a number", chart, where, key);
        return NAN;
    }
    return it->valuedouble;
}
