/* lines.c: markers, line and step series, OOM markers, shaded spans, annotations. */
#include "dpplot_lines.h"
#include "dpplot_palette.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OOM_ROW 20.0 /* px per stacked OOM cross */
#define OOM_PAD 14.0

void dpplot_marker_draw(cairo_t *cr, double x, double y, double size, dpplot_marker m, dpplot_rgb color, int hollow) {
    if (m == DPPLOT_MARKER_NONE) return;
    double r = size / 2;
    cairo_save(cr);
    cairo_new_path(cr);
    switch (m) {
    case DPPLOT_MARKER_SQUARE: cairo_rectangle(cr, x - r * 0.85, y - r * 0.85, r * 1.7, r * 1.7); break;
    case DPPLOT_MARKER_TRIANGLE:
        cairo_move_to(cr, x, y - r * 1.1);
        cairo_line_to(cr, x + r, y + r * 0.75);
        cairo_line_to(cr, x - r, y + r * 0.75);
        cairo_close_path(cr);
        break;
    case DPPLOT_MARKER_DIAMOND:
        cairo_move_to(cr, x, y - r * 1.15);
        cairo_line_to(cr, x + r * 0.9, y);
        cairo_line_to(cr, x, y + r * 1.15);
        cairo_line_to(cr, x - r * 0.9, y);
        cairo_close_path(cr);
        break;
    case DPPLOT_MARKER_TRIANGLE_DOWN:
        cairo_move_to(cr, x, y + r * 1.1);
        cairo_line_to(cr, x + r, y - r * 0.75);
        cairo_line_to(cr, x - r, y - r * 0.75);
        cairo_close_path(cr);
        break;
    case DPPLOT_MARKER_HEXAGON:
        for (int k = 0; k < 6; k++) {
            double a = DPPLOT_PI / 6 + k * DPPLOT_PI / 3;
            if (k == 0)
                cairo_move_to(cr, x + r * 1.05 * cos(a), y + r * 1.05 * sin(a));
            else
                cairo_line_to(cr, x + r * 1.05 * cos(a), y + r * 1.05 * sin(a));
        }
        cairo_close_path(cr);
        break;
    case DPPLOT_MARKER_CROSS:
        cairo_set_line_width(cr, fmax(2.5, size / 4.5));
        cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
        dpplot_set_color(cr, color, 1.0);
        cairo_move_to(cr, x - r, y - r);
        cairo_line_to(cr, x + r, y + r);
        cairo_move_to(cr, x - r, y + r);
        cairo_line_to(cr, x + r, y - r);
        cairo_stroke(cr);
        cairo_restore(cr);
        return;
    default: cairo_arc(cr, x, y, r, 0, 2 * DPPLOT_PI); break;
    }
    if (hollow == 2) { /* a ring: whatever is under it shows through */
        cairo_set_line_width(cr, 2.5);
        dpplot_set_color(cr, color, 1.0);
        cairo_stroke(cr);
    } else if (hollow) {
        dpplot_set_color(cr, DPPLOT_WHITE, 1.0);
        cairo_fill_preserve(cr);
        cairo_set_line_width(cr, 2.5);
        dpplot_set_color(cr, color, 1.0);
        cairo_stroke(cr);
    } else {
        dpplot_set_color(cr, color, 1.0);
        cairo_fill_preserve(cr);
        cairo_set_line_width(cr, 1.2);
        dpplot_set_color(cr, DPPLOT_WHITE, 1.0);
        cairo_stroke(cr);
    }
    cairo_restore(cr);
}

dpplot_marker dpplot_method_marker(const char *method) {
    static const dpplot_marker by_rank[DPPLOT_N_PRESETS] = {DPPLOT_MARKER_CIRCLE,        DPPLOT_MARKER_SQUARE,
                                                            DPPLOT_MARKER_TRIANGLE,      DPPLOT_MARKER_DIAMOND,
                                                            DPPLOT_MARKER_TRIANGLE_DOWN, DPPLOT_MARKER_HEXAGON};
    int rank = dpplot_method_rank(method);
    return rank < DPPLOT_N_PRESETS ? by_rank[rank] : DPPLOT_MARKER_DIAMOND;
}

