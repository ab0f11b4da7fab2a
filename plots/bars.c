/* bars.c: stacked and grouped bars. */
#include "dpplot_bars.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Relative luminance (sRGB approximation): picks black or white text on a fill. */
static dpplot_rgb text_on(dpplot_rgb fill) {
    double l = 0.2126 * fill.r + 0.7152 * fill.g + 0.0722 * fill.b;
    return l > 0.55 ? DPPLOT_INK : DPPLOT_WHITE;
}

void dpplot_bars_range(const dpplot_bar_spec *b, double *lo, double *hi) {
    *lo = 0.0, *hi = 0.0;
    for (size_t g = 0; g < b->n_groups; g++) {
        double pos = 0.0, neg = 0.0;
        for (size_t s = 0; s < b->n_series; s++) {
            double v = b->values[g * b->n_series + s];
            if (!isfinite(v)) continue;
            if (b->stacked) {
                if (v >= 0)
                    pos += v;
                else
                    neg += v;
            } else {
                pos = fmax(pos, v), neg = fmin(neg, v);
            }
        }
        *hi = fmax(*hi, pos), *lo = fmin(*lo, neg);
    }
}

/* The one unit every segment label of a chart is written in: the value axis's own ("GiB" under a
 * GiB axis), or, where the axis has none, the unit of the largest bar. */
typedef struct {
    const char *name; /* "" when the values have no unit */
    double divisor;
} label_unit;

static label_unit chart_unit(const dpplot_panel *p, const dpplot_bar_spec *b) {
    label_unit u = {"", 1.0};
    if (b->unit == DPPLOT_UNIT_NONE) return u;
    if (p->yt.n > 0 && p->yt.unit[0] && p->yt.divisor > 0) return (label_unit){p->yt.unit, p->yt.divisor};
    double lo, hi;
    dpplot_bars_range(b, &lo, &hi);
    dpplot_unit_choose(b->unit, fmax(fabs(lo), fabs(hi)), &u.name, &u.divisor);
    if (!(u.divisor > 0)) u.divisor = 1.0;
    return u;
}

static void segment(dpplot_panel *p, const dpplot_bar_spec *b, label_unit u, double x0, double w, double v0, double v1,
                    dpplot_rgb color) {
    cairo_t *cr = dpplot_canvas_cr(p->cv);
    double ya = dpplot_panel_py(p, v0), yb = dpplot_panel_py(p, v1);
    double top = fmin(ya, yb), h = fabs(ya - yb);
    dpplot_set_color(cr, color, 1.0);
    cairo_rectangle(cr, x0, top, w, h);
    cairo_fill_preserve(cr);
    cairo_set_line_width(cr, 1.0);
    dpplot_set_color(cr, DPPLOT_WHITE, 1.0);
    cairo_stroke(cr);
    if (!b->label_segments) return;
    char buf[48];
    if (b->unit == DPPLOT_UNIT_NONE) {
        char num[32];
        dpplot_format_value(fabs(v1 - v0), b->unit, num, sizeof num);
        snprintf(buf, sizeof buf, "%s%s", v1 < v0 ? "-" : "", num);
    } else {
        double shown = fabs(v1 - v0) / u.divisor;
        /* a segment below zero is a negative amount (less than the reference), and says so; every
         * label in the chart's one unit (a 474 MiB segment on a GiB axis reads "0.46 GiB") */
        int decimals = shown >= 100 ? 0 : shown >= 10 ? 1 : 2;
        snprintf(buf, sizeof buf, "%s%.*f%s%s", v1 < v0 ? "-" : "", decimals, shown, u.name[0] ? " " : "", u.name);
    }
    /* One of two sizes, so labels look alike; a label that fits neither is left out rather than
     * shown without its unit (the axis unit may differ). */
    double size = DPPLOT_FONT_NOTE - 1;
    if (dpplot_text_width(p->cv, buf, size, 1) > w - 6) size = DPPLOT_FONT_NOTE - 4;
    if (h < dpplot_line_height(p->cv, size) + 2 || dpplot_text_width(p->cv, buf, size, 1) > w - 6) return;
    dpplot_text_style st = dpplot_style(size, 1, text_on(color), DPPLOT_CENTER, DPPLOT_MIDDLE);
    dpplot_text(p->cv, x0 + w / 2, top + h / 2, buf, &st);
}

void dpplot_bars_draw(dpplot_panel *p, const dpplot_bar_spec *b) {
    double frac = b->width > 0 ? b->width : 0.62;
    double slot = fabs(dpplot_panel_px(p, 1.0) - dpplot_panel_px(p, 0.0));
    label_unit u = chart_unit(p, b);
    dpplot_panel_clip(p);
    for (size_t g = 0; g < b->n_groups; g++) {
        double cx = dpplot_panel_px(p, (double)g), w = slot * frac;
        if (b->stacked) {
            double pos = 0.0, neg = 0.0;
            for (size_t s = 0; s < b->n_series; s++) {
                double v = b->values[g * b->n_series + s];
                if (!isfinite(v) || v == 0.0) continue;
                if (v > 0) {
                    segment(p, b, u, cx - w / 2, w, pos, pos + v, b->series_colors[s]);
                    pos += v;
                } else {
                    segment(p, b, u, cx - w / 2, w, neg, neg + v, b->series_colors[s]);
                    neg += v;
                }
            }
        } else {
            double bw = w / (double)(b->n_series ? b->n_series : 1);
            for (size_t s = 0; s < b->n_series; s++) {
                double v = b->values[g * b->n_series + s];
                if (!isfinite(v)) continue;
                segment(p, b, u, cx - w / 2 + bw * (double)s, bw, 0.0, v, b->series_colors[s]);
            }
        }
    }
    dpplot_panel_unclip(p);
    if (!b->group_notes) return;
    for (size_t g = 0; g < b->n_groups; g++) {
        if (!b->group_notes[g]) continue;
        double top = 0.0, pos = 0.0;
        for (size_t s = 0; s < b->n_series; s++) {
            double v = b->values[g * b->n_series + s];
            if (!isfinite(v)) continue;
            if (b->stacked)
                pos += v > 0 ? v : 0;
            else
                top = fmax(top, v);
        }
        if (b->stacked) top = pos;
        /* Notes fit their slot: smaller font first, then kept inside the plot horizontally. */
        dpplot_text_style st = dpplot_style(DPPLOT_FONT_LEGEND, 1, DPPLOT_INK, DPPLOT_CENTER, DPPLOT_BOTTOM);
        while (st.size > 12.0 && dpplot_text_width(p->cv, b->group_notes[g], st.size, 1) > slot * 0.96) st.size -= 1.0;
        dpplot_rect box = dpplot_text_bounds(p->cv, 0, 0, b->group_notes[g], &st);
        double x = dpplot_panel_px(p, (double)g);
        x = fmin(fmax(x, p->plot.x + box.w / 2 + 2), p->plot.x + p->plot.w - box.w / 2 - 2);
        double y = fmax(dpplot_panel_py(p, top) - 6, p->plot.y + box.h + 2);
        dpplot_text(p->cv, x, y, b->group_notes[g], &st);
    }
}
