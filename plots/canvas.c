/* canvas.c: surface, pinned font and text layout. */
#include "dpplot_canvas.h"
#include "safe_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dpplot_canvas {
    cairo_surface_t *surface;
    cairo_t *cr;
    double width, height; /* logical px */
    dpplot_box *boxes;    /* every text box placed, for the layout checks */
    size_t n_boxes, cap_boxes;
    dpplot_layout_fn layout_hook; /* gets the boxes when the PNG is written */
    void *layout_user;
};

/* Larger surfaces than this are refused: 16384 device px a side is cairo's own limit. */
#define DPPLOT_MAX_DEVICE_PX 16384.0

dpplot_canvas *dpplot_canvas_new(int width, int height, double scale) {
    if (width < 64 || height < 64 || !(scale > 0.0) || !isfinite(scale)) return NULL;
    double dw = ceil(width * scale), dh = ceil(height * scale);
    if (dw > DPPLOT_MAX_DEVICE_PX || dh > DPPLOT_MAX_DEVICE_PX) return NULL;
    dpplot_canvas *cv = calloc(1, sizeof *cv);
    if (!cv) return NULL;
    cv->surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, (int)dw, (int)dh);
    if (cairo_surface_status(cv->surface) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(cv->surface);
        free(cv);
        return NULL;
    }
    cv->cr = cairo_create(cv->surface);
    if (cairo_status(cv->cr) != CAIRO_STATUS_SUCCESS) {
        cairo_destroy(cv->cr);
        cairo_surface_destroy(cv->surface);
        free(cv);
        return NULL;
    }
    cv->width = width;
    cv->height = height;
    cairo_scale(cv->cr, scale, scale);
    /* No hinting: glyph metrics then scale linearly, so layout is identical at every scale. */
    cairo_font_options_t *fo = cairo_font_options_create();
    cairo_font_options_set_hint_style(fo, CAIRO_HINT_STYLE_NONE);
    cairo_font_options_set_hint_metrics(fo, CAIRO_HINT_METRICS_OFF);
    cairo_font_options_set_antialias(fo, CAIRO_ANTIALIAS_GRAY);
    cairo_set_font_options(cv->cr, fo);
    cairo_font_options_destroy(fo);
    cairo_select_font_face(cv->cr, DPPLOT_FONT_FAMILY, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_source_rgb(cv->cr, 1, 1, 1);
    cairo_paint(cv->cr);
    cairo_set_line_join(cv->cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cv->cr, CAIRO_LINE_CAP_BUTT);
    return cv;
}

void dpplot_canvas_free(dpplot_canvas *cv) {
    if (!cv) return;
    free(cv->boxes);
    cairo_destroy(cv->cr);
    cairo_surface_destroy(cv->surface);
    free(cv);
}

cairo_t *dpplot_canvas_cr(dpplot_canvas *cv) { return cv->cr; }
double dpplot_canvas_width(const dpplot_canvas *cv) { return cv->width; }
double dpplot_canvas_height(const dpplot_canvas *cv) { return cv->height; }

/* Where the PNG stream goes, and the errno of its first failed write (0: none). */
typedef struct {
    FILE *fp;
    int err;
} png_sink;

static cairo_status_t png_to_stream(void *closure, const unsigned char *data, unsigned int length) {
    png_sink *sink = closure;
    errno = 0;
    if (fwrite(data, 1, length, sink->fp) == length) return CAIRO_STATUS_SUCCESS;
    if (!sink->err) sink->err = errno ? errno : EIO;
    return CAIRO_STATUS_WRITE_ERROR;
}

void dpplot_canvas_set_layout_hook(dpplot_canvas *cv, dpplot_layout_fn fn, void *user) {
    cv->layout_hook = fn, cv->layout_user = user;
}

int dpplot_canvas_write_png(dpplot_canvas *cv, const char *path, char *err, size_t errlen) {
    if (cv->layout_hook) cv->layout_hook(cv->layout_user, path, cv->boxes, cv->n_boxes);
    cairo_surface_flush(cv->surface);
    /* cairo_surface_write_to_png would follow a link planted at path: write through safe_file */
    dpfile_writer w;
    if (dpfile_writer_open(&w, path, err, errlen) != 0) return -1;
    png_sink sink = {w.fp, 0};
    cairo_status_t st = cairo_surface_write_to_png_stream(cv->surface, png_to_stream, &sink);
    if (st != CAIRO_STATUS_SUCCESS) { /* the reason: the OS's for a failed write, else cairo's */
        dpfile_writer_abort(&w);
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot write the PNG: %s", path,
                     sink.err ? strerror(sink.err) : cairo_status_to_string(st));
        return -1;
    }
    return dpfile_writer_commit(&w, err, errlen);
}