int dpplot_marker_parse(const char *s) {
    static const char *const names[] = {"none",    "circle", "square",        "triangle",
                                        "diamond", "cross",  "triangle_down", "hexagon"};
    if (!s) return -1;
    for (int i = 0; i < 8; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static int point_ok(const dpplot_series *s, size_t i) {
    return isfinite(s->x[i]) && isfinite(s->y[i]) && !(s->oom && s->oom[i]);
}

double dpplot_oom_band(size_t n_series) { return n_series == 0 ? 0.0 : OOM_PAD * 2 + OOM_ROW * (double)(n_series - 1); }

int dpplot_series_range(const dpplot_series *s, size_t n, double *x_min, double *x_max, double *y_min, double *y_max) {
    /* whiskers count: the axis must hold the whole spread */
    int any = 0;
    *x_min = *y_min = INFINITY;
    *x_max = *y_max = -INFINITY;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            if (isfinite(s[k].x[i])) { /* OOM points still claim their x position */
                *x_min = fmin(*x_min, s[k].x[i]);
                *x_max = fmax(*x_max, s[k].x[i]);
            }
            if (!point_ok(&s[k], i)) continue;
            *y_min = fmin(*y_min, s[k].y[i]);
            *y_max = fmax(*y_max, s[k].y[i]);
            if (s[k].y_lo && isfinite(s[k].y_lo[i])) *y_min = fmin(*y_min, s[k].y_lo[i]);
            if (s[k].y_hi && isfinite(s[k].y_hi[i])) *y_max = fmax(*y_max, s[k].y_hi[i]);
            any = 1;
        }
    return any;
}

/* Path state of trace_series: points go to cairo through a filter that keeps, of each run of
 * consecutive points in one device pixel column, the first, the lowest, the highest and the last
 * (in their order), so a series of millions of points costs a path of a few per column and every
 * peak and dip still shows. */
typedef struct {
    cairo_t *cr;
    int step, open;
    double scale; /* device pixels per user unit along x */
    double col;   /* pixel column of the buffered run */
    size_t nb;    /* buffered points of the run: first, min, max, last (indices into bx/by) */
    double bx[4], by[4];
    size_t bi[4]; /* their point indices, to emit in order */
    double first_x, last_x, last_y;
} tracer;

static void tracer_emit(tracer *t, double x, double y) {
    if (!t->open) {
        cairo_move_to(t->cr, x, y);
        t->first_x = x, t->open = 1;
    } else {
        if (t->step) cairo_line_to(t->cr, x, t->last_y);
        cairo_line_to(t->cr, x, y);
    }
    t->last_x = x, t->last_y = y;
}

/* Emits the buffered run in point order, each point once. */
static void tracer_flush(tracer *t) {
    size_t order[4] = {0, 1, 2, 3}, n = t->nb;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && t->bi[order[j]] < t->bi[order[j - 1]]; j--) {
            size_t tmp = order[j];
            order[j] = order[j - 1], order[j - 1] = tmp;
        }
    for (size_t k = 0; k < n; k++)
        if (k == 0 || t->bi[order[k]] != t->bi[order[k - 1]]) tracer_emit(t, t->bx[order[k]], t->by[order[k]]);
    t->nb = 0;
}

static void tracer_add(tracer *t, size_t i, double x, double y) {
    double col = floor(x * t->scale);
    if (t->nb > 0 && col != t->col) tracer_flush(t);
    if (t->nb == 0) {
        t->col = col, t->nb = 4;
        for (int k = 0; k < 4; k++) t->bx[k] = x, t->by[k] = y, t->bi[k] = i;
        return;
    }
    /* slots: 0 first, 1 lowest y on screen (largest value), 2 highest, 3 last */
    if (y > t->by[1]) t->bx[1] = x, t->by[1] = y, t->bi[1] = i;
    if (y < t->by[2]) t->bx[2] = x, t->by[2] = y, t->bi[2] = i;
    t->bx[3] = x, t->by[3] = y, t->bi[3] = i;
}

