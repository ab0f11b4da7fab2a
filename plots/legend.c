/* legend.c: row-wrapped legends. */
#include "dpplot_legend.h"

#define SWATCH_W_LINE 40.0 /* px */
#define SWATCH_W_BOX 18.0
#define GAP_IN 8.0   /* swatch to label */
#define GAP_OUT 28.0 /* entry to entry */
#define ROW_GAP 6.0

static int is_line(dpplot_swatch s) {
    return s == DPPLOT_SWATCH_LINE || s == DPPLOT_SWATCH_DASHED || s == DPPLOT_SWATCH_DOTTED ||
           s == DPPLOT_SWATCH_DASHDOT;
}

static double swatch_width(dpplot_swatch s) {
    return is_line(s) ? SWATCH_W_LINE : s == DPPLOT_SWATCH_NOTE ? -GAP_IN : SWATCH_W_BOX;
}

dpplot_swatch dpplot_swatch_of_dash(int dash) {
    static const dpplot_swatch by_dash[4] = {DPPLOT_SWATCH_LINE, DPPLOT_SWATCH_DASHED, DPPLOT_SWATCH_DOTTED,
                                             DPPLOT_SWATCH_DASHDOT};
    return dash >= 0 && dash < 4 ? by_dash[dash] : DPPLOT_SWATCH_LINE;
}

static double entry_width(dpplot_canvas *cv, const dpplot_legend_entry *e) {
    return swatch_width(e->swatch) + GAP_IN + dpplot_text_width(cv, e->label, DPPLOT_FONT_LEGEND, 0);
}

/* Number of entries from `first` that fit on one row of `width` px (at least 1). */
static size_t row_count(dpplot_canvas *cv, double width, const dpplot_legend_entry *e, size_t n, size_t first,
                        double *row_w) {
    double w = 0.0;
    size_t k = 0;
    for (size_t i = first; i < n; i++) {
        double ew = entry_width(cv, &e[i]) + (k ? GAP_OUT : 0.0);
        if (k > 0 && w + ew > width) break;
        w += ew;
        k++;
    }
    *row_w = w;
    return k;
}

double dpplot_legend_height(dpplot_canvas *cv, double width, const dpplot_legend_entry *e, size_t n) {
    if (n == 0) return 0.0;
    double line = dpplot_line_height(cv, DPPLOT_FONT_LEGEND), h = 0.0, rw;
    for (size_t i = 0; i < n;) {
        i += row_count(cv, width, e, n, i, &rw);
        h += line + ROW_GAP;
    }
    return h;
}

static void draw_swatch(cairo_t *cr, const dpplot_legend_entry *e, double x, double cy) {
    switch (e->swatch) {
    case DPPLOT_SWATCH_LINE:
    case DPPLOT_SWATCH_DASHED:
    case DPPLOT_SWATCH_DOTTED:
    case DPPLOT_SWATCH_DASHDOT: {
        static const int dash_of[] = {[DPPLOT_SWATCH_LINE] = DPPLOT_DASH_SOLID,
                                      [DPPLOT_SWATCH_DASHED] = DPPLOT_DASH_DASHED,
                                      [DPPLOT_SWATCH_DOTTED] = DPPLOT_DASH_DOTTED,
                                      [DPPLOT_SWATCH_DASHDOT] = DPPLOT_DASH_DASHDOT};
        cairo_save(cr);
        cairo_set_line_width(cr, 3.0);
        dpplot_set_dash(cr, dash_of[e->swatch], 3.0);
        dpplot_set_color(cr, e->color, 1.0);
        cairo_move_to(cr, x, cy);
        cairo_line_to(cr, x + SWATCH_W_LINE, cy);
        cairo_stroke(cr);
        cairo_restore(cr);
        if (e->marker != DPPLOT_MARKER_NONE)
            dpplot_marker_draw(cr, x + SWATCH_W_LINE / 2, cy, 11.0, e->marker, e->color,
                               e->swatch == DPPLOT_SWATCH_DOTTED);
        break;
    }
    case DPPLOT_SWATCH_MARKER:
        dpplot_marker_draw(cr, x + SWATCH_W_BOX / 2, cy, 13.0,
                           e->marker == DPPLOT_MARKER_NONE ? DPPLOT_MARKER_CIRCLE : e->marker, e->color, 0);
        break;
    case DPPLOT_SWATCH_WHISKER:
        cairo_save(cr);
        cairo_set_line_width(cr, 2.0);
        dpplot_set_color(cr, e->color, 1.0);
        cairo_move_to(cr, x + SWATCH_W_BOX / 2, cy - 9);
        cairo_line_to(cr, x + SWATCH_W_BOX / 2, cy + 9);
        cairo_move_to(cr, x + 3, cy - 9);
        cairo_line_to(cr, x + SWATCH_W_BOX - 3, cy - 9);
        cairo_move_to(cr, x + 3, cy + 9);
        cairo_line_to(cr, x + SWATCH_W_BOX - 3, cy + 9);
        cairo_stroke(cr);
        cairo_restore(cr);
        break;
    case DPPLOT_SWATCH_NOTE: break;
    case DPPLOT_SWATCH_SHADE:
        dpplot_set_color(cr, e->color, 0.35);
        cairo_rectangle(cr, x, cy - SWATCH_W_BOX / 2, SWATCH_W_BOX, SWATCH_W_BOX);
        cairo_fill(cr);
        break;
    default:
        dpplot_set_color(cr, e->color, 1.0);
        cairo_rectangle(cr, x, cy - SWATCH_W_BOX / 2, SWATCH_W_BOX, SWATCH_W_BOX);
        cairo_fill(cr);
        break;
    }
}

double dpplot_legend_draw(dpplot_canvas *cv, dpplot_rect area, const dpplot_legend_entry *e, size_t n) {
    if (n == 0) return 0.0;
    cairo_t *cr = dpplot_canvas_cr(cv);
    double line = dpplot_line_height(cv, DPPLOT_FONT_LEGEND), y = area.y, rw;
    dpplot_text_style st = dpplot_style(DPPLOT_FONT_LEGEND, 0, DPPLOT_INK, DPPLOT_LEFT, DPPLOT_MIDDLE);
    for (size_t i = 0; i < n;) {
        size_t k = row_count(cv, area.w, e, n, i, &rw);
        /* an entry wider than the legend (a long list of coinciding runs) has its row to itself
         * and is cut to it with an ellipsis, never run off the canvas */
        char cut[512];
        const char *label = k == 1 ? e[i].label : NULL;
        if (k == 1 && rw > area.w) {
            dpplot_text_fit(cv, e[i].label, area.w - swatch_width(e[i].swatch) - GAP_IN, DPPLOT_FONT_LEGEND,
                            DPPLOT_FONT_LEGEND, 0, 1, cut, sizeof cut);
            label = cut, rw = area.w;
        }
        double x = area.x + (area.w - rw) / 2, cy = y + line / 2;
        for (size_t j = i; j < i + k; j++) {
            draw_swatch(cr, &e[j], x, cy);
            double sw = swatch_width(e[j].swatch);
            dpplot_text(cv, x + sw + GAP_IN, cy, label ? label : e[j].label, &st);
            x += entry_width(cv, &e[j]) + GAP_OUT;
        }
        i += k;
        y += line + ROW_GAP;
    }
    return y - area.y;
}
