/* test_render: renders the fixture directories and checks each chart by its properties: the
 * image size (also at scale 2), a plot area that is not blank, and every method's colour. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
    dpplot_series s = {.name = "ghost",
                       .color = dpplot_method_color("ghost"),
                       .x = x,
                       .y = y,
                       .n = 4,
                       .oom = oom,
                       .marker = DPPLOT_MARKER_TRIANGLE};
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
    dpplot_series b = {.name = "x", .color = dpplot_method_color("x"), .x = bad_x, .y = bad_x, .n = 2};
    tu_check(dpplot_chart_lines(cv, &ax, &b, 1) != 0, "log axis over values <= 0 refused");
    dpplot_canvas_free(cv);
    tu_check(dpplot_canvas_new(10, 10, 1.0) == NULL && dpplot_canvas_new(1600, 1000, 0) == NULL &&
                 dpplot_canvas_new(1600, 1000, 100) == NULL,
             "impossible canvases refused");
}

/* Count of pixels of colour c in the chart at out/file (0 when it cannot be read). */
static size_t pixels(const char *out, const char *file, dpplot_rgb c) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out, file);
    tu_image *img = tu_image_load(path);
    if (!img) return 0;
    size_t n = tu_image_count_color(img, c, 2);
    tu_image_free(img);
    return n;
}

/* The issue-17 charts of the single runs: time and bytes by op category, memory by phase, the
 * script's snapshot on the timeline, the kernel table. */
static void test_single_profiles(void) {
    const char *out = DPPLOT_TEST_OUT "/render_single";     /* rendered by test_single */
    chart(out, "op_breakdown.png", 1600, 1000, six, 6, 60); /* category labels carry method swatches */
    for (int c = 0; c < DPPLOT_N_OPCATS; c++) {
        if (c == DPPLOT_OPCAT_NOISE || c == DPPLOT_OPCAT_OPTIMIZER) continue; /* thin slices: legend only */
        if (c == DPPLOT_OPCAT_COMM) continue; /* one-process fixtures run no collective */
        tu_check(pixels(out, "op_breakdown.png", dpplot_op_category_color((dpplot_op_category)c)) > 2000,
                 "op_breakdown shows %s in quantity", dpplot_op_category_name((dpplot_op_category)c));
    }
    chart(out, "operation_level_breakdown.png", 1600, 1000, six, 6, 60); /* panel title swatches */
    dpplot_component comps[] = {DPPLOT_COMP_PARAMETERS, DPPLOT_COMP_OPTIMIZER_STATES, DPPLOT_COMP_ACTIVATIONS,
                                DPPLOT_COMP_OUTPUT_GRADS, DPPLOT_COMP_PER_SAMPLE_GRADS};
    for (size_t i = 0; i < sizeof comps / sizeof comps[0]; i++)
        tu_check(pixels(out, "operation_level_breakdown.png", dpplot_component_color(comps[i])) > 300,
                 "operation_level_breakdown shows %s", dpplot_component_label(comps[i]));
    char path[1024];
    snprintf(path, sizeof path, "%s/summary.txt", out);
    char *txt = tu_read_file(path);
    tu_check(txt && strstr(txt, "KERNEL TABLE") && strstr(txt, "dp_flash_gram_tile"),
             "summary.txt has the kernel table");
    free(txt);
    snprintf(path, sizeof path, "%s/summary.md", out);
    char *md = tu_read_file(path);
    tu_check(md && strstr(md, "### Kernel table: ghost"), "summary.md has a kernel table per method");
    free(md);
}

/* Many-variable sweeps (batch x max_physical_batch_size x lora_rank, one method, 3 runs a point):
 * heatmaps of each metric with the third variable faceted, small multiples with whiskers, a
 * timeline per point. */