/* A long series whose x goes back and forth (no timeline does; a damaged file may) has no runs
 * to merge: it is drawn as its envelope instead, the lowest and highest value in each pixel
 * column of the plot, so the path stays a few points per column whatever the input. Returns 0,
 * or -1 when there was no memory for the columns (the caller traces every point). */
static int trace_envelope(dpplot_panel *p, const dpplot_series *s, double scale, int close_to_bottom) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    size_t cols = (size_t)ceil(p->plot.w * scale) + 1;
    double *lo = malloc(cols * sizeof *lo), *hi = malloc(cols * sizeof *hi);
    if (!lo || !hi) {
        free(lo), free(hi);
        return -1;
    }
    for (size_t c = 0; c < cols; c++) lo[c] = INFINITY, hi[c] = -INFINITY;
    for (size_t i = 0; i < s->n; i++) {
        if (!point_ok(s, i)) continue;
        double c = floor((dpplot_panel_px(p, s->x[i]) - p->plot.x) * scale);
        if (!(c >= 0 && c < (double)cols)) continue; /* outside the plot: clipped anyway */
        double y = dpplot_panel_py(p, s->y[i]);
        lo[(size_t)c] = fmin(lo[(size_t)c], y), hi[(size_t)c] = fmax(hi[(size_t)c], y);
    }
    int open = 0;
    double first_x = 0, last_x = 0;
    for (size_t c = 0; c < cols; c++) {
        if (lo[c] > hi[c]) continue;
        double x = p->plot.x + ((double)c + 0.5) / scale;
        if (!open)
            cairo_move_to(cr, x, hi[c]), first_x = x, open = 1;
        else
            cairo_line_to(cr, x, hi[c]);
        cairo_line_to(cr, x, lo[c]);
        last_x = x;
    }
    if (open && close_to_bottom) {
        double bottom = p->plot.y + p->plot.h;
        cairo_line_to(cr, last_x, bottom);
        cairo_line_to(cr, first_x, bottom);
        cairo_close_path(cr);
    }
    free(lo), free(hi);
    return 0;
}

/* Whether s's x never decreases over its drawable points. */
static int x_ordered(const dpplot_series *s) {
    double last = -INFINITY;
    for (size_t i = 0; i < s->n; i++) {
        if (!point_ok(s, i)) continue;
        if (s->x[i] < last) return 0;
        last = s->x[i];
    }
    return 1;
}

static void trace_series(dpplot_panel *p, const dpplot_series *s, int close_to_bottom) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    double dx = 1.0, dy = 0.0, bottom = p->plot.y + p->plot.h;
    cairo_user_to_device_distance(cr, &dx, &dy);
    tracer t = {.cr = cr, .step = s->step, .scale = dx > 0 && isfinite(dx) ? dx : 1.0};
    double width_px = p->plot.w * t.scale; /* the envelope's columns: a canvas is at most 16384 px */
    if (width_px > 0 && width_px <= 16384 && (double)s->n > 8 * (width_px + 1) && !x_ordered(s) &&
        trace_envelope(p, s, t.scale, close_to_bottom) == 0)
        return;
    for (size_t i = 0; i <= s->n; i++) {
        if (i == s->n || !point_ok(s, i)) {
            tracer_flush(&t);
            if (t.open && close_to_bottom) {
                cairo_line_to(cr, t.last_x, bottom);
                cairo_line_to(cr, t.first_x, bottom);
                cairo_close_path(cr);
            }
            t.open = 0;
            continue;
        }
        tracer_add(&t, i, dpplot_panel_px(p, s->x[i]), dpplot_panel_py(p, s->y[i]));
    }
}

void dpplot_set_dash(cairo_t *cr, int dash, double w) {
    double f = w > 2.5 ? w / 2.5 : 1.0;
    double dashed[2] = {8.0 * f, 5.0 * f}, dotted[2] = {1.0 * f, 4.5 * f}, dashdot[4] = {9 * f, 4 * f, 1 * f, 4 * f};
    switch (dash) {
    case DPPLOT_DASH_DASHED: cairo_set_dash(cr, dashed, 2, 0); break;
    case DPPLOT_DASH_DOTTED:
        cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
        cairo_set_dash(cr, dotted, 2, 0);
        break;
    case DPPLOT_DASH_DASHDOT: cairo_set_dash(cr, dashdot, 4, 0); break;
    default: cairo_set_dash(cr, NULL, 0, 0); break;
    }
}

