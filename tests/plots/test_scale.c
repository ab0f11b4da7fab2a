/* test_scale: `dpprof plot` on inputs larger than its charts: directories of 33 to 200 results
 * (the charts' fixed arrays once overflowed at 33), a line series of millions of points (traced
 * per pixel column, its peaks kept), a timeline of hundreds of thousands of points through the
 * whole report, and writes that fail (each names the file and the OS's reason). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpplot_lines.h"
#include "dpplot_panel.h"
#include "test_util.h"

static const char *const fixtures[] = {"vanilla", "flat", "ghost", "mixed_ghost", "bk", "flash_clip"};
#define N_FIXTURES (sizeof fixtures / sizeof fixtures[0])

/* Every warning of a render, one a line. */
static char warnings[1 << 17];
static void collect(void *user, const char *msg) {
    (void)user;
    size_t used = strlen(warnings);
    snprintf(warnings + used, sizeof warnings - used, "%s\n", msg);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* dir emptied of *.json (or made). */
static void fresh_dir(const char *dir) {
    mkdir(dir, 0777);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
}

static int render(const char *dir, const char *out, double scale) {
    dpplot_options opt = dpplot_options_default();
    opt.scale = scale;
    opt.warn = collect;
    warnings[0] = '\0';
    char err[1024];
    return dpplot_render_dir(dir, out, &opt, err, sizeof err);
}

/* The printed line of a chart that had no room for `more` results. */
static void check_no_room(const char *chart, size_t cap, size_t n) {
    char line[256];
    if (n > cap) {
        snprintf(line, sizeof line, "%s: draws at most %zu results; %zu more left out", chart, cap, n - cap);
        tu_check(strstr(warnings, line) != NULL, "%zu results: '%s' printed", n, line);
    } else {
        snprintf(line, sizeof line, "%s: draws at most", chart);
        tu_check(strstr(warnings, line) == NULL, "%zu results: %s has room for all", n, chart);
    }
}

/* n results in one directory (the six single/ fixtures in turn, each usable in every chart):
 * every chart renders, and each chart that draws fewer says how many it left out. */
static void test_many_results(size_t n) {
    char dir[1024], out[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/scale_results_%zu", DPPLOT_TEST_OUT, n);
    snprintf(out, sizeof out, "%s/scale_results_%zu_out", DPPLOT_TEST_OUT, n);
    fresh_dir(dir);
    char *text[N_FIXTURES];
    for (size_t k = 0; k < N_FIXTURES; k++) {
        snprintf(path, sizeof path, "%s/single/%s.json", DPPLOT_FIXTURES, fixtures[k]);
        text[k] = tu_read_file(path);
        tu_check(text[k] != NULL, "read %s", path);
        if (!text[k]) return;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/run%03zu.json", dir, i);
        tu_check(write_text(path, text[i % N_FIXTURES]) == 0, "write %s", path);
    }
    for (size_t k = 0; k < N_FIXTURES; k++) free(text[k]);
    int rc = render(dir, out, 0.5);
    tu_check(rc == 0, "%zu results: rc %d\n%s", n, rc, warnings);
    static const char *const charts[] = {"memory_breakdown_comparison.png",
                                         "memory_timeline.png",
                                         "performance_tradeoff.png",
                                         "module_breakdown.png",
                                         "op_breakdown.png",
                                         "operation_level_breakdown.png"};
    for (size_t c = 0; c < sizeof charts / sizeof charts[0]; c++) {
        snprintf(path, sizeof path, "%s/%s", out, charts[c]);
        tu_image *img = tu_image_load(path);
        tu_check(img != NULL, "%zu results: %s written", n, charts[c]);
        tu_image_free(img);
    }
    check_no_room("module_breakdown.png", 32, n);
    check_no_room("op_breakdown.png", 32, n);
    check_no_room("memory_breakdown_comparison.png", 64, n);
    check_no_room("performance_tradeoff.png", 128, n);
    check_no_room("memory_timeline.png", 12, n);
    check_no_room("operation_level_breakdown.png", 12, n);
}

/* Whether the canvas pixel at (x, y) (user units, scale 1) is far from white. */
static int inked(dpplot_canvas *cv, double x, double y) {
    cairo_surface_t *s = cairo_get_target(dpplot_canvas_cr(cv));
    cairo_surface_flush(s);
    const unsigned char *data = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s), ix = (int)x, iy = (int)y;
    if (ix < 0 || iy < 0 || ix >= cairo_image_surface_get_width(s) || iy >= cairo_image_surface_get_height(s)) return 0;
    const unsigned char *p = data + (size_t)iy * (size_t)stride + 4 * (size_t)ix;
    return p[0] < 200 || p[1] < 200 || p[2] < 200;
}

/* Whether any pixel of column x between the values lo and hi is inked. */
static int column_inked(dpplot_canvas *cv, const dpplot_panel *p, double x, double lo, double hi) {
    double px = dpplot_panel_px(p, x);
    for (double y = dpplot_panel_py(p, hi); y <= dpplot_panel_py(p, lo); y += 1.0)
        for (int d = -1; d <= 1; d++)
            if (inked(cv, px + d, y)) return 1;
    return 0;
}

/* A series of n noisy points (values 1..2) with one spike to 10 and one dip to 0.1, drawn as a
 * line and as a filled step line, and with its x shuffled: the spike and the dip show at their
 * columns and nothing reaches their heights elsewhere. 4,000,000 points drew for many minutes before the series were
 * traced per pixel column (ctest's TIMEOUT fails it then). */
static void test_long_series(void) {
    const size_t n = 4000000, spike = n / 3, dip = 2 * n / 3;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    tu_check(x && y, "memory for %zu points", n);
    if (!x || !y) return;
    unsigned long long state = 12345;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (double)i;
        y[i] = 1.0 + (double)(state >> 11) / 9007199254740992.0;
    }
    y[spike] = 10.0, y[dip] = 0.1;
    for (int step = 0; step < 2; step++) {
        dpplot_canvas *cv = dpplot_canvas_new(900, 600, 1.0);
        tu_check(cv != NULL, "canvas");
        if (!cv) break;
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.x_min = 0, s.x_max = (double)n, s.y_min = 0, s.y_max = 12;
        tu_check(dpplot_panel_begin(&p, cv, (dpplot_rect){0, 0, 900, 600}, &s) == 0, "panel");
        dpplot_series line = {.name = "noise",
                              .color = dpplot_rgb_hex(0x0072B2),
                              .x = x,
                              .y = y,
                              .n = n,
                              .step = step,
                              .line_width = 1.5,
                              .fill_alpha = step ? 0.15 : 0.0};
        dpplot_lines_draw(&p, &line, 1);
        tu_check(column_inked(cv, &p, (double)spike, 4.0, 9.0), "step %d: the spike at %zu is drawn", step, spike);
        tu_check(!column_inked(cv, &p, (double)n / 2, 4.0, 9.0), "step %d: nothing else reaches 4..9", step);
        if (!step) { /* under a fill the dip's column is shaded anyway: the line alone shows it */
            tu_check(column_inked(cv, &p, (double)dip, 0.2, 0.6), "the dip at %zu is drawn", dip);
            tu_check(!column_inked(cv, &p, (double)n / 2, 0.2, 0.6), "nothing else dips to 0.2..0.6");
        }
        dpplot_panel_end(&p);
        dpplot_canvas_free(cv);
    }
    /* x back and forth (a damaged file): drawn as its envelope per column, the spike still shown */
    for (size_t i = 0; i < n; i++) x[i] = (double)((i * 7919) % n);
    dpplot_canvas *cv = dpplot_canvas_new(900, 600, 1.0);
    tu_check(cv != NULL, "canvas");
    if (cv) {
        dpplot_panel p;
        dpplot_panel_spec s = {0};
        s.x_min = 0, s.x_max = (double)n, s.y_min = 0, s.y_max = 12;
        tu_check(dpplot_panel_begin(&p, cv, (dpplot_rect){0, 0, 900, 600}, &s) == 0, "panel");
        dpplot_series line = {
            .name = "shuffled", .color = dpplot_rgb_hex(0x0072B2), .x = x, .y = y, .n = n, .line_width = 1.5};
        dpplot_lines_draw(&p, &line, 1);
        double at = x[spike];
        tu_check(column_inked(cv, &p, at, 4.0, 9.0), "shuffled: the spike at x=%.0f is drawn", at);
        double away = fmod(at + (double)n / 2, (double)n);
        tu_check(!column_inked(cv, &p, away, 4.0, 9.0), "shuffled: nothing at x=%.0f reaches 4..9", away);
        dpplot_panel_end(&p);
        dpplot_canvas_free(cv);
    }
    free(x), free(y);
}

