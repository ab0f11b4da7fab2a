/* panel.c: axes layout and drawing. */
#include "dpplot_panel.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PAD 12.0     /* px around a panel's content */
#define TICK_LEN 6.0 /* px */
#define TICK_GAP 6.0 /* px between tick and label */
#define SWATCH 14.0  /* px, category colour swatch */
#define ROTATE_DEG 30.0

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Axis title with the tick unit appended, e.g. "Peak memory (GiB)". */
static void axis_title(char *buf, size_t len, const char *label, const char *unit) {
    if (!label) {
        buf[0] = '\0';
        return;
    }
    if (!*label)
        snprintf(buf, len, "%s", unit ? unit : ""); /* "" titles an axis by its unit */
    else if (unit && *unit)
        snprintf(buf, len, "%s (%s)", label, unit);
    else
        snprintf(buf, len, "%s", label);
}

/* Numeric ticks whose labels fit `extent` px along the axis without touching. */
static int fit_ticks(dpplot_canvas *cv, double lo, double hi, dpplot_scale scale, dpplot_unit unit, int extend,
                     double extent, int horizontal, dpplot_ticks *out) {
    /* Log axes label every power when they fit (seq_len 256..8192 reads best in full). */
    int target = scale != DPPLOT_SCALE_LINEAR ? 16 : clampi((int)(extent / (horizontal ? 150.0 : 80.0)), 3, 10);
    for (; target >= 2; target--) {
        if (dpplot_ticks_compute(lo, hi, scale, target, unit, extend, out) != 0) return -1;
        if (out->n < 2) return 0;
        double widest = 0.0;
        for (size_t i = 0; i < out->n; i++) {
            double w = horizontal ? dpplot_text_width(cv, out->label[i], DPPLOT_FONT_TICK, 0)
                                  : dpplot_line_height(cv, DPPLOT_FONT_TICK);
            if (w > widest) widest = w;
        }
        if (widest * 1.4 * (double)out->n < extent) return 0;
    }
    return 0;
}

/* Replaces t's ticks by the spec's own values (a sweep's 8192, 16384 rather than 10000, 15000)
 * when they all lie in the axis range and their labels fit side by side across `extent` px. */
static void use_given_ticks(dpplot_canvas *cv, const dpplot_panel_spec *s, double extent, dpplot_ticks *t) {
    if (s->n_x_ticks > DPPLOT_MAX_TICKS) return;
    dpplot_ticks given = *t;
    given.n = 0;
    for (size_t i = 0; i < s->n_x_ticks; i++) {
        double v = s->x_ticks[i];
        if (!isfinite(v) || v < t->lo || v > t->hi) return;
        given.value[given.n] = v;
        snprintf(given.label[given.n], DPPLOT_TICK_LABEL, "%.6g", v / (t->divisor > 0 ? t->divisor : 1.0));
        given.n++;
    }
    /* the narrowest gap between neighbours, in px along a linear or log axis, must hold labels */
    dpplot_axis ax = {s->x_scale, t->lo, t->hi, 0.0, extent};
    for (size_t i = 1; i < given.n; i++) {
        double gap = fabs(dpplot_axis_map(&ax, given.value[i]) - dpplot_axis_map(&ax, given.value[i - 1]));
        double need = (dpplot_text_width(cv, given.label[i], DPPLOT_FONT_TICK, 0) +
                       dpplot_text_width(cv, given.label[i - 1], DPPLOT_FONT_TICK, 0)) /
                          2 +
                      10;
        if (gap < need) return;
    }
    *t = given;
}

/* Layout of categorical x labels: font size and rotation that make them fit their slots. */
typedef struct {
    double size;
    double angle;
    double height; /* px the labels take below the ticks */
} category_layout;