/* Vertical whiskers with caps from y_lo to y_hi at each point of s that has both. */
static void draw_whiskers(dpplot_panel *p, const dpplot_series *s) {
    if (!s->y_lo || !s->y_hi) return;
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    cairo_save(cr);
    cairo_set_line_width(cr, 1.8);
    dpplot_set_color(cr, s->color, 0.9);
    for (size_t i = 0; i < s->n; i++) {
        if (!point_ok(s, i) || !isfinite(s->y_lo[i]) || !isfinite(s->y_hi[i])) continue;
        double x = dpplot_panel_px(p, s->x[i]);
        double y0 = dpplot_panel_py(p, s->y_lo[i]), y1 = dpplot_panel_py(p, s->y_hi[i]);
        cairo_move_to(cr, x, y0);
        cairo_line_to(cr, x, y1);
        cairo_move_to(cr, x - 6, y0);
        cairo_line_to(cr, x + 6, y0);
        cairo_move_to(cr, x - 6, y1);
        cairo_line_to(cr, x + 6, y1);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

void dpplot_lines_draw(dpplot_panel *p, const dpplot_series *s, size_t n) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    dpplot_panel_clip(p);
    for (size_t k = 0; k < n; k++) {
        if (s[k].fill_alpha > 0) {
            cairo_new_path(cr);
            trace_series(p, &s[k], 1);
            dpplot_set_color(cr, s[k].color, s[k].fill_alpha);
            cairo_fill(cr);
        }
    }
    for (size_t k = 0; k < n; k++) {
        cairo_save(cr);
        cairo_new_path(cr);
        trace_series(p, &s[k], 0);
        double w = s[k].line_width > 0 ? s[k].line_width : 2.5;
        cairo_set_line_width(cr, w);
        dpplot_set_dash(cr, s[k].dashed, w);
        dpplot_set_color(cr, s[k].color, 1.0);
        cairo_stroke(cr);
        cairo_restore(cr);
        draw_whiskers(p, &s[k]);
        double size = s[k].marker_size > 0 ? s[k].marker_size : 13.0;
        for (size_t i = 0; i < s[k].n && s[k].marker != DPPLOT_MARKER_NONE; i++) {
            if (!point_ok(&s[k], i)) continue;
            int ring = s[k].ring && s[k].ring[i];
            dpplot_marker_draw(cr, dpplot_panel_px(p, s[k].x[i]), dpplot_panel_py(p, s[k].y[i]), ring ? 21.0 : size,
                               s[k].marker, s[k].color, ring ? 2 : s[k].hollow);
        }
    }
    dpplot_panel_unclip(p);

    /* OOM crosses in the top band; crosses at the same x stack downwards, one row per series. */
    int any_oom = 0;
    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < s[k].n; i++) {
            if (!s[k].oom || !s[k].oom[i] || !isfinite(s[k].x[i])) continue;
            int row = 0;
            for (size_t j = 0; j < k; j++)
                for (size_t m = 0; m < s[j].n; m++)
                    if (s[j].oom && s[j].oom[m] && s[j].x[m] == s[k].x[i]) row++;
            double x = dpplot_panel_px(p, s[k].x[i]), y = p->plot.y + OOM_PAD + OOM_ROW * row;
            dpplot_marker_draw(cr, x, y, 14.0, DPPLOT_MARKER_CROSS, s[k].color, 0);
            any_oom = 1;
        }
    }
    if (any_oom) {
        dpplot_text_style st = dpplot_style(DPPLOT_FONT_NOTE, 1, dpplot_rgb_hex(0xB00020), DPPLOT_RIGHT, DPPLOT_MIDDLE);
        dpplot_text(p->cv, p->plot.x - 8, p->plot.y + OOM_PAD, "OOM", &st);
        cairo_save(cr);
        double dash[2] = {4.0, 4.0};
        cairo_set_dash(cr, dash, 2, 0);
        cairo_set_line_width(cr, 1.0);
        dpplot_set_color(cr, DPPLOT_MUTED, 1.0);
        double y = round(p->data.y) - 0.5;
        cairo_move_to(cr, p->plot.x, y);
        cairo_line_to(cr, p->plot.x + p->plot.w, y);
        cairo_stroke(cr);
        cairo_restore(cr);
    }
}