/* A result whose timeline has n points (noisy, one spike) through the whole `dpprof plot`. */
static void test_long_timeline(size_t n) {
    char dir[1024], out[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/scale_timeline", DPPLOT_TEST_OUT);
    snprintf(out, sizeof out, "%s/scale_timeline_out", DPPLOT_TEST_OUT);
    fresh_dir(dir);
    snprintf(path, sizeof path, "%s/single/vanilla.json", DPPLOT_FIXTURES);
    char *text = tu_read_file(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *tl = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "memory"), "timeline");
    tu_check(tl != NULL, "vanilla.json has memory.timeline");
    if (!tl) {
        cJSON_Delete(root);
        return;
    }
    double *t = malloc(n * sizeof *t), *a = malloc(n * sizeof *a), *r = malloc(n * sizeof *r);
    unsigned long long state = 99;
    for (size_t i = 0; t && a && r && i < n; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = (double)i * 0.01;
        a[i] = 1e9 + (double)(state >> 34) * 1e-1;
        r[i] = a[i] + 5e8;
    }
    if (t && a && r) {
        a[n / 3] = 9e9;
        cJSON_ReplaceItemInObject(tl, "t_ms", cJSON_CreateDoubleArray(t, (int)n));
        cJSON_ReplaceItemInObject(tl, "allocated_bytes", cJSON_CreateDoubleArray(a, (int)n));
        cJSON_ReplaceItemInObject(tl, "reserved_bytes", cJSON_CreateDoubleArray(r, (int)n));
        char *json = cJSON_PrintUnformatted(root);
        snprintf(path, sizeof path, "%s/vanilla.json", dir);
        tu_check(json && write_text(path, json) == 0, "write %s", path);
        cJSON_free(json);
        int rc = render(dir, out, 1.0);
        tu_check(rc == 0, "%zu-point timeline: rc %d\n%s", n, rc, warnings);
        snprintf(path, sizeof path, "%s/memory_timeline.png", out);
        const char *const methods[] = {"vanilla"};
        tu_check_chart(path, 1600, 1000, methods, 1, 200);
    }
    free(t), free(a), free(r);
    cJSON_Delete(root);
}