dpplot_text_style dpplot_style(double size, int bold, dpplot_rgb color, dpplot_halign h, dpplot_valign v) {
    dpplot_text_style st = {size, bold, color, h, v, 0.0, DPPLOT_BOX_TEXT};
    return st;
}

static void select_font(cairo_t *cr, double size, int bold) {
    cairo_select_font_face(cr, DPPLOT_FONT_FAMILY, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

/* Copies line `index` of text (split at '\n') into buf; returns the number of lines. */
static size_t text_line(const char *text, size_t index, char *buf, size_t buflen) {
    size_t line = 0;
    const char *start = text;
    for (const char *p = text;; p++) {
        if (*p == '\n' || *p == '\0') {
            if (line == index && buf) {
                size_t len = (size_t)(p - start);
                if (len >= buflen) len = buflen - 1;
                memcpy(buf, start, len);
                buf[len] = '\0';
            }
            line++;
            if (*p == '\0') break;
            start = p + 1;
        }
    }
    return line;
}

double dpplot_line_height(dpplot_canvas *cv, double size) {
    cairo_save(cv->cr);
    select_font(cv->cr, size, 0);
    cairo_font_extents_t fe;
    cairo_font_extents(cv->cr, &fe);
    cairo_restore(cv->cr);
    return fe.ascent + fe.descent;
}

double dpplot_text_width(dpplot_canvas *cv, const char *text, double size, int bold) {
    if (!text || !*text) return 0.0;
    char buf[512];
    double widest = 0.0;
    cairo_save(cv->cr);
    select_font(cv->cr, size, bold);
    size_t lines = text_line(text, 0, NULL, 0);
    for (size_t i = 0; i < lines; i++) {
        text_line(text, i, buf, sizeof buf);
        cairo_text_extents_t te;
        cairo_text_extents(cv->cr, buf, &te);
        if (te.x_advance > widest) widest = te.x_advance;
    }
    cairo_restore(cv->cr);
    return widest;
}

/* Greedy wrap of text at spaces into lines no wider than room at size; returns the number of
 * lines written to out ('\n'-separated), or 0 when a single word is wider than room or out is
 * too small. */
static int wrap_greedy(dpplot_canvas *cv, const char *text, double room, double size, int bold, char *out,
                       size_t outlen) {
    size_t used = 0, line_start = 0;
    int lines = 1;
    const char *p = text;
    out[0] = '\0';
    while (*p) {
        const char *end = strchr(p, ' ');
        size_t wlen = end ? (size_t)(end - p) : strlen(p);
        size_t sep = used > line_start ? 1 : 0;
        if (used + sep + wlen + 1 >= outlen) return 0;
        size_t mark = used;
        if (sep) out[used++] = ' ';
        memcpy(out + used, p, wlen);
        used += wlen;
        out[used] = '\0';
        if (dpplot_text_width(cv, out + line_start, size, bold) > room) {
            if (!sep) return 0; /* one word alone is too wide */
            used = mark;        /* break before this word */
            out[used++] = '\n';
            line_start = used;
            lines++;
            memcpy(out + used, p, wlen);
            used += wlen;
            out[used] = '\0';
            if (dpplot_text_width(cv, out + line_start, size, bold) > room) return 0;
        }
        p += wlen;
        while (*p == ' ') p++;
    }
    return lines;
}

double dpplot_text_fit(dpplot_canvas *cv, const char *text, double room, double size, double min_size, int bold,
                       int max_lines, char *out, size_t outlen) {
    if (!outlen) return size;
    snprintf(out, outlen, "%s", text ? text : "");
    if (!text || !*text) return size;
    if (max_lines < 1) max_lines = 1;
    for (double s = size; s >= min_size; s -= 1.0) {
        if (dpplot_text_width(cv, text, s, bold) <= room) {
            snprintf(out, outlen, "%s", text);
            return s;
        }
        int n = wrap_greedy(cv, text, room, s, bold, out, outlen);
        if (n > 0 && n <= max_lines) return s;
    }
    /* Nothing fits: the first max_lines lines at min_size, each cut to room with an ellipsis. */
    char line[512];
    size_t used = 0;
    const char *p = text;
    out[0] = '\0';
    for (int l = 0; l < max_lines && *p; l++) {
        size_t len = 0;
        line[0] = '\0';
        while (p[len]) { /* whole UTF-8 characters only: cairo refuses a broken sequence */
            size_t next = len + 1;
            while (p[next] && (p[next] & 0xC0) == 0x80) next++;
            if (next + 1 >= sizeof line) break;
            memcpy(line, p, next);
            line[next] = '\0';
            if (dpplot_text_width(cv, line, min_size, bold) > room) break;
            len = next;
        }
        if (len == 0) break;
        /* prefer a break at a space */
        size_t cut = len;
        if (p[len]) {
            size_t k = len;
            while (k > 0 && p[k] != ' ') k--;
            if (k > len / 2) cut = k;
        }
        int last = l == max_lines - 1 && p[cut];
        if (last) { /* cut further to make room for the ellipsis */
            while (cut > 0) {
                snprintf(line, sizeof line, "%.*s\xe2\x80\xa6", (int)cut, p);
                if (dpplot_text_width(cv, line, min_size, bold) <= room) break;
                cut--;
                while (cut > 0 && (p[cut] & 0xC0) == 0x80) cut--; /* never split a UTF-8 character */
            }
        }
        used += (size_t)snprintf(out + used, outlen > used ? outlen - used : 0, "%s%.*s%s", l ? "\n" : "", (int)cut, p,
                                 last ? "\xe2\x80\xa6" : "");
        if (used >= outlen) break;
        p += cut;
        while (*p == ' ') p++;
    }
    return min_size;
}

/* Unrotated block geometry relative to the anchor: the block spans [x0, x0+w] × [y0, y0+h]. */
static void block_geometry(dpplot_canvas *cv, const char *text, const dpplot_text_style *st, double *x0, double *y0,
                           double *w, double *h, double *ascent, double *line_h) {
    cairo_save(cv->cr);
    select_font(cv->cr, st->size, st->bold);
    cairo_font_extents_t fe;
    cairo_font_extents(cv->cr, &fe);
    cairo_restore(cv->cr);
    size_t lines = text_line(text, 0, NULL, 0);
    *line_h = fe.ascent + fe.descent;
    *ascent = fe.ascent;
    *w = dpplot_text_width(cv, text, st->size, st->bold);
    *h = *line_h * (double)lines;
    *x0 = st->halign == DPPLOT_LEFT ? 0.0 : st->halign == DPPLOT_CENTER ? -*w / 2 : -*w;
    *y0 = st->valign == DPPLOT_TOP ? 0.0 : st->valign == DPPLOT_MIDDLE ? -*h / 2 : -*h;
}

const dpplot_box *dpplot_canvas_boxes(const dpplot_canvas *cv, size_t *n) {
    *n = cv->n_boxes;
    return cv->boxes;
}

void dpplot_canvas_place(dpplot_canvas *cv, dpplot_rect r, dpplot_box_kind kind, const char *what) {
    dpplot_canvas_place_rotated(cv, r, kind, 0.0, what);
}

void dpplot_canvas_place_rotated(dpplot_canvas *cv, dpplot_rect r, dpplot_box_kind kind, double angle_deg,
                                 const char *what) {
    if (cv->n_boxes == cv->cap_boxes) {
        size_t cap = cv->cap_boxes ? cv->cap_boxes * 2 : 64;
        dpplot_box *grown = realloc(cv->boxes, cap * sizeof *grown);
        if (!grown) return; /* the record is for checks only: drawing goes on without it */
        cv->boxes = grown, cv->cap_boxes = cap;
    }
    dpplot_box *b = &cv->boxes[cv->n_boxes++];
    b->r = r, b->kind = kind, b->angle_deg = angle_deg;
    snprintf(b->text, sizeof b->text, "%s", what ? what : "");
}

int dpplot_boxes_clash(const dpplot_box *a, const dpplot_box *b) {
    if (a->kind == DPPLOT_BOX_TEXT && b->kind == DPPLOT_BOX_TEXT) return 0;
    if (a->kind != DPPLOT_BOX_TITLE && b->kind != DPPLOT_BOX_TITLE && (a->kind != b->kind)) return 0;
    /* slanted labels side by side have overlapping bounds though their glyphs keep apart */
    if (a->kind == DPPLOT_BOX_TICK && b->kind == DPPLOT_BOX_TICK && fmod(a->angle_deg, 90.0) != 0.0 &&
        a->angle_deg == b->angle_deg)
        return 0;
    /* half a pixel of slack: boxes laid edge to edge round to touching */
    dpplot_rect ra = dpplot_rect_inset(a->r, 0.5, 0.5, 0.5, 0.5), rb = dpplot_rect_inset(b->r, 0.5, 0.5, 0.5, 0.5);
    return dpplot_rect_overlap(ra, rb);
}

void dpplot_text(dpplot_canvas *cv, double x, double y, const char *text, const dpplot_text_style *st) {
    if (!text || !*text) return;
    dpplot_canvas_place_rotated(cv, dpplot_text_bounds(cv, x, y, text, st), (dpplot_box_kind)st->kind, st->angle_deg,
                                text);
    double x0, y0, w, h, ascent, line_h;
    block_geometry(cv, text, st, &x0, &y0, &w, &h, &ascent, &line_h);
    cairo_t *cr = cv->cr;
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (st->angle_deg != 0.0) cairo_rotate(cr, -st->angle_deg * DPPLOT_PI / 180.0);
    select_font(cr, st->size, st->bold);
    dpplot_set_color(cr, st->color, 1.0);
    char buf[512];
    size_t lines = text_line(text, 0, NULL, 0);
    for (size_t i = 0; i < lines; i++) {
        text_line(text, i, buf, sizeof buf);
        double lw = dpplot_text_width(cv, buf, st->size, st->bold);
        double lx = st->halign == DPPLOT_LEFT ? x0 : st->halign == DPPLOT_CENTER ? -lw / 2 : -lw;
        cairo_move_to(cr, lx, y0 + ascent + line_h * (double)i);
        cairo_show_text(cr, buf);
    }
    cairo_restore(cr);
}

dpplot_rect dpplot_text_bounds(dpplot_canvas *cv, double x, double y, const char *text, const dpplot_text_style *st) {
    dpplot_rect r = {x, y, 0, 0};
    if (!text || !*text) return r;
    double x0, y0, w, h, ascent, line_h;
    block_geometry(cv, text, st, &x0, &y0, &w, &h, &ascent, &line_h);
    double a = -st->angle_deg * DPPLOT_PI / 180.0, c = cos(a), s = sin(a);
    double cx[4] = {x0, x0 + w, x0 + w, x0}, cy[4] = {y0, y0, y0 + h, y0 + h};
    double minx = INFINITY, maxx = -INFINITY, miny = INFINITY, maxy = -INFINITY;
    for (int i = 0; i < 4; i++) {
        double px = x + cx[i] * c - cy[i] * s, py = y + cx[i] * s + cy[i] * c;
        minx = fmin(minx, px), maxx = fmax(maxx, px), miny = fmin(miny, py), maxy = fmax(maxy, py);
    }
    r.x = minx, r.y = miny, r.w = maxx - minx, r.h = maxy - miny;
    return r;
}

void dpplot_set_color(cairo_t *cr, dpplot_rgb c, double alpha) { cairo_set_source_rgba(cr, c.r, c.g, c.b, alpha); }

dpplot_rgb dpplot_rgb_hex(unsigned hex) {
    dpplot_rgb c = {((hex >> 16) & 0xff) / 255.0, ((hex >> 8) & 0xff) / 255.0, (hex & 0xff) / 255.0};
    return c;
}

dpplot_rgb dpplot_rgb_mix(dpplot_rgb a, dpplot_rgb b, double t) {
    dpplot_rgb c = {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
    return c;
}

int dpplot_rgb_parse(const char *s, dpplot_rgb *out) {
    if (!s) return -1;
    if (*s == '#') s++;
    if (strlen(s) != 6) return -1;
    unsigned v = 0;
    for (int i = 0; i < 6; i++) {
        char ch = s[i];
        unsigned d;
        if (ch >= '0' && ch <= '9')
            d = (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            d = (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            d = (unsigned)(ch - 'A' + 10);
        else
            return -1;
        v = v * 16 + d;
    }
    *out = dpplot_rgb_hex(v);
    return 0;
}

void dpplot_rgb_format(dpplot_rgb c, char buf[8]) {
    snprintf(buf, 8, "#%02x%02x%02x", (unsigned)lround(c.r * 255) & 0xff, (unsigned)lround(c.g * 255) & 0xff,
             (unsigned)lround(c.b * 255) & 0xff);
}

int dpplot_rect_overlap(dpplot_rect a, dpplot_rect b) {
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

int dpplot_rect_inside(dpplot_rect inner, dpplot_rect outer) {
    return inner.x >= outer.x && inner.y >= outer.y && inner.x + inner.w <= outer.x + outer.w &&
           inner.y + inner.h <= outer.y + outer.h;
}

dpplot_rect dpplot_rect_inset(dpplot_rect r, double left, double top, double right, double bottom) {
    dpplot_rect o = {r.x + left, r.y + top, r.w - left - right, r.h - top - bottom};
    if (o.w < 0) o.w = 0;
    if (o.h < 0) o.h = 0;
    return o;
}
