/* test_util.c: checks, PNG probes and golden-file comparison for the plots tests. */
#include "test_util.h"

#include <cairo.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

int tu_check(int cond, const char *fmt, ...) {
    if (cond) return 1;
    failures++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 0;
}

int tu_failures(void) { return failures; }

int tu_finish(const char *name) {
    if (failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
    else
        printf("%s: all checks passed\n", name);
    return failures ? 1 : 0;
}

struct tu_image {
    cairo_surface_t *s;
    int w, h, stride;
    const unsigned char *data;
};

tu_image *tu_image_load(const char *path) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(s);
        return NULL;
    }
    tu_image *img = calloc(1, sizeof *img);
    if (!img) {
        cairo_surface_destroy(s);
        return NULL;
    }
    cairo_surface_flush(s);
    img->s = s;
    img->w = cairo_image_surface_get_width(s);
    img->h = cairo_image_surface_get_height(s);
    img->stride = cairo_image_surface_get_stride(s);
    img->data = cairo_image_surface_get_data(s);
    return img;
}

void tu_image_free(tu_image *img) {
    if (!img) return;
    cairo_surface_destroy(img->s);
    free(img);
}

int tu_image_width(const tu_image *img) { return img->w; }
int tu_image_height(const tu_image *img) { return img->h; }

/* RGB of pixel (x, y); our PNGs are opaque, so premultiplication does not matter. */
static void pixel(const tu_image *img, int x, int y, int *r, int *g, int *b) {
    unsigned v;
    memcpy(&v, img->data + (size_t)y * (size_t)img->stride + (size_t)x * 4, 4);
    *r = (int)((v >> 16) & 0xff), *g = (int)((v >> 8) & 0xff), *b = (int)(v & 0xff);
}

double tu_image_ink(const tu_image *img, double x0, double y0, double x1, double y1) {
    int ax = (int)(x0 * img->w), bx = (int)(x1 * img->w), ay = (int)(y0 * img->h), by = (int)(y1 * img->h);
    size_t ink = 0, all = 0;
    for (int y = ay; y < by; y++)
        for (int x = ax; x < bx; x++) {
            int r, g, b;
            pixel(img, x, y, &r, &g, &b);
            all++;
            if (r < 200 || g < 200 || b < 200) ink++; /* grid lines and light shading do not count */
        }
    return all ? (double)ink / (double)all : 0.0;
}

size_t tu_image_count_color(const tu_image *img, dpplot_rgb c, int tol) {
    return tu_image_count_color_in(img, c, tol, 0, 0, 1, 1);
}

size_t tu_image_count_color_in(const tu_image *img, dpplot_rgb c, int tol, double x0, double y0, double x1, double y1) {
    int cr = (int)lround(c.r * 255), cg = (int)lround(c.g * 255), cb = (int)lround(c.b * 255);
    size_t n = 0;
    for (int y = (int)(y0 * img->h); y < (int)(y1 * img->h); y++)
        for (int x = (int)(x0 * img->w); x < (int)(x1 * img->w); x++) {
            int r, g, b;
            pixel(img, x, y, &r, &g, &b);
            if (abs(r - cr) <= tol && abs(g - cg) <= tol && abs(b - cb) <= tol) n++;
        }
    return n;
}

int tu_image_diff_columns(const tu_image *a, const tu_image *b, double y0, double y1) {
    if (a->w != b->w || a->h != b->h) return -1;
    int n = 0;
    for (int x = 0; x < a->w; x++) {
        int differs = 0;
        for (int y = (int)(y0 * a->h); y < (int)(y1 * a->h) && !differs; y++) {
            int ra, ga, ba, rb, gb, bb;
            pixel(a, x, y, &ra, &ga, &ba);
            pixel(b, x, y, &rb, &gb, &bb);
            differs = abs(ra - rb) > 2 || abs(ga - gb) > 2 || abs(ba - bb) > 2;
        }
        n += differs;
    }
    return n;
}

void tu_check_chart(const char *path, int width, int height, const char *const *methods, size_t n_methods,
                    size_t min_pixels) {
    tu_image *img = tu_image_load(path);
    if (!tu_check(img != NULL, "%s: cannot load the PNG", path)) return;
    tu_check(tu_image_width(img) == width && tu_image_height(img) == height, "%s: size %dx%d, expected %dx%d", path,
             tu_image_width(img), tu_image_height(img), width, height);
    double ink = tu_image_ink(img, 0.1, 0.2, 0.9, 0.9);
    tu_check(ink > 0.005, "%s: plot area looks blank (%.2f%% ink)", path, ink * 100);
    for (size_t i = 0; i < n_methods; i++) {
        size_t n = tu_image_count_color(img, dpplot_method_color(methods[i]), 2);
        tu_check(n >= min_pixels, "%s: colour of %s appears in %zu pixels, expected >= %zu", path, methods[i], n,
                 min_pixels);
    }
    tu_image_free(img);
}