static category_layout layout_x_categories(dpplot_canvas *cv, const dpplot_panel_spec *s, double plot_w) {
    category_layout lay = {DPPLOT_FONT_TICK, 0.0, 0.0};
    double slot = plot_w / (double)(s->n_x_categories ? s->n_x_categories : 1);
    double extra = 0.0; /* swatches sit above the labels, so they cost height, not width */
    static const double sizes[2] = {DPPLOT_FONT_TICK, DPPLOT_FONT_TICK * 0.85};
    for (int k = 0; k < 2; k++) {
        double widest = 0.0;
        for (size_t i = 0; i < s->n_x_categories; i++) {
            double w = dpplot_text_width(cv, s->x_categories[i], sizes[k], 0) + extra;
            if (w > widest) widest = w;
        }
        if (widest <= slot * 0.94) {
            lay.size = sizes[k];
            double tallest = 0.0;
            for (size_t i = 0; i < s->n_x_categories; i++) {
                dpplot_text_style st = dpplot_style(sizes[k], 0, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_TOP);
                dpplot_rect b = dpplot_text_bounds(cv, 0, 0, s->x_categories[i], &st);
                if (b.h > tallest) tallest = b.h;
            }
            lay.height = tallest + (s->x_category_colors ? SWATCH + 4 : 0);
            return lay;
        }
    }
    lay.size = sizes[1];
    lay.angle = ROTATE_DEG;
    double tallest = 0.0;
    for (size_t i = 0; i < s->n_x_categories; i++) {
        dpplot_text_style st = dpplot_style(lay.size, 0, DPPLOT_INK, DPPLOT_RIGHT, DPPLOT_TOP);
        st.angle_deg = lay.angle;
        dpplot_rect b = dpplot_text_bounds(cv, 0, 0, s->x_categories[i], &st);
        if (b.h > tallest) tallest = b.h;
    }
    lay.height = tallest;
    if (s->x_category_colors) lay.height += SWATCH + 4;
    return lay;
}