void dpplot_shades_draw(dpplot_panel *p, const dpplot_shade *s, size_t n) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    dpplot_panel_clip(p);
    for (size_t i = 0; i < n; i++) {
        double x0 = dpplot_panel_px(p, s[i].x0), x1 = dpplot_panel_px(p, s[i].x1);
        if (x1 < x0) {
            double t = x0;
            x0 = x1, x1 = t;
        }
        double min_w = s[i].min_width_px > 1.0 ? s[i].min_width_px : 1.0;
        if (x1 - x0 < min_w) { /* a span narrower than min_w px still shows, centred on itself */
            double c = (x0 + x1) / 2;
            x0 = c - min_w / 2, x1 = c + min_w / 2;
        }
        dpplot_set_color(cr, s[i].color, s[i].alpha > 0 ? s[i].alpha : 0.3);
        cairo_rectangle(cr, x0, p->plot.y, x1 - x0, p->plot.h);
        cairo_fill(cr);
    }
    dpplot_panel_unclip(p);
}

/* Draws a label box: white, slightly transparent background, then the text. */
static void boxed_text(dpplot_canvas *cv, double x, double y, const char *text, const dpplot_text_style *st) {
    dpplot_rect b = dpplot_text_bounds(cv, x, y, text, st);
    cairo_t *cr = dpplot_canvas_cr(cv);
    dpplot_set_color(cr, DPPLOT_WHITE, 0.85);
    cairo_rectangle(cr, b.x - 3, b.y - 1, b.w + 6, b.h + 2);
    cairo_fill(cr);
    dpplot_text(cv, x, y, text, st);
}

/* Nearest point of rectangle r to (x, y): where a leader line ends. */
static void rect_nearest(dpplot_rect r, double x, double y, double *ox, double *oy) {
    *ox = fmin(fmax(x, r.x), r.x + r.w);
    *oy = fmin(fmax(y, r.y), r.y + r.h);
}

/* Candidate label anchors around a point, nearest first: offsets in units of `d` px. */
typedef struct {
    double dx, dy;
    dpplot_halign h;
    dpplot_valign v;
} anchor;
static const anchor anchors[] = {
    {1, 0, DPPLOT_LEFT, DPPLOT_MIDDLE},        {-1, 0, DPPLOT_RIGHT, DPPLOT_MIDDLE},
    {0, -1, DPPLOT_CENTER, DPPLOT_BOTTOM},     {0, 1, DPPLOT_CENTER, DPPLOT_TOP},
    {0.8, -0.8, DPPLOT_LEFT, DPPLOT_BOTTOM},   {0.8, 0.8, DPPLOT_LEFT, DPPLOT_TOP},
    {-0.8, -0.8, DPPLOT_RIGHT, DPPLOT_BOTTOM}, {-0.8, 0.8, DPPLOT_RIGHT, DPPLOT_TOP},
};
#define N_ANCHORS (sizeof anchors / sizeof anchors[0])

/* Finds a free spot for a label near (x, y) avoiding `taken` rectangles; returns the distance
 * multiplier used (1 = right beside the point) and fills the anchor and bounds. */
