/* test_util.h: checks and image probes shared by the plots tests. Images are compared by
 * properties (size, non-blank plot area, palette colours present), never by bytes. */
#ifndef DPPLOT_TEST_UTIL_H
#define DPPLOT_TEST_UTIL_H

#include <stddef.h>

#include "dpplot.h"

/* Records a failure (printing the message) when cond is false; returns cond. */
int tu_check(int cond, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Number of failures recorded so far. */
int tu_failures(void);
/* Prints a summary line and returns the process exit status (0 when no failure). */
int tu_finish(const char *name);

/* A PNG loaded into memory (ARGB32); NULL-safe free. */
typedef struct tu_image tu_image;
tu_image *tu_image_load(const char *path);
void tu_image_free(tu_image *img);
int tu_image_width(const tu_image *img);
int tu_image_height(const tu_image *img);
/* Fraction of pixels in the rectangle (fractions of width/height) that are not near-white. */
double tu_image_ink(const tu_image *img, double x0, double y0, double x1, double y1);
/* Number of pixels within `tol` (0..255 per channel) of colour c. */
size_t tu_image_count_color(const tu_image *img, dpplot_rgb c, int tol);
/* The same within the rectangle (fractions of width/height). */
size_t tu_image_count_color_in(const tu_image *img, dpplot_rgb c, int tol, double x0, double y0, double x1, double y1);

/* Number of pixel columns where a and b differ (by more than 2 in a channel) between rows y0 and
 * y1 (fractions of the height); -1 when their sizes differ. */
int tu_image_diff_columns(const tu_image *a, const tu_image *b, double y0, double y1);

/* Checks a rendered chart: exists, has the expected size, a non-blank plot area, and each of
 * the named methods' colours (at least min_pixels pixels of each). */
void tu_check_chart(const char *path, int width, int height, const char *const *methods, size_t n_methods,
                    size_t min_pixels);

/* Compares file `actual` with `golden`; when DPPLOT_UPDATE_GOLDEN=1 is set, copies actual over
 * golden instead. Prints the first differing line on mismatch. */
void tu_check_golden(const char *actual, const char *golden);
/* Whole file into a new NUL-terminated string (caller frees); NULL when unreadable. */
char *tu_read_file(const char *path);

/* A plan run's result, made up (docs/results.md's fields the reports read): a sweep point of sweep
 * "plan_sweep" named and varied by method and the nk keys/values; peak and gradients in bytes (live
 * at the peak, and their own peak), the step time, and the plan budget of a card of card bytes
 * with a 512 MiB context and 1.25 % reserve overhead (fits when the reserved peak is within it).
 * Written to dir/<point>.json (dir must exist); 0, or -1 when it cannot be written. */
int tu_write_plan_point(const char *dir, const char *method, const char *const *keys, const double *values, size_t nk,
                        double peak, double grad_live, double grad_peak, double ms, double card);
/* Creates dir afresh (removing what it held); 0 or -1. */
int tu_fresh_dir(const char *dir);

#endif