int dpplot_panel_begin(dpplot_panel *p, dpplot_canvas *cv, dpplot_rect outer, const dpplot_panel_spec *spec) {
    memset(p, 0, sizeof *p);
    p->cv = cv;
    p->outer = outer;
    p->spec = *spec;
    const dpplot_panel_spec *s = &p->spec;
    double tick_h = dpplot_line_height(cv, DPPLOT_FONT_TICK);
    double label_h = dpplot_line_height(cv, DPPLOT_FONT_LABEL);
    /* A title too long for the panel (a small multiple's values) wraps, then shrinks, so it never
     * runs into the next panel's; its lines are known before the plot area is placed. */
    double title_room = outer.w - (s->title_swatch ? SWATCH + 8 : 0) - 4;
    p->title_size = DPPLOT_FONT_PANEL;
    int max_title_lines = outer.h >= 260 ? 3 : outer.h >= 170 ? 2 : 1; /* leave the plot its height */
    if (s->title)
        p->title_size = dpplot_text_fit(cv, s->title, title_room, DPPLOT_FONT_PANEL, 12.0, 1, max_title_lines,
                                        p->title_text, sizeof p->title_text);
    size_t title_lines = 1;
    for (const char *c = p->title_text; *c; c++) title_lines += *c == '\n';
    double title_h = s->title ? dpplot_line_height(cv, p->title_size) * (double)title_lines + 12.0 : 4.0;

    /* y axis first: its label widths decide the left margin. */
    double est_plot_h = outer.h - title_h - tick_h - label_h - 3 * PAD;
    if (est_plot_h < 40.0) return -1;
    double y_label_w = 0.0;
    if (s->y_categories) {
        for (size_t i = 0; i < s->n_y_categories; i++)
            y_label_w = fmax(y_label_w, dpplot_text_width(cv, s->y_categories[i], DPPLOT_FONT_TICK, 0));
    } else {
        if (fit_ticks(cv, s->y_min, s->y_max, s->y_scale, s->y_unit, s->y_extend, est_plot_h - s->top_band, 0,
                      &p->yt) != 0)
            return -1;
        for (size_t i = 0; i < p->yt.n; i++)
            y_label_w = fmax(y_label_w, dpplot_text_width(cv, p->yt.label[i], DPPLOT_FONT_TICK, 0));
    }
    double left = PAD + (s->y_label ? label_h + 10.0 : 0.0) + y_label_w + TICK_LEN + TICK_GAP;
    double right = PAD * 2;
    double plot_w = outer.w - left - right;
    if (plot_w < 40.0) return -1;

    /* x axis: categories (maybe rotated) or numeric ticks fitted to the width. */
    double x_labels_h = tick_h;
    category_layout cat = {DPPLOT_FONT_TICK, 0.0, tick_h};
    if (s->x_categories) {
        cat = layout_x_categories(cv, s, plot_w);
        x_labels_h = cat.height;
    } else {
        if (fit_ticks(cv, s->x_min, s->x_max, s->x_scale, s->x_unit, s->x_extend, plot_w, 1, &p->xt) != 0) return -1;
        if (s->x_ticks && s->n_x_ticks > 0) use_given_ticks(cv, s, plot_w, &p->xt);
        /* The last label may overhang the plot's right edge: keep it on the canvas. */
        if (p->xt.n > 0) {
            double w = dpplot_text_width(cv, p->xt.label[p->xt.n - 1], DPPLOT_FONT_TICK, 0);
            if (w / 2 > right) {
                right = w / 2 + 4;
                plot_w = outer.w - left - right;
            }
        }
    }
    double bottom = TICK_LEN + TICK_GAP + x_labels_h + (s->x_label ? 10.0 + label_h : 0.0) + PAD;
    double plot_h = outer.h - title_h - bottom;
    if (plot_h < 40.0) return -1;
    p->plot = (dpplot_rect){outer.x + left, outer.y + title_h, plot_w, plot_h};
    p->data = dpplot_rect_inset(p->plot, 0, s->top_band, 0, 0);

    /* Axes mapping. */
    p->x.scale = s->x_categories ? DPPLOT_SCALE_LINEAR : s->x_scale;
    p->x.lo = s->x_categories ? -0.5 : p->xt.lo;
    p->x.hi = s->x_categories ? (double)s->n_x_categories - 0.5 : p->xt.hi;
    p->x.pix_lo = p->plot.x;
    p->x.pix_hi = p->plot.x + p->plot.w;
    p->y.scale = s->y_categories ? DPPLOT_SCALE_LINEAR : s->y_scale;
    p->y.lo = s->y_categories ? -0.5 : p->yt.lo;
    p->y.hi = s->y_categories ? (double)s->n_y_categories - 0.5 : p->yt.hi;
    p->y.pix_lo = p->data.y + p->data.h;
    p->y.pix_hi = p->data.y;

    cairo_t *cr = dpplot_canvas_cr(cv);
    cairo_save(cr);
    cairo_set_line_width(cr, 1.0);
    /* Grid lines (light) and tick marks. */
    if (!s->no_grid) {
        dpplot_set_color(cr, DPPLOT_GRID, 1.0);
        for (size_t i = 0; i < p->yt.n; i++) {
            double y = round(dpplot_panel_py(p, p->yt.value[i])) + 0.5;
            cairo_move_to(cr, p->plot.x, y);
            cairo_line_to(cr, p->plot.x + p->plot.w, y);
        }
        for (size_t i = 0; i < p->xt.n; i++) {
            double x = round(dpplot_panel_px(p, p->xt.value[i])) + 0.5;
            cairo_move_to(cr, x, p->plot.y);
            cairo_line_to(cr, x, p->plot.y + p->plot.h);
        }
        cairo_stroke(cr);
    }
    /* y tick labels */
    dpplot_text_style tick_y = dpplot_style(DPPLOT_FONT_TICK, 0, DPPLOT_INK, DPPLOT_RIGHT, DPPLOT_MIDDLE);
    tick_y.kind = DPPLOT_BOX_TICK;
    double label_x = p->plot.x - TICK_LEN - TICK_GAP;
    dpplot_set_color(cr, DPPLOT_INK, 1.0);
    if (s->y_categories) {
        for (size_t i = 0; i < s->n_y_categories; i++)
            dpplot_text(cv, label_x, dpplot_panel_py(p, (double)i), s->y_categories[i], &tick_y);
    } else {
        for (size_t i = 0; i < p->yt.n; i++) {
            double y = dpplot_panel_py(p, p->yt.value[i]);
            cairo_move_to(cr, p->plot.x - TICK_LEN, round(y) + 0.5);
            cairo_line_to(cr, p->plot.x, round(y) + 0.5);
            dpplot_text(cv, label_x, y, p->yt.label[i], &tick_y);
        }
        dpplot_set_color(cr, DPPLOT_INK, 1.0);
        cairo_stroke(cr);
    }
    /* x tick labels */
    double base_y = p->plot.y + p->plot.h;
    if (s->x_categories) {
        for (size_t i = 0; i < s->n_x_categories; i++) {
            double x = dpplot_panel_px(p, (double)i);
            dpplot_text_style st =
                dpplot_style(cat.size, 0, DPPLOT_INK, cat.angle != 0 ? DPPLOT_RIGHT : DPPLOT_CENTER, DPPLOT_TOP);
            st.angle_deg = cat.angle;
            st.kind = DPPLOT_BOX_TICK;
            double ty = base_y + TICK_LEN + TICK_GAP;
            if (s->x_category_colors) {
                /* The swatch sits on the tick, the label below it. */
                dpplot_set_color(cr, s->x_category_colors[i], 1.0);
                cairo_rectangle(cr, x - SWATCH / 2, ty, SWATCH, SWATCH);
                cairo_fill(cr);
                ty += SWATCH + 4;
            }
            dpplot_text(cv, x, ty, s->x_categories[i], &st);
        }
    } else {
        dpplot_text_style st = dpplot_style(DPPLOT_FONT_TICK, 0, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_TOP);
        st.kind = DPPLOT_BOX_TICK;
        dpplot_set_color(cr, DPPLOT_INK, 1.0);
        for (size_t i = 0; i < p->xt.n; i++) {
            double x = dpplot_panel_px(p, p->xt.value[i]);
            cairo_move_to(cr, round(x) + 0.5, base_y);
            cairo_line_to(cr, round(x) + 0.5, base_y + TICK_LEN);
        }
        cairo_stroke(cr);
        for (size_t i = 0; i < p->xt.n; i++)
            dpplot_text(cv, dpplot_panel_px(p, p->xt.value[i]), base_y + TICK_LEN + TICK_GAP, p->xt.label[i], &st);
    }
    /* Axis titles and panel title. */
    char buf[256];
    if (s->x_label) {
        axis_title(buf, sizeof buf, s->x_label, s->x_categories ? "" : p->xt.unit);
        /* one line, shrunk (then cut) to the panel's width so it never runs into its neighbour's */
        char fitted[256];
        double room =
            fmin(outer.w - 8,
                 2 * fmin(p->plot.x + p->plot.w / 2 - outer.x, outer.x + outer.w - p->plot.x - p->plot.w / 2) - 8);
        double size = dpplot_text_fit(cv, buf, room, DPPLOT_FONT_LABEL, 11.0, 0, 1, fitted, sizeof fitted);
        dpplot_text_style st = dpplot_style(size, 0, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_BOTTOM);
        st.kind = DPPLOT_BOX_TITLE;
        dpplot_text(cv, p->plot.x + p->plot.w / 2, outer.y + outer.h - PAD * 0.5, fitted, &st);
    }
    if (s->y_label) {
        axis_title(buf, sizeof buf, s->y_label, s->y_categories ? "" : p->yt.unit);
        char fitted[256];
        double room = p->plot.h + (outer.y + outer.h - p->plot.y - p->plot.h) - 4; /* down to the panel's foot */
        double size = dpplot_text_fit(cv, buf, fmax(room, 40.0), DPPLOT_FONT_LABEL, 11.0, 0, 1, fitted, sizeof fitted);
        dpplot_text_style st = dpplot_style(size, 0, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_TOP);
        st.angle_deg = 90.0;
        st.kind = DPPLOT_BOX_TITLE;
        dpplot_text(cv, outer.x + PAD, p->plot.y + p->plot.h / 2, fitted, &st);
    }
    if (s->title) {
        dpplot_text_style st = dpplot_style(p->title_size, 1, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_TOP);
        st.kind = DPPLOT_BOX_TITLE;
        const char *title = p->title_text;
        double sw = s->title_swatch ? SWATCH + 8 : 0;
        double tw = dpplot_text_width(cv, title, st.size, 1);
        double cx = p->plot.x + p->plot.w / 2;
        if (cx - (tw + sw) / 2 < outer.x) cx = outer.x + (tw + sw) / 2; /* keep it inside the panel */
        if (cx + (tw + sw) / 2 > outer.x + outer.w) cx = outer.x + outer.w - (tw + sw) / 2;
        if (s->title_swatch) {
            double x0 = cx - (tw + sw) / 2;
            double lh = dpplot_line_height(cv, st.size);
            dpplot_set_color(cr, *s->title_swatch, 1.0);
            cairo_rectangle(cr, x0, outer.y + (lh - SWATCH) / 2, SWATCH, SWATCH);
            cairo_fill(cr);
            cx = x0 + sw + tw / 2;
        }
        dpplot_text(cv, cx, outer.y, title, &st);
    }
    cairo_restore(cr);
    return 0;
}