static double place_label(dpplot_panel *p, double x, double y, double d, const char *text, dpplot_text_style *st,
                          const dpplot_rect *taken, size_t n_taken, double *ax, double *ay, dpplot_rect *bounds) {
    static const double dist[] = {1.0, 2.0, 3.5, 5.0, 7.0};
    dpplot_rect area = dpplot_rect_inset(p->plot, 2, 2, 2, 2);
    for (size_t k = 0; k < sizeof dist / sizeof dist[0]; k++)
        for (size_t a = 0; a < N_ANCHORS; a++) {
            st->halign = anchors[a].h, st->valign = anchors[a].v;
            double cx = x + anchors[a].dx * d * dist[k], cy = y + anchors[a].dy * d * dist[k];
            dpplot_rect b = dpplot_text_bounds(p->cv, cx, cy, text, st);
            dpplot_rect padded = dpplot_rect_inset(b, -4, -3, -4, -3);
            if (!dpplot_rect_inside(padded, area)) continue;
            int clash = 0;
            for (size_t t = 0; t < n_taken && !clash; t++) clash = dpplot_rect_overlap(padded, taken[t]);
            if (clash) continue;
            *ax = cx, *ay = cy, *bounds = b;
            return dist[k];
        }
    /* Nothing free: right of the point, clamped into the plot. */
    st->halign = DPPLOT_LEFT, st->valign = DPPLOT_MIDDLE;
    dpplot_rect b = dpplot_text_bounds(p->cv, x + d, y, text, st);
    *ax = fmin(x + d, area.x + area.w - b.w), *ay = fmin(fmax(y, area.y + b.h / 2), area.y + area.h - b.h / 2);
    *bounds = dpplot_text_bounds(p->cv, *ax, *ay, text, st);
    return 1.0;
}

#define MAX_SCATTER 256

size_t dpplot_points_coincide(const dpplot_panel *p, const dpplot_point *pts, size_t n, double marker_size,
                              size_t *group) {
    size_t shared = 0;
    for (size_t i = 0; i < n; i++) {
        group[i] = i;
        if (!isfinite(pts[i].x) || !isfinite(pts[i].y)) continue;
        double x = dpplot_panel_px(p, pts[i].x), y = dpplot_panel_py(p, pts[i].y);
        for (size_t j = 0; j < i; j++) {
            if (group[j] != j || !isfinite(pts[j].x) || !isfinite(pts[j].y)) continue;
            double dx = x - dpplot_panel_px(p, pts[j].x), dy = y - dpplot_panel_py(p, pts[j].y);
            if (fabs(dx) < marker_size * 0.8 && fabs(dy) < marker_size * 0.8) {
                group[i] = j, shared++;
                break;
            }
        }
    }
    return shared;
}

void dpplot_scatter_draw(dpplot_panel *p, const dpplot_point *pts, size_t n, double marker_size) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    if (n > MAX_SCATTER) n = MAX_SCATTER;
    dpplot_rect taken[2 * MAX_SCATTER];
    size_t n_taken = 0;
    double r = marker_size / 2 + 3;
    /* Where each marker goes: at its point, or fanned out across its group's shared position. */
    double mx[MAX_SCATTER], my[MAX_SCATTER];
    size_t group[MAX_SCATTER], size_of[MAX_SCATTER] = {0}, rank[MAX_SCATTER];
    dpplot_points_coincide(p, pts, n, marker_size, group);
    for (size_t i = 0; i < n; i++) rank[i] = size_of[group[i]]++;
    for (size_t i = 0; i < n; i++) {
        size_t g = group[i], k = size_of[g];
        mx[i] = dpplot_panel_px(p, pts[g].x), my[i] = dpplot_panel_py(p, pts[g].y);
        if (k > 1) mx[i] += ((double)rank[i] - (double)(k - 1) / 2.0) * marker_size * 1.1;
        taken[n_taken++] = (dpplot_rect){mx[i] - r, my[i] - r, 2 * r, 2 * r};
    }
    /* Labels first (as rectangles), so markers can be drawn over leader lines. */
    double ax[MAX_SCATTER], ay[MAX_SCATTER], far[MAX_SCATTER];
    dpplot_text_style st[MAX_SCATTER];
    for (size_t i = 0; i < n; i++) {
        far[i] = 0;
        if (!pts[i].label || !isfinite(pts[i].x) || !isfinite(pts[i].y)) continue;
        double x = mx[i], y = my[i];
        st[i] = dpplot_style(DPPLOT_FONT_LEGEND, 0, DPPLOT_INK, DPPLOT_LEFT, DPPLOT_MIDDLE);
        dpplot_rect b;
        far[i] = place_label(p, x, y, marker_size / 2 + 10, pts[i].label, &st[i], taken, n_taken, &ax[i], &ay[i], &b);
        taken[n_taken++] = dpplot_rect_inset(b, -4, -3, -4, -3);
    }
    for (size_t i = 0; i < n; i++) {
        if (far[i] <= 1.0) continue;
        double x = mx[i], y = my[i], ex, ey;
        rect_nearest(dpplot_text_bounds(p->cv, ax[i], ay[i], pts[i].label, &st[i]), x, y, &ex, &ey);
        cairo_save(cr);
        cairo_set_line_width(cr, 1.2);
        dpplot_set_color(cr, pts[i].color, 1.0);
        cairo_move_to(cr, x, y);
        cairo_line_to(cr, ex, ey);
        cairo_stroke(cr);
        cairo_restore(cr);
    }
    for (size_t i = 0; i < n; i++)
        if (isfinite(pts[i].x) && isfinite(pts[i].y))
            dpplot_marker_draw(cr, mx[i], my[i], marker_size,
                               pts[i].marker == DPPLOT_MARKER_NONE ? DPPLOT_MARKER_CIRCLE : pts[i].marker, pts[i].color,
                               pts[i].hollow);
    for (size_t i = 0; i < n; i++) /* the shared position itself, between its fanned-out markers */
        if (group[i] == i && size_of[i] > 1 && isfinite(pts[i].x) && isfinite(pts[i].y))
            dpplot_marker_draw(cr, dpplot_panel_px(p, pts[i].x), dpplot_panel_py(p, pts[i].y), 5.0,
                               DPPLOT_MARKER_CIRCLE, DPPLOT_INK, 0);
    for (size_t i = 0; i < n; i++)
        if (far[i] > 0) boxed_text(p->cv, ax[i], ay[i], pts[i].label, &st[i]);
}