char *tu_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger, cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

void tu_check_golden(const char *actual, const char *golden) {
    char *a = tu_read_file(actual);
    if (!tu_check(a != NULL, "%s: not written", actual)) return;
    const char *update = getenv("DPPLOT_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(golden, "wb");
        tu_check(f && fwrite(a, 1, strlen(a), f) == strlen(a), "%s: cannot update golden", golden);
        if (f) fclose(f);
        printf("updated %s\n", golden);
        free(a);
        return;
    }
    char *g = tu_read_file(golden);
    if (!tu_check(g != NULL, "%s: golden file missing (run with DPPLOT_UPDATE_GOLDEN=1)", golden)) {
        free(a);
        return;
    }
    if (strcmp(a, g) != 0) {
        int line = 1;
        const char *pa = a, *pg = g;
        while (*pa && *pa == *pg) {
            if (*pa == '\n') line++;
            pa++, pg++;
        }
        const char *la = pa, *lg = pg;
        while (la > a && la[-1] != '\n') la--;
        while (lg > g && lg[-1] != '\n') lg--;
        tu_check(0, "%s differs from %s at line %d:\n  got:      %.*s\n  expected: %.*s", actual, golden, line,
                 (int)strcspn(la, "\n"), la, (int)strcspn(lg, "\n"), lg);
    }
    free(a);
    free(g);
}

int tu_fresh_dir(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    return system(cmd) == 0 ? 0 : -1;
}

int tu_write_plan_point(const char *dir, const char *method, const char *const *keys, const double *values, size_t nk,
                        double peak, double grad_live, double grad_peak, double ms, double card) {
    char name[512], vary[512], path[1200];
    int n = snprintf(name, sizeof name, "method=%s", method);
    int v = snprintf(vary, sizeof vary, "\"method\": \"%s\"", method);
    for (size_t k = 0; k < nk; k++) {
        n += snprintf(name + n, sizeof name - (size_t)n, ",%s=%g", keys[k], values[k]);
        v += snprintf(vary + v, sizeof vary - (size_t)v, ", \"%s\": %g", keys[k], values[k]);
    }
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    double context = 512.0 * 1048576.0, budget = card - context, reserved = peak + floor(peak * 0.0125 + 0.5);
    double params = peak - grad_live;
    fprintf(f,
            "{\"schema_version\": 1, \"experiment\": \"%s\", \"status\": \"ok\", \"method\": \"%s\",\n"
            " \"predicted\": true,\n"
            " \"memory\": {\"peak_bytes\": %.0f, \"warmup_peak_bytes\": %.0f, \"reserved_peak_bytes\": %.0f,"
            " \"end_bytes\": %.0f,\n"
            "  \"categories\": {\"parameters\": {\"current_bytes\": %.0f, \"peak_bytes\": %.0f,"
            " \"live_at_peak_bytes\": %.0f},\n"
            "   \"gradients\": {\"current_bytes\": 0, \"peak_bytes\": %.0f, \"live_at_peak_bytes\": %.0f}}},\n"
            " \"timing\": {\"avg_ms\": %.3f, \"median_ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f,"
            " \"iter_ms\": [%.3f]},\n"
            " \"environment\": {\"device\": \"plan\", \"device_name\": \"plan: tiny model (a test card)\"},\n"
            " \"plan\": {\"device_model\": \"tiny\", \"memory_bytes\": %.0f, \"context_bytes\": %.0f,"
            " \"peak_bytes\": %.0f, \"budget_bytes\": %.0f, \"predicted_reserved_bytes\": %.0f,"
            " \"headroom_bytes\": %.0f, \"fits\": %s, \"reserve_overhead\": 0.0125, \"workspace\": true},\n"
            " \"sweep\": {\"name\": \"plan_sweep\", \"vary\": {%s}}}\n",
            name, method, peak, peak, peak, params, params, params, params, grad_peak, grad_live, ms, ms, ms, ms, ms,
            card, context, peak, budget, reserved, budget - reserved, reserved <= budget ? "true" : "false", vary);
    return fclose(f) == 0 ? 0 : -1;
}
