/* heatmap.c: viridis heatmaps and colorbars. */
#include "dpplot_heatmap.h"

#include <math.h>
#include <stdio.h>

#include "dpplot_palette.h"

#define DPPLOT_UNFIT_RED dpplot_rgb_hex(0xD0103A)

dpplot_rgb dpplot_heatmap_color(const dpplot_heatmap_spec *h, double v) {
    double a = dpplot_scale_apply(h->color_scale, h->vmin), b = dpplot_scale_apply(h->color_scale, h->vmax);
    double t = b > a ? (dpplot_scale_apply(h->color_scale, v) - a) / (b - a) : 0.5;
    return dpplot_viridis(t);
}

static void hatch(cairo_t *cr, double x, double y, double w, double h) {
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    cairo_clip(cr);
    dpplot_set_color(cr, dpplot_rgb_hex(0xF2F2F2), 1.0);
    cairo_paint(cr);
    cairo_set_line_width(cr, 1.0);
    dpplot_set_color(cr, dpplot_rgb_hex(0xB0B0B0), 1.0);
    for (double d = -h; d < w; d += 10.0) {
        cairo_move_to(cr, x + d, y + h);
        cairo_line_to(cr, x + d + h, y);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

/* A cell predicted not to fit the card: red diagonal hatching and a red frame over its colour. */
static void unfit_marks(cairo_t *cr, double x, double y, double w, double h) {
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    cairo_clip(cr);
    cairo_set_line_width(cr, 2.0);
    dpplot_set_color(cr, DPPLOT_UNFIT_RED, 1.0);
    for (double d = -h; d < w; d += 12.0) {
        cairo_move_to(cr, x + d, y + h);
        cairo_line_to(cr, x + d + h, y);
    }
    cairo_stroke(cr);
    cairo_set_line_width(cr, 6.0);
    cairo_rectangle(cr, x, y, w, h);
    cairo_stroke(cr);
    cairo_restore(cr);
}

void dpplot_heatmap_draw(dpplot_panel *p, const dpplot_heatmap_spec *h) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    double cw = fabs(dpplot_panel_px(p, 1.0) - dpplot_panel_px(p, 0.0));
    double ch = fabs(dpplot_panel_py(p, 1.0) - dpplot_panel_py(p, 0.0));
    for (size_t r = 0; r < h->n_rows; r++)
        for (size_t c = 0; c < h->n_cols; c++) {
            size_t i = r * h->n_cols + c;
            double x = dpplot_panel_px(p, (double)c) - cw / 2, y = dpplot_panel_py(p, (double)r) - ch / 2;
            double v = h->values[i];
            int oom = h->oom && h->oom[i];
            char buf[32] = "";
            dpplot_rgb ink = DPPLOT_INK;
            if (oom) {
                hatch(cr, x, y, cw, ch);
                snprintf(buf, sizeof buf, "OOM");
                ink = dpplot_rgb_hex(0xB00020);
            } else if (isfinite(v)) {
                dpplot_rgb fill = dpplot_heatmap_color(h, v);
                dpplot_set_color(cr, fill, 1.0);
                cairo_rectangle(cr, x, y, cw, ch);
                cairo_fill(cr);
                if (h->show_values) dpplot_format_value(v, h->unit, buf, sizeof buf);
                double l = 0.2126 * fill.r + 0.7152 * fill.g + 0.0722 * fill.b;
                ink = l > 0.45 ? DPPLOT_INK : DPPLOT_WHITE;
                if (h->unfit && h->unfit[i]) unfit_marks(cr, x, y, cw, ch);
            } else {
                dpplot_set_color(cr, dpplot_rgb_hex(0xF7F7F7), 1.0);
                cairo_rectangle(cr, x, y, cw, ch);
                cairo_fill(cr);
                snprintf(buf, sizeof buf, "no data");
                ink = DPPLOT_MUTED;
            }
            /* Thin white gaps between cells. */
            dpplot_set_color(cr, DPPLOT_WHITE, 1.0);
            cairo_set_line_width(cr, 2.0);
            cairo_rectangle(cr, x, y, cw, ch);
            cairo_stroke(cr);
            if (!buf[0]) continue;
            double size = DPPLOT_FONT_NOTE;
            while (size > 10 && dpplot_text_width(p->cv, buf, size, oom) > cw - 6) size -= 1;
            if (dpplot_text_width(p->cv, buf, size, oom) > cw - 4 || dpplot_line_height(p->cv, size) > ch - 2) continue;
            dpplot_text_style st = dpplot_style(size, oom, ink, DPPLOT_CENTER, DPPLOT_MIDDLE);
            dpplot_text(p->cv, x + cw / 2, y + ch / 2, buf, &st);
        }
}

void dpplot_colorbar_draw(dpplot_canvas *cv, dpplot_rect r, double vmin, double vmax, dpplot_scale scale,
                          dpplot_unit unit, const char *label) {
    cairo_t *cr = dpplot_canvas_cr(cv);
    double bar_w = 24.0;
    /* One gradient with a stop per table entry: exact viridis, and none of the seams that
     * abutting antialiased strips leave. */
    cairo_pattern_t *grad = cairo_pattern_create_linear(0, r.y + r.h, 0, r.y);
    for (int i = 0; i < 256; i++) {
        dpplot_rgb c = dpplot_viridis(i / 255.0);
        cairo_pattern_add_color_stop_rgb(grad, i / 255.0, c.r, c.g, c.b);
    }
    cairo_rectangle(cr, r.x, r.y, bar_w, r.h);
    cairo_set_source(cr, grad);
    cairo_fill(cr);
    cairo_pattern_destroy(grad);
    cairo_set_line_width(cr, 1.0);
    dpplot_set_color(cr, DPPLOT_INK, 1.0);
    cairo_rectangle(cr, r.x + 0.5, r.y + 0.5, bar_w, r.h);
    cairo_stroke(cr);
    dpplot_ticks t;
    if (dpplot_ticks_compute(vmin, vmax, scale, (int)fmax(3, r.h / 90), unit, 0, &t) != 0) return;
    dpplot_axis ax = {scale, vmin, vmax, r.y + r.h, r.y};
    dpplot_text_style st = dpplot_style(DPPLOT_FONT_TICK, 0, DPPLOT_INK, DPPLOT_LEFT, DPPLOT_MIDDLE);
    double widest = 0.0;
    for (size_t i = 0; i < t.n; i++) {
        double y = dpplot_axis_map(&ax, t.value[i]);
        cairo_move_to(cr, r.x + bar_w, round(y) + 0.5);
        cairo_line_to(cr, r.x + bar_w + 6, round(y) + 0.5);
        cairo_stroke(cr);
        dpplot_text(cv, r.x + bar_w + 10, y, t.label[i], &st);
        widest = fmax(widest, dpplot_text_width(cv, t.label[i], st.size, 0));
    }
    if (label) {
        char buf[128];
        if (t.unit[0])
            snprintf(buf, sizeof buf, "%s (%s)", label, t.unit);
        else
            snprintf(buf, sizeof buf, "%s", label);
        dpplot_text_style ls = dpplot_style(DPPLOT_FONT_LABEL, 0, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_TOP);
        ls.angle_deg = -90.0;
        dpplot_text(cv, r.x + bar_w + 18 + widest + dpplot_line_height(cv, ls.size), r.y + r.h / 2, buf, &ls);
    }
}
