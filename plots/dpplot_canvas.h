/* dpplot_canvas.h: a cairo image surface with logical pixels, the pinned font and text helpers.
 *
 * Every chart draws in logical pixels (default 1600×1000); the canvas's scale multiplies them into
 * device pixels for high-DPI output, so layout never depends on the scale. Text goes through
 * cairo's toy API with one pinned font ("DejaVu Sans") and no hinting, so PNGs look the same on
 * every machine that has fonts-dejavu-core. */
#ifndef DPPLOT_CANVAS_H
#define DPPLOT_CANVAS_H

#include <cairo.h>
#include <stddef.h>

typedef struct {
    double r, g, b;
} dpplot_rgb; /* components in [0, 1] */
typedef struct {
    double x, y, w, h;
} dpplot_rect; /* logical px, y grows downwards */

typedef enum { DPPLOT_LEFT, DPPLOT_CENTER, DPPLOT_RIGHT } dpplot_halign;
typedef enum { DPPLOT_TOP, DPPLOT_MIDDLE, DPPLOT_BOTTOM } dpplot_valign;

/* How one piece of text is drawn; (x, y) passed with it is the anchor. */
typedef struct {
    double size; /* font size, logical px */
    int bold;    /* 0 or 1 */
    dpplot_rgb color;
    dpplot_halign halign; /* anchor position along the text line */
    dpplot_valign valign; /* anchor position across the text block (all lines) */
    double angle_deg;     /* counter-clockwise rotation about the anchor */
    int kind;             /* dpplot_box_kind the canvas records the text's box as (0: plain text) */
} dpplot_text_style;

/* What a placed text box is, for the layout checks: titles (figure, subtitle, panel and axis
 * titles) may overlap nothing; tick labels no title and no other tick label; plain text (legends,
 * value labels, notes) no title. */
typedef enum { DPPLOT_BOX_TEXT, DPPLOT_BOX_TICK, DPPLOT_BOX_TITLE } dpplot_box_kind;

/* One text box a canvas placed: where (logical px), what kind, and its text (cut at 63 bytes). */
typedef struct {
    dpplot_rect r; /* axis-aligned bounds (of the rotated text when angle != 0) */
    dpplot_box_kind kind;
    double angle_deg;
    char text[64];
} dpplot_box;

/* Receives every text box of a chart once it is complete (`path`: the PNG it goes to); `user`
 * is options.layout_user. For tests that check a layout for collisions. */
typedef void (*dpplot_layout_fn)(void *user, const char *path, const dpplot_box *boxes, size_t n);

/* Font sizes (logical px) shared by every chart, so all of them read alike. */
#define DPPLOT_FONT_TITLE 30.0
#define DPPLOT_FONT_PANEL 23.0
#define DPPLOT_FONT_LABEL 20.0
#define DPPLOT_FONT_TICK 17.0
#define DPPLOT_FONT_LEGEND 18.0
#define DPPLOT_FONT_NOTE 16.0
#define DPPLOT_FONT_FAMILY "DejaVu Sans"

#define DPPLOT_PI 3.14159265358979323846

#define DPPLOT_DEFAULT_WIDTH 1600
#define DPPLOT_DEFAULT_HEIGHT 1000

typedef struct dpplot_canvas dpplot_canvas;

/* New white canvas of width×height logical px rendered at `scale` device px per logical px;
 * the caller owns it (dpplot_canvas_free). NULL when a size is out of range or cairo fails. */
dpplot_canvas *dpplot_canvas_new(int width, int height, double scale);
/* Frees the canvas and its surface; NULL is a no-op. */
void dpplot_canvas_free(dpplot_canvas *cv);
/* The canvas's cairo context (borrowed; logical-px user space, DejaVu Sans selected). */
cairo_t *dpplot_canvas_cr(dpplot_canvas *cv);
/* Logical width of the canvas in px. */
double dpplot_canvas_width(const dpplot_canvas *cv);
/* Logical height of the canvas in px. */
double dpplot_canvas_height(const dpplot_canvas *cv);
/* Writes the canvas as PNG to path (atomically; never through a link, never over a device or
 * FIFO); 0 on success, -1 with the reason in err ("PATH: ...") otherwise. */