/* Writes that fail name the file and the reason: a file size limit (what a full disk does to a
 * write, with EFBIG for ENOSPC) and an output directory that cannot be made. */
static void test_failed_writes(void) {
    char dir[1024], out[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/single", DPPLOT_FIXTURES);
    snprintf(out, sizeof out, "%s/scale_full", DPPLOT_TEST_OUT);
    struct rlimit old, low;
    tu_check(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
    low = old;
    low.rlim_cur = 2048; /* every chart's PNG is larger; the summaries' first buffer fits */
    signal(SIGXFSZ, SIG_IGN);
    tu_check(setrlimit(RLIMIT_FSIZE, &low) == 0, "setrlimit");
    int rc = render(dir, out, 1.0);
    setrlimit(RLIMIT_FSIZE, &old);
    tu_check(rc == 1, "over the size limit: rc %d (1 expected)", rc);
    const char *reason = strerror(EFBIG);
    static const char *const files[] = {"memory_breakdown_comparison.png", "memory_timeline.png", "summary.txt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s: cannot write", out, files[i]);
        const char *line = strstr(warnings, path);
        const char *end = line ? strchr(line, '\n') : NULL;
        tu_check(line && end && strstr(line, reason) && strstr(line, reason) < end,
                 "%s's failure names the reason '%s':\n%s", files[i], reason, warnings);
    }
    /* an output directory under a regular file */
    snprintf(path, sizeof path, "%s/scale_a_file", DPPLOT_TEST_OUT);
    write_text(path, "x");
    snprintf(out, sizeof out, "%s/scale_a_file/charts", DPPLOT_TEST_OUT);
    rc = render(dir, out, 1.0);
    snprintf(path, sizeof path, "%s: cannot create output directory: %s", out, strerror(ENOTDIR));
    tu_check(rc == -1 && strstr(warnings, path), "under a file: rc %d, '%s' in:\n%s", rc, path, warnings);
}

/* One sweep point: the sweep_seq/ghost_seq1024.json fixture as point (method, seq_len) of sweep
 * `name`, written to dir. */
static void write_point(const char *dir, const char *base_text, const char *name, const char *method, int seq_len) {
    cJSON *root = cJSON_Parse(base_text);
    cJSON *sweep = cJSON_GetObjectItem(root, "sweep"), *vary = cJSON_GetObjectItem(sweep, "vary");
    char experiment[160], path[2048];
    snprintf(experiment, sizeof experiment, "%s_%s_seq%d", name, method, seq_len);
    cJSON_ReplaceItemInObject(sweep, "name", cJSON_CreateString(name));
    cJSON_ReplaceItemInObject(vary, "method", cJSON_CreateString(method));
    cJSON_ReplaceItemInObject(vary, "seq_len", cJSON_CreateNumber(seq_len));
    cJSON_ReplaceItemInObject(root, "method", cJSON_CreateString(method));
    cJSON_ReplaceItemInObject(root, "experiment", cJSON_CreateString(experiment));
    char *json = cJSON_PrintUnformatted(root);
    snprintf(path, sizeof path, "%s/%s.json", dir, experiment);
    tu_check(json && write_text(path, json) == 0, "write %s", path);
    cJSON_free(json);
    cJSON_Delete(root);
}

/* Sweeps past the sweep charts' limits: 70 values of seq_len (64 drawn) and 17 methods (16 drawn)
 * in one directory, 35 sweeps (32 drawn) in another: each limit is named in a printed line. */
static void test_big_sweeps(void) {
    char path[2048];
    snprintf(path, sizeof path, "%s/sweep_seq/ghost_seq1024.json", DPPLOT_FIXTURES);
    char *base = tu_read_file(path);
    tu_check(base != NULL, "read %s", path);
    if (!base) return;
    for (int d = 0; d < 2; d++) {
        char dir[1024], out[1024];
        snprintf(dir, sizeof dir, "%s/scale_sweeps%d", DPPLOT_TEST_OUT, d);
        snprintf(out, sizeof out, "%s/scale_sweeps%d_out", DPPLOT_TEST_OUT, d);
        fresh_dir(dir);
        if (d == 0) {
            for (int i = 0; i < 70; i++) write_point(dir, base, "wide", "ghost", 100 + i);
            char method[32];
            for (int m = 0; m < 17; m++) {
                snprintf(method, sizeof method, "m%02d", m);
                write_point(dir, base, "methods", method, 1024);
                write_point(dir, base, "methods", method, 2048);
            }
        } else {
            char name[32];
            for (int k = 0; k < 35; k++) {
                snprintf(name, sizeof name, "s%02d", k);
                write_point(dir, base, name, "ghost", 1024);
                write_point(dir, base, name, "ghost", 2048);
            }
        }
        int rc = render(dir, out, 0.25);
        tu_check(rc == 0, "big sweeps %d: rc %d", d, rc);
        static const char *const lines[2][2] = {
            {"sweep 'wide' has 70 values of 'seq_len'; its charts draw 64, the points at the other 6 are left out",
             "sweep 'methods' has 17 methods; its charts draw the first 16, 1 are left out"},
            {"the directory holds 35 sweeps; the charts of 3 more are not drawn", NULL}};
        for (size_t i = 0; i < 2 && lines[d][i]; i++)
            tu_check(strstr(warnings, lines[d][i]) != NULL, "printed: '%s' in:\n%.2000s", lines[d][i], warnings);
    }
    free(base);
}

int main(void) {
    static const size_t counts[] = {33, 65, 129, 200};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) test_many_results(counts[i]);
    test_long_series();
    test_long_timeline(300000);
    test_failed_writes();
    test_big_sweeps();
    return tu_finish("test_scale");
}