/* 1 when segment (x0,y0)-(x1,y1) meets rectangle r (Liang-Barsky clipping). */
static int segment_meets(double x0, double y0, double x1, double y1, dpplot_rect r) {
    double t0 = 0.0, t1 = 1.0, dx = x1 - x0, dy = y1 - y0;
    double pp[4] = {-dx, dx, -dy, dy}, qq[4] = {x0 - r.x, r.x + r.w - x0, y0 - r.y, r.y + r.h - y0};
    for (int i = 0; i < 4; i++) {
        if (pp[i] == 0.0) {
            if (qq[i] < 0.0) return 0;
            continue;
        }
        double t = qq[i] / pp[i];
        if (pp[i] < 0.0) {
            if (t > t1) return 0;
            if (t > t0) t0 = t;
        } else {
            if (t < t0) return 0;
            if (t < t1) t1 = t;
        }
    }
    return 1;
}

int dpplot_series_crosses(const dpplot_panel *p, const dpplot_series *s, dpplot_rect r) {
    double px0 = NAN, py0 = NAN;
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i]) || !isfinite(s->y[i]) || (s->oom && s->oom[i])) {
            px0 = NAN;
            continue;
        }
        double px = dpplot_panel_px(p, s->x[i]), py = dpplot_panel_py(p, s->y[i]);
        if (isfinite(px0)) {
            if (s->step) { /* the value holds until the next x, then jumps */
                if (segment_meets(px0, py0, px, py0, r) || segment_meets(px, py0, px, py, r)) return 1;
            } else if (segment_meets(px0, py0, px, py, r)) {
                return 1;
            }
        }
        px0 = px, py0 = py;
    }
    return 0;
}

void dpplot_annotate(dpplot_panel *p, double x, double y, const char *text, dpplot_rgb color) {
    dpplot_annotate_clear(p, x, y, text, color, NULL, 0);
}