int dpplot_canvas_write_png(dpplot_canvas *cv, const char *path, char *err, size_t errlen);

/* Hands every box placed to fn (with user) when the canvas is written as PNG; NULL fn: none. */
void dpplot_canvas_set_layout_hook(dpplot_canvas *cv, dpplot_layout_fn fn, void *user);
/* The text boxes drawn on cv so far, in drawing order (borrowed; *n gets the count). */
const dpplot_box *dpplot_canvas_boxes(const dpplot_canvas *cv, size_t *n);
/* Records a box that is not text (a colour bar, a legend swatch) as placed; ignored when out of memory. */
void dpplot_canvas_place(dpplot_canvas *cv, dpplot_rect r, dpplot_box_kind kind, const char *what);
/* dpplot_canvas_place for a rotated text's bounds. */
void dpplot_canvas_place_rotated(dpplot_canvas *cv, dpplot_rect r, dpplot_box_kind kind, double angle_deg,
                                 const char *what);
/* 1 when a and b may not overlap by the rules of dpplot_box_kind. */
int dpplot_boxes_clash(const dpplot_box *a, const dpplot_box *b);

/* A style with no rotation; convenience for the common case. */
dpplot_text_style dpplot_style(double size, int bold, dpplot_rgb color, dpplot_halign h, dpplot_valign v);
/* Draws text (lines split at '\n') anchored at (x, y); NULL or "" draws nothing. */
void dpplot_text(dpplot_canvas *cv, double x, double y, const char *text, const dpplot_text_style *st);
/* Axis-aligned box dpplot_text would cover with the same arguments (for collision tests). */
dpplot_rect dpplot_text_bounds(dpplot_canvas *cv, double x, double y, const char *text, const dpplot_text_style *st);
/* Fits text into `room` px across: the largest size from `size` down to `min_size` (steps of
 * 1 px) at which it wraps (at spaces, after ", " first) into at most max_lines lines; at
 * min_size, lines still too long are cut with "…". Writes the text with '\n' breaks to out;
 * returns the size chosen. */
double dpplot_text_fit(dpplot_canvas *cv, const char *text, double room, double size, double min_size, int bold,
                       int max_lines, char *out, size_t outlen);
/* Width in logical px of the widest line of text at size/bold. */
double dpplot_text_width(dpplot_canvas *cv, const char *text, double size, int bold);
/* Height in logical px of one text line at size (ascent + descent). */
double dpplot_line_height(dpplot_canvas *cv, double size);

/* Sets cairo's source colour with alpha in [0, 1]. */
void dpplot_set_color(cairo_t *cr, dpplot_rgb c, double alpha);
/* Colour from 0xRRGGBB. */
dpplot_rgb dpplot_rgb_hex(unsigned hex);
/* Linear mix of a and b: t = 0 gives a, t = 1 gives b (used for tints: mix with white). */
dpplot_rgb dpplot_rgb_mix(dpplot_rgb a, dpplot_rgb b, double t);
/* Parses "#rrggbb" (or "rrggbb") into out; 0 on success, -1 when malformed. */
int dpplot_rgb_parse(const char *s, dpplot_rgb *out);
/* Writes "#rrggbb" into buf (at least 8 bytes). */
void dpplot_rgb_format(dpplot_rgb c, char buf[8]);

/* 1 when the two rectangles overlap (touching edges do not count). */
int dpplot_rect_overlap(dpplot_rect a, dpplot_rect b);
/* 1 when inner lies entirely inside outer. */
int dpplot_rect_inside(dpplot_rect inner, dpplot_rect outer);
/* r shrunk by the given margins (px); widths never go below 0. */
dpplot_rect dpplot_rect_inset(dpplot_rect r, double left, double top, double right, double bottom);

#define DPPLOT_WHITE ((dpplot_rgb){1.0, 1.0, 1.0})
#define DPPLOT_BLACK ((dpplot_rgb){0.0, 0.0, 0.0})
#define DPPLOT_INK ((dpplot_rgb){0.13, 0.13, 0.13})   /* text and axes */
#define DPPLOT_MUTED ((dpplot_rgb){0.40, 0.40, 0.40}) /* secondary text */
#define DPPLOT_GRID ((dpplot_rgb){0.88, 0.88, 0.88})  /* light grid lines */

#endif