void dpplot_panel_end(dpplot_panel *p) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    cairo_save(cr);
    cairo_set_line_width(cr, 1.5);
    dpplot_set_color(cr, DPPLOT_INK, 1.0);
    double x0 = round(p->plot.x) + 0.25, y1 = round(p->plot.y + p->plot.h) + 0.25;
    cairo_move_to(cr, x0, p->plot.y);
    cairo_line_to(cr, x0, y1);
    cairo_line_to(cr, p->plot.x + p->plot.w, y1);
    cairo_stroke(cr);
    /* A zero line when a numeric y range spans both signs (overhead charts). */
    if (!p->spec.y_categories && p->y.scale == DPPLOT_SCALE_LINEAR && p->y.lo < 0 && p->y.hi > 0) {
        double y = round(dpplot_panel_py(p, 0.0)) + 0.5;
        cairo_set_line_width(cr, 1.0);
        cairo_move_to(cr, p->plot.x, y);
        cairo_line_to(cr, p->plot.x + p->plot.w, y);
        cairo_stroke(cr);
    }
    cairo_restore(cr);
}

double dpplot_panel_px(const dpplot_panel *p, double v) { return dpplot_axis_map(&p->x, v); }
double dpplot_panel_py(const dpplot_panel *p, double v) { return dpplot_axis_map(&p->y, v); }