void dpplot_annotate_clear(dpplot_panel *p, double x, double y, const char *text, dpplot_rgb color,
                           const dpplot_series *avoid, size_t n_avoid) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    double px = dpplot_panel_px(p, x), py = dpplot_panel_py(p, y);
    /* Prefer above-left/right of the point, at a distance: peaks sit high, labels go beside;
     * farther out (the headroom above a peak) when the near places lie on a curve. */
    static const anchor prefs[] = {
        {-1, 0.6, DPPLOT_RIGHT, DPPLOT_TOP},     {1, 0.6, DPPLOT_LEFT, DPPLOT_TOP},
        {-1, -0.3, DPPLOT_RIGHT, DPPLOT_BOTTOM}, {1, -0.3, DPPLOT_LEFT, DPPLOT_BOTTOM},
        {-1, 1.5, DPPLOT_RIGHT, DPPLOT_TOP},     {1, 1.5, DPPLOT_LEFT, DPPLOT_TOP},
        {0, -0.6, DPPLOT_CENTER, DPPLOT_BOTTOM}, {-0.3, -0.6, DPPLOT_RIGHT, DPPLOT_BOTTOM},
        {0.3, -0.6, DPPLOT_LEFT, DPPLOT_BOTTOM}, {-2.5, -0.6, DPPLOT_RIGHT, DPPLOT_BOTTOM},
        {2.5, -0.6, DPPLOT_LEFT, DPPLOT_BOTTOM}, {-1, 3, DPPLOT_RIGHT, DPPLOT_TOP},
        {1, 3, DPPLOT_LEFT, DPPLOT_TOP},         {-1, 5, DPPLOT_RIGHT, DPPLOT_TOP},
        {1, 5, DPPLOT_LEFT, DPPLOT_TOP},
    };
    dpplot_text_style st = dpplot_style(DPPLOT_FONT_NOTE, 1, DPPLOT_INK, DPPLOT_LEFT, DPPLOT_TOP);
    dpplot_rect area = dpplot_rect_inset(p->plot, 4, 4, 4, 4);
    double d = 28.0, ax = px + d, ay = py;
    int placed = 0;
    /* first pass: a place inside the plot clear of every curve; second: inside the plot */
    for (int pass = n_avoid ? 0 : 1; pass < 2 && !placed; pass++)
        for (size_t a = 0; a < sizeof prefs / sizeof prefs[0] && !placed; a++) {
            st.halign = prefs[a].h, st.valign = prefs[a].v;
            double cx = px + prefs[a].dx * d, cy = py + prefs[a].dy * d;
            dpplot_rect b = dpplot_text_bounds(p->cv, cx, cy, text, &st);
            if (!dpplot_rect_inside(b, area)) continue;
            int clash = 0;
            dpplot_rect padded = dpplot_rect_inset(b, -3, -2, -3, -2);
            for (size_t k = 0; pass == 0 && k < n_avoid && !clash; k++)
                clash = dpplot_series_crosses(p, &avoid[k], padded);
            /* nor on a label already in the plot (a snapshot mark's name) */
            size_t n_placed;
            const dpplot_box *placed_boxes = dpplot_canvas_boxes(p->cv, &n_placed);
            for (size_t k = 0; pass == 0 && k < n_placed && !clash; k++)
                clash =
                    dpplot_rect_inside(placed_boxes[k].r, p->plot) && dpplot_rect_overlap(padded, placed_boxes[k].r);
            if (!clash) ax = cx, ay = cy, placed = 1;
        }
    if (!placed) {
        st.halign = DPPLOT_LEFT, st.valign = DPPLOT_TOP;
        dpplot_rect b = dpplot_text_bounds(p->cv, px, py, text, &st);
        ax = fmin(fmax(px - b.w / 2, area.x), area.x + area.w - b.w);
        ay = fmin(fmax(py + 10, area.y), area.y + area.h - b.h);
    }
    dpplot_rect b = dpplot_text_bounds(p->cv, ax, ay, text, &st);
    double ex, ey;
    rect_nearest(b, px, py, &ex, &ey);
    cairo_save(cr);
    cairo_set_line_width(cr, 1.5);
    dpplot_set_color(cr, DPPLOT_INK, 1.0);
    cairo_move_to(cr, px, py);
    cairo_line_to(cr, ex, ey);
    cairo_stroke(cr);
    cairo_restore(cr);
    dpplot_marker_draw(cr, px, py, 11.0, DPPLOT_MARKER_CIRCLE, color, 0);
    boxed_text(p->cv, ax, ay, text, &st);
}