static void test_sweep_3d(void) {
    const char *out = DPPLOT_TEST_OUT "/render_sweep_3d";
    render("sweep_3d", out, 1.0);
    static const char *const one[] = {"flash_clip"};
    const char *heatmaps[] = {"memory_heatmap.png", "heatmap_time.png", "heatmap_tokens_per_s.png"};
    for (int i = 0; i < 3; i++) {
        chart(out, heatmaps[i], 1600, 1000, one, 1, 20); /* a title swatch per facet */
        for (double t = 0.0; t <= 1.0; t += 0.5)
            tu_check(pixels(out, heatmaps[i], dpplot_viridis(t)) > 10, "%s shows viridis(%.1f)", heatmaps[i], t);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/heatmap_extra.png", out);
    tu_check(tu_read_file(path) == NULL, "no extra-over-vanilla heatmap without vanilla");
    /* small multiples: one line colour per lora_rank (viridis ends), two panels */
    const char *grids[] = {"sweep_grid_peak.png", "sweep_grid_time.png"};
    for (int i = 0; i < 2; i++) {
        chart(out, grids[i], 1600, 1000, NULL, 0, 0);
        tu_check(pixels(out, grids[i], dpplot_viridis(0.0)) > 300 && pixels(out, grids[i], dpplot_viridis(0.78)) > 300,
                 "%s draws a line per lora_rank", grids[i]);
    }
    chart(out, "memory_timeline_points.png", 1600, 1000, one, 1, 3000);
    /* the standard charts still show one point: --point chooses which */
    dpplot_options opt = dpplot_options_default();
    opt.point = "batch=16,lora_rank=8,max_physical_batch_size=4";
    char err[512], dir[1024];
    snprintf(dir, sizeof dir, "%s/sweep_3d", DPPLOT_FIXTURES);
    const char *picked = DPPLOT_TEST_OUT "/render_sweep_3d_point";
    tu_check(dpplot_render_dir(dir, picked, &opt, err, sizeof err) == 0, "render with --point: %s", err);
    snprintf(path, sizeof path, "%s/memory_breakdown_comparison.png", picked);
    tu_image *img = tu_image_load(path);
    tu_check(img != NULL, "breakdown at the chosen point");
    tu_image_free(img);
}

/* Collects warnings and notes of dpplot_render_dir into a strlist. */
static void collect(void *user, const char *message) { (void)dpplot_strlist_addf(user, "%s", message); }

/* Coinciding series stay visible: flash_clip's peak is vanilla's at every seq_len of sweep_seq,
 * so it is drawn dotted with rings around vanilla's markers, and the chart (and the command line)
 * says "flash_clip = vanilla"; both colours show in the memory panel. */
static void test_coinciding(void) {
    dpplot_strlist said = {0};
    dpplot_options opt = dpplot_options_default();
    opt.warn = collect, opt.warn_user = &said;
    char err[512];
    const char *out = DPPLOT_TEST_OUT "/render_sweep_seq_coincide";
    tu_check(dpplot_render_dir(DPPLOT_FIXTURES "/sweep_seq", out, &opt, err, sizeof err) == 0, "render: %s", err);
    int noted = 0;
    for (size_t i = 0; i < said.n; i++)
        noted |= strstr(said.items[i], "sweep_seq_len.png: flash_clip = vanilla (peak memory)") != NULL;
    tu_check(noted, "the coinciding series are named");
    for (size_t i = 0; i < said.n; i++)
        tu_check(!strstr(said.items[i], "step time)"), "times differ, so no time note: %s", said.items[i]);
    dpplot_strlist_release(&said);
    char path[1024];
    snprintf(path, sizeof path, "%s/sweep_seq_len.png", out);
    tu_image *img = tu_image_load(path);
    if (img) {
        tu_check(tu_image_count_color(img, dpplot_method_color("flash_clip"), 2) > 800 &&
                     tu_image_count_color(img, dpplot_method_color("vanilla"), 2) > 400,
                 "flash_clip and vanilla both show");
        tu_image_free(img);
    }
}

/* Issue 27, defects 1 and 2: a plan sweep over five variables (4 methods x seq_len x batch x
 * max_physical_batch_size x lora_rank, 216 points) had heatmaps with nothing but the colour bar,
 * and said nothing; its points beyond the card looked like the others. The heatmaps must draw
 * cells (ink left of the colour bar), say which values they fixed, and hatch the points that do
 * not fit. */
static void test_plan_many_facets(void) {
    const char *dir = DPPLOT_TEST_OUT "/plan_many_facets", *out = DPPLOT_TEST_OUT "/render_plan_many_facets";
    static const char *const methods[4] = {"vanilla", "ghost", "bk", "flash_clip"};
    static const char *const keys[4] = {"seq_len", "batch", "max_physical_batch_size", "lora_rank"};
    static const double seqs[3] = {128, 256, 512}, batches[3] = {8, 16, 32}, phys[3] = {1, 2, 4}, ranks[2] = {8, 16};
    const double GIB = 1073741824.0, card = 24 * GIB;
    int written = tu_fresh_dir(dir) == 0;
    for (int m = 0; m < 4; m++)
        for (int s = 0; s < 3; s++)
            for (int b = 0; b < 3; b++)
                for (int p = 0; p < 3; p++)
                    for (int r = 0; r < 2; r++) {
                        double v[4] = {seqs[s], batches[b], phys[p], ranks[r]};
                        double peak = 16 * GIB + seqs[s] * batches[b] * 262144.0 * (ranks[r] / 8) * (m + 1) / phys[p];
                        written &= tu_write_plan_point(dir, methods[m], keys, v, 4, peak, m == 2 ? 0 : GIB, GIB,
                                                       10 + seqs[s] * batches[b] / 100.0, card) == 0;
                    }
    if (!tu_check(written, "plan_many_facets: fixture written")) return;
    dpplot_strlist said = {0};
    dpplot_options opt = dpplot_options_default();
    opt.warn = collect, opt.warn_user = &said;
    char err[512];
    int rc = dpplot_render_dir(dir, out, &opt, err, sizeof err);
    tu_check(rc == 0, "render plan_many_facets: rc %d: %s", rc, err);
    const char *charts[2] = {"memory_heatmap.png", "heatmap_time.png"};
    for (int i = 0; i < 2; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", out, charts[i]);
        tu_image *img = tu_image_load(path);
        if (!tu_check(img != NULL, "%s written", charts[i])) continue;
        /* the panels' area (left of the colour bar) is mostly cells, not white */
        double ink = tu_image_ink(img, 0.02, 0.12, 0.82, 0.95);
        tu_check(ink > 0.25, "%s draws cells: %.3f of its panel area inked", charts[i], ink);
        if (i == 0) {
            size_t red = tu_image_count_color(img, dpplot_rgb_hex(0xD0103A), 40);
            tu_check(red > 2000, "%s hatches the points beyond the card (%zu red pixels)", charts[i], red);
        }
        tu_image_free(img);
        int noted = 0;
        for (size_t k = 0; k < said.n; k++)
            noted |= strstr(said.items[k], charts[i]) && strstr(said.items[k], "drawn at ");
        tu_check(noted, "%s: a note says which values it was drawn at", charts[i]);
    }
    /* the card as a red dashed line on the memory axes of the plan run's charts */
    const char *memory_axes[4] = {"performance_tradeoff.png", "sweep_grid_peak.png", "memory_breakdown_comparison.png",
                                  "memory_analysis_overview.png"};
    for (int i = 0; i < 4; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", out, memory_axes[i]);
        tu_image *img = tu_image_load(path);
        if (!tu_check(img != NULL, "%s written", memory_axes[i])) continue;
        size_t red = tu_image_count_color(img, dpplot_rgb_hex(0xD0103A), 40);
        tu_check(red > 300, "%s draws the card's memory (%zu red pixels)", memory_axes[i], red);
        tu_image_free(img);
    }
    /* on a canvas too small for even one panel: no file, and a line saying why */
    dpplot_strlist small = {0};
    opt.warn_user = &small, opt.width = 360, opt.height = 220;
    const char *tiny = DPPLOT_TEST_OUT "/render_plan_many_facets_tiny";
    (void)dpplot_render_dir(dir, tiny, &opt, err, sizeof err);
    char tiny_path[1024];
    snprintf(tiny_path, sizeof tiny_path, "%s/memory_heatmap.png", tiny);
    tu_check(tu_read_file(tiny_path) == NULL, "no empty heatmap written on a tiny canvas");
    int said_why = 0;
    for (size_t k = 0; k < small.n; k++)
        said_why |= strstr(small.items[k], "memory_heatmap.png: skipped, its") && strstr(small.items[k], "do not fit");
    tu_check(said_why, "a line says why the heatmap was skipped");
    dpplot_strlist_release(&small);
    dpplot_strlist_release(&said);
}

/* Issue 27, defect 6: flash_clip 8 KiB above vanilla's 16 GiB peak drew a full-height bar in the
 * "extra over vanilla" panel (its axis rescaled to 8 KiB). The axis keeps the difference in
 * proportion (a sliver, not a bar), and the panel says it is negligible. */
static void test_negligible_extra(void) {
    const char *dir = DPPLOT_TEST_OUT "/negligible_extra", *out = DPPLOT_TEST_OUT "/render_negligible_extra";
    const double GIB = 1073741824.0;
    int ok = tu_fresh_dir(dir) == 0;
    ok &= tu_write_plan_point(dir, "vanilla", NULL, NULL, 0, 16 * GIB, GIB, GIB, 100, 80 * GIB) == 0;
    ok &= tu_write_plan_point(dir, "flash_clip", NULL, NULL, 0, 16 * GIB + 8192, GIB, GIB, 110, 80 * GIB) == 0;
    if (!tu_check(ok, "negligible_extra: fixture written")) return;
    char err[512], path[1024];
    tu_check(dpplot_render_dir(dir, out, NULL, err, sizeof err) == 0, "render negligible_extra: %s", err);
    snprintf(path, sizeof path, "%s/memory_breakdown_comparison.png", out);
    tu_image *img = tu_image_load(path);
    if (!tu_check(img != NULL, "breakdown written")) return;
    /* the parameters' colour in the right panel (x > 0.58): the +8 KiB bar */
    size_t bar = tu_image_count_color_in(img, dpplot_component_color(DPPLOT_COMP_PARAMETERS), 6, 0.58, 0.15, 1, 0.97);
    tu_check(bar < 400, "the +8 KiB bar is a sliver beside 16 GiB, not a full bar (%zu pixels)", bar);
    size_t left = tu_image_count_color_in(img, dpplot_component_color(DPPLOT_COMP_PARAMETERS), 6, 0, 0.15, 0.55, 0.97);
    tu_check(left > 20000, "the peaks themselves are drawn (%zu pixels)", left);
    tu_image_free(img);
}

/* Issue 31: step_peaks.png draws each step's peak (steps[]) of plan runs on samples of their own
 * lengths with Poisson batches, a line per method, with the card; the loader reads every step. */
static void test_steps(void) {
    const char *out = DPPLOT_TEST_OUT "/render_steps";
    static const char *const two[] = {"ghost", "flash_clip"};
    render("steps", out, 1.0);
    chart(out, "step_peaks.png", 1600, 1000, two, 2, 100);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/steps", DPPLOT_FIXTURES);
    dpplot_results rs;
    dpplot_strlist problems = {0};
    tu_check(dpplot_results_load(dir, &rs, &problems) == 0 && problems.n == 0, "steps fixtures load cleanly");
    for (size_t i = 0; i < rs.n; i++) {
        const dpplot_result *r = &rs.items[i];
        tu_check(r->n_steps == 24, "%s: 24 steps read (%zu)", r->file, r->n_steps);
        double lo = INFINITY, hi = 0;
        for (size_t k = 0; k < r->n_steps; k++) {
            tu_check(r->step_index[k] == (double)k, "%s: step %zu's index", r->file, k);
            lo = fmin(lo, r->step_peak_bytes[k]), hi = fmax(hi, r->step_peak_bytes[k]);
        }
        tu_check(hi > lo && lo > 0, "%s: the steps' peaks differ (%g .. %g)", r->file, lo, hi);
        tu_check(hi <= r->peak_bytes, "%s: no step above the run's peak", r->file);
    }
    dpplot_results_release(&rs);
    dpplot_strlist_release(&problems);
    /* a directory without steps: the chart is skipped, not drawn empty */
    const char *single = DPPLOT_TEST_OUT "/render_single";
    char path[1024];
    snprintf(path, sizeof path, "%s/step_peaks.png", single);
    render("single", single, 1.0);
    tu_check(tu_read_file(path) == NULL, "no step_peaks.png without steps");
}

int main(void) {
    test_steps();
    test_negligible_extra();
    test_plan_many_facets();
    test_single();
    test_single_profiles();
    test_sweep_3d();
    test_coinciding();
    test_high_dpi();
    test_sweep_seq();
    test_sweep_2d();
    test_toolkit();
    return tu_finish("test_render");
}
