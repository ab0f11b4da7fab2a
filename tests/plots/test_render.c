/* test_render: renders the fixture directories and checks each chart by its properties: the
 * image size (also at scale 2), a plot area that is not blank, and every method's colour. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

static const char *const six[] = {"vanilla", "flat", "ghost", "mixed_ghost", "bk", "flash_clip"};
static const char *const five[] = {"vanilla", "flat", "ghost", "bk", "flash_clip"};
static const char *const three[] = {"ghost", "bk", "flash_clip"};

static int render(const char *fixture, const char *out, double scale) {
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/%s", DPPLOT_FIXTURES, fixture);
    dpplot_options opt = dpplot_options_default();
    opt.scale = scale;
    int rc = dpplot_render_dir(dir, out, &opt, err, sizeof err);
    tu_check(rc == 0, "render %s: rc %d (%s)", fixture, rc, err);
    return rc;
}

static void chart(const char *out, const char *file, int w, int h, const char *const *methods, size_t n,
                  size_t min_pixels) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out, file);
    tu_check_chart(path, w, h, methods, n, min_pixels);
}

static void test_single(void) {
    const char *out = DPPLOT_TEST_OUT "/render_single";
    render("single", out, 1.0);
    /* bars and swatches: every method's colour in quantity */
    chart(out, "memory_breakdown_comparison.png", 1600, 1000, six, 6, 100);
    chart(out, "memory_timeline.png", 1600, 1000, six, 6, 200);
    chart(out, "performance_tradeoff.png", 1600, 1000, six, 6, 100);
    chart(out, "module_breakdown.png", 1600, 1000, six, 6, 1000);
    /* single runs carry no sweep: no sweep charts */
    char path[1024];
    snprintf(path, sizeof path, "%s/sweep_seq_len.png", out);
    tu_check(tu_read_file(path) == NULL, "single/ has no sweep, yet %s exists", path);
    /* the components have their fixed colours in the breakdown */
    snprintf(path, sizeof path, "%s/memory_breakdown_comparison.png", out);
    tu_image *img = tu_image_load(path);
    if (img) {
        dpplot_component comps[] = {DPPLOT_COMP_PARAMETERS, DPPLOT_COMP_GRADIENTS, DPPLOT_COMP_OPTIMIZER_STATES,
                                    DPPLOT_COMP_ACTIVATIONS, DPPLOT_COMP_PER_SAMPLE_GRADS};
        for (size_t i = 0; i < sizeof comps / sizeof comps[0]; i++)
            tu_check(tu_image_count_color(img, dpplot_component_color(comps[i]), 2) > 500, "breakdown shows %s",
                     dpplot_component_label(comps[i]));
        tu_image_free(img);
    }
}

static void test_high_dpi(void) {
    const char *out = DPPLOT_TEST_OUT "/render_single_x2";
    render("single", out, 2.0);
    chart(out, "memory_breakdown_comparison.png", 3200, 2000, six, 6, 400);
    chart(out, "performance_tradeoff.png", 3200, 2000, six, 6, 400);
}

static void test_sweep_seq(void) {
    const char *out = DPPLOT_TEST_OUT "/render_sweep_seq";
    render("sweep_seq", out, 1.0);
    chart(out, "sweep_seq_len.png", 1600, 1000, five, 5, 150);
    /* OOM points are labelled: the band's red "OOM" text is there */
    char path[1024];
    snprintf(path, sizeof path, "%s/sweep_seq_len.png", out);
    tu_image *img = tu_image_load(path);
    if (img) {
        tu_check(tu_image_count_color(img, dpplot_rgb_hex(0xB00020), 2) > 20, "sweep chart marks OOM");
        tu_image_free(img);
    }
    /* the standard charts use the largest point where every method ran (seq_len 4096) */
    chart(out, "memory_breakdown_comparison.png", 1600, 1000, five, 5, 100);
    chart(out, "performance_tradeoff.png", 1600, 1000, five, 5, 100);
}

static void test_sweep_2d(void) {
    const char *out = DPPLOT_TEST_OUT "/render_sweep_2d";
    render("sweep_2d", out, 1.0);
    char path[1024];
    snprintf(path, sizeof path, "%s/memory_heatmap.png", out);
    tu_check_chart(path, 1600, 1000, three, 3, 100); /* title swatches */
    tu_image *img = tu_image_load(path);
    if (img) {
        /* the colorbar holds the whole viridis range */
        for (double t = 0.0; t <= 1.0; t += 0.25)
            tu_check(tu_image_count_color(img, dpplot_viridis(t), 3) > 10, "heatmap shows viridis(%.2f)", t);
        tu_image_free(img);
    }
}

/* The toolkit on its own: a line chart with an OOM point, drawn through the public API. */
static void test_toolkit(void) {
    dpplot_canvas *cv = dpplot_canvas_new(800, 500, 1.0);
    if (!tu_check(cv != NULL, "canvas")) return;
    double x[] = {256, 512, 1024, 2048}, y[] = {1e9, 2e9, 4e9, NAN};
    unsigned char oom[] = {0, 0, 0, 1};
    dpplot_series s = {"ghost", dpplot_method_color("ghost"), x, y, 4, oom, DPPLOT_MARKER_TRIANGLE, 0, 0, 0, 0};
    dpplot_chart_axes ax = dpplot_chart_axes_default();
    ax.title = "toolkit";
    ax.x_scale = DPPLOT_SCALE_LOG2;
    ax.y_unit = DPPLOT_UNIT_BYTES;
    tu_check(dpplot_chart_lines(cv, &ax, &s, 1) == 0, "line chart draws");
    const char *path = DPPLOT_TEST_OUT "/toolkit_lines.png";
    tu_check(dpplot_canvas_write_png(cv, path, NULL, 0) == 0, "line chart written");
    dpplot_canvas_free(cv);
    const char *one[] = {"ghost"};
    tu_check_chart(path, 800, 500, one, 1, 50);
    /* bad input is refused, not drawn wrong: a log axis over non-positive values */
    cv = dpplot_canvas_new(800, 500, 1.0);
    double bad_x[] = {-1, 0};
    dpplot_series b = {"x", dpplot_method_color("x"), bad_x, bad_x, 2, NULL, 0, 0, 0, 0, 0};
    tu_check(dpplot_chart_lines(cv, &ax, &b, 1) != 0, "log axis over values <= 0 refused");
    dpplot_canvas_free(cv);
    tu_check(dpplot_canvas_new(10, 10, 1.0) == NULL && dpplot_canvas_new(1600, 1000, 0) == NULL &&
                 dpplot_canvas_new(1600, 1000, 100) == NULL,
             "impossible canvases refused");
}

int main(void) {
    test_single();
    test_high_dpi();
    test_sweep_seq();
    test_sweep_2d();
    test_toolkit();
    return tu_finish("test_render");
}