void dpplot_panel_clip(const dpplot_panel *p) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    cairo_save(cr);
    cairo_rectangle(cr, p->plot.x, p->plot.y, p->plot.w, p->plot.h);
    cairo_clip(cr);
}

void dpplot_panel_unclip(const dpplot_panel *p) { cairo_restore(dpplot_canvas_cr(p->cv)); }

/* Draws text centred across the canvas from y, fitted to two lines of the width (font size from
 * `size` down to `min_size`); returns the y below it. */
static double figure_line(dpplot_canvas *cv, double y, const char *text, double size, double min_size, int bold,
                          dpplot_rgb color) {
    double w = dpplot_canvas_width(cv);
    char fitted[1536];
    double fit = dpplot_text_fit(cv, text, w - 2 * PAD, size, min_size, bold, 2, fitted, sizeof fitted);
    dpplot_text_style st = dpplot_style(fit, bold, color, DPPLOT_CENTER, DPPLOT_TOP);
    st.kind = DPPLOT_BOX_TITLE;
    dpplot_text(cv, w / 2, y, fitted, &st);
    return y + dpplot_text_bounds(cv, w / 2, y, fitted, &st).h + 4;
}

double dpplot_figure_title(dpplot_canvas *cv, const char *title, const char *subtitle) {
    double y = PAD * 1.5;
    if (title) y = figure_line(cv, y, title, DPPLOT_FONT_TITLE, 18.0, 1, DPPLOT_INK);
    if (subtitle) y = figure_line(cv, y, subtitle, DPPLOT_FONT_NOTE, 12.0, 0, DPPLOT_MUTED);
    return y + 6;
}

void dpplot_figure_note(dpplot_canvas *cv, const char *note) {
    if (!note || !*note) return;
    /* one line across the canvas (the charts keep one line's room for it): a long list of left-out
     * runs shrinks a little, then is cut with an ellipsis rather than run off the right edge */
    char fitted[1024];
    double size = dpplot_text_fit(cv, note, dpplot_canvas_width(cv) - 2 * PAD, DPPLOT_FONT_NOTE, DPPLOT_FONT_NOTE - 3,
                                  0, 1, fitted, sizeof fitted);
    dpplot_text_style st = dpplot_style(size, 0, DPPLOT_MUTED, DPPLOT_LEFT, DPPLOT_BOTTOM);
    dpplot_text(cv, PAD, dpplot_canvas_height(cv) - PAD * 0.5, fitted, &st);
}
