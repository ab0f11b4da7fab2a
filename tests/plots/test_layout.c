/* test_layout: every chart `dpprof plot` draws, for sweeps over 1, 2, 3, 4 and 5 variables, with
 * no title or label box overlapping another (the rules of dpplot_box_kind) and every box on the
 * canvas. The sweeps are built here from the single/ fixture files (four methods, values of two
 * each), so a new chart kind or a longer title is checked without new fixtures. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dpplot_bars.h"
#include "dpplot_lines.h"
#include "test_util.h"

typedef struct {
    const char *key;
    double value[2];
} swept_key;

/* Long and short names both: a sweep's key names end up in panel titles. */
static const swept_key keys[5] = {{"seq_len", {256, 1024}},
                                  {"batch", {4, 16}},
                                  {"lora_rank", {8, 16}},
                                  {"max_physical_batch_size", {2, 4}},
                                  {"layers", {6, 12}}};
static const char *const methods[] = {"vanilla", "ghost", "bk", "flash_clip"};

#define MAX_CHARTS 32

typedef struct {
    int charts; /* charts the hook saw */
    char seen[4096];
    char file[MAX_CHARTS][64];
    char *texts[MAX_CHARTS]; /* every text of the chart, one per line */
} layout_log;

/* The texts drawn on chart `file` ("" when it was not drawn). */
static const char *texts_of(const layout_log *log, const char *file) {
    for (int i = 0; i < log->charts && i < MAX_CHARTS; i++)
        if (strcmp(log->file[i], file) == 0 && log->texts[i]) return log->texts[i];
    return "";
}

static void check_layout(void *user, const char *path, const dpplot_box *boxes, size_t n) {
    layout_log *log = user;
    const char *file = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (log->charts < MAX_CHARTS) {
        snprintf(log->file[log->charts], sizeof log->file[0], "%s", file);
        log->texts[log->charts] = calloc(n * 65 + 1, 1);
        for (size_t i = 0; i < n && log->texts[log->charts]; i++) {
            strcat(log->texts[log->charts], boxes[i].text);
            strcat(log->texts[log->charts], "\n");
        }
    }
    log->charts++;
    size_t used = strlen(log->seen);
    snprintf(log->seen + used, sizeof log->seen - used, "%s ", file);
    tu_check(n > 0, "%s: no text boxes recorded", file);
    size_t ticks = 0;
    for (size_t i = 0; i < n; i++) ticks += boxes[i].kind == DPPLOT_BOX_TICK;
    /* a chart whose panels did not fit comes out as a title over white: it has no axes (heatmaps
     * included: their rows and columns are tick labels, so a blank one has none) */
    tu_check(ticks >= 4, "%s (%s): only %zu tick labels: were its panels drawn?", file, path, ticks);
    int clashes = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_rect r = boxes[i].r;
        tu_check(r.x >= -0.5 && r.y >= -0.5 && r.x + r.w <= 1600.5 && r.y + r.h <= 1000.5,
                 "%s: '%s' (%.0f,%.0f %.0fx%.0f) leaves the canvas", file, boxes[i].text, r.x, r.y, r.w, r.h);
        /* timelines: labels inside the plots (peaks, snapshot marks) keep apart too */
        int all_text = strncmp(file, "memory_timeline", 15) == 0;
        for (size_t j = i + 1; j < n && clashes < 8; j++)
            if (dpplot_boxes_clash(&boxes[i], &boxes[j]) ||
                (all_text && dpplot_rect_overlap(dpplot_rect_inset(boxes[i].r, 0.5, 0.5, 0.5, 0.5),
                                                 dpplot_rect_inset(boxes[j].r, 0.5, 0.5, 0.5, 0.5))))
                clashes++, tu_check(0, "%s: '%s' (%.0f,%.0f %.0fx%.0f) overlaps '%s' (%.0f,%.0f %.0fx%.0f)", file,
                                    boxes[i].text, r.x, r.y, r.w, r.h, boxes[j].text, boxes[j].r.x, boxes[j].r.y,
                                    boxes[j].r.w, boxes[j].r.h);
    }
}

static cJSON *load_json(const char *path) {
    char *text = tu_read_file(path);
    if (!text) return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Writes a sweep over the first nk keys (every combination, every method) into dir. */
static int make_sweep(const char *dir, size_t nk, int plan) { /* dir: at most ~1000 bytes */
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/single/%s.json", DPPLOT_FIXTURES, methods[m]);
        cJSON *tmpl = load_json(path);
        if (!tmpl) return -1;
        for (unsigned combo = 0; combo < (1u << nk); combo++) {
            cJSON *r = cJSON_Duplicate(tmpl, 1);
            cJSON *sweep = cJSON_CreateObject(), *vary = cJSON_CreateObject();
            cJSON_AddStringToObject(sweep, "name", "layout");
            cJSON_AddStringToObject(vary, "method", methods[m]);
            char name[512];
            int len = snprintf(name, sizeof name, "%s", methods[m]);
            for (size_t k = 0; k < nk; k++) {
                double v = keys[k].value[(combo >> k) & 1];
                cJSON_AddNumberToObject(vary, keys[k].key, v);
                len += snprintf(name + len, sizeof name - (size_t)len, "_%s%g", keys[k].key, v);
            }
            cJSON_AddItemToObject(sweep, "vary", vary);
            cJSON_DeleteItemFromObject(r, "sweep");
            cJSON_AddItemToObject(r, "sweep", sweep);
            cJSON_ReplaceItemInObject(r, "experiment", cJSON_CreateString(name));
            cJSON_DeleteItemFromObject(r, "predicted");
            cJSON_AddBoolToObject(r, "predicted", plan);
            if (plan) { /* a card well above the peaks: every memory axis notes it ("above the axis") */
                cJSON *card = cJSON_AddObjectToObject(r, "plan");
                cJSON_AddStringToObject(card, "device_model", "tiny");
                cJSON_AddNumberToObject(card, "memory_bytes", 40.0 * 1073741824.0);
                cJSON_AddBoolToObject(card, "fits", 1);
            }
            char *text = cJSON_Print(r);
            snprintf(path, sizeof path, "%s/%s.json", dir, name);
            int rc = text ? write_text(path, text) : -1;
            free(text);
            cJSON_Delete(r);
            if (rc != 0) {
                cJSON_Delete(tmpl);
                return -1;
            }
        }
        cJSON_Delete(tmpl);
    }
    return 0;
}

/* What the charts say besides their layout. The generated points repeat their method's file, so
 * the swept values change nothing: every batch line coincides with the others. Even sizes are
 * plan runs (one estimated number per point, no spread); odd sizes measured (iterations vary). */
static void check_contents(const layout_log *log, size_t nk, int plan) {
    const char *tradeoff = texts_of(log, "performance_tradeoff.png");
    /* vanilla and flash_clip peak at the same 5.84 GiB, ghost and bk above: the memory axis spans
     * the points rather than 0..9 GiB, and says so */
    tu_check(strstr(tradeoff, "not from zero") != NULL, "%zu: trade-off memory axis zoomed and labelled", nk);
    tu_check(strstr(tradeoff, "min-max") == NULL || !plan, "%zu: a plan run's trade-off claims no min-max", nk);
    tu_check(!plan || strstr(tradeoff, "estimated") != NULL, "%zu: a plan run's time is said to be estimated", nk);
    if (nk >= 3) {
        const char *grid = texts_of(log, "sweep_grid_peak.png");
        tu_check(strstr(grid, "batch=4,16") && strstr(grid, "coincide"),
                 "%zu: the grid says its batch lines coincide (texts: %.300s)", nk, grid);
        const char *grid_time = texts_of(log, "sweep_grid_time.png");
        tu_check((strstr(grid_time, "whiskers") != NULL) == !plan, "%zu: the whiskers entry %s", nk,
                 plan ? "is dropped for plan runs" : "is kept for measured runs");
    }
    /* a plan run's memory axes note its card (40 GiB, above these axes) */
    static const char *const memory_axes[] = {"memory_breakdown_comparison.png", "memory_analysis_overview.png",
                                              "operation_level_breakdown.png", "memory_timeline.png",
                                              "performance_tradeoff.png"};
    for (size_t i = 0; plan && i < sizeof memory_axes / sizeof memory_axes[0]; i++)
        tu_check(strstr(texts_of(log, memory_axes[i]), "card 40 GiB") != NULL, "%zu: %s notes the card", nk,
                 memory_axes[i]);
    if (nk >= 2) /* the colour bar names its scale */
        tu_check(strstr(texts_of(log, "memory_heatmap.png"), "colour scale") != NULL, "%zu: heatmap scale named", nk);
    if (nk == 1) { /* seq_len 256, 1024 on a log2 axis: ticks at the swept values */
        const char *sweep = texts_of(log, "sweep_seq_len.png");
        tu_check((strstr(sweep, "whiskers") != NULL) == !plan, "the sweep's whiskers entry %s",
                 plan ? "is dropped for plan runs" : "is kept for measured runs");
        tu_check(strstr(sweep, "\n256\n") && strstr(sweep, "\n1024\n"), "sweep ticks at 256 and 1024");
    }
}

static void test_sweep(size_t nk, int plan) {
    char base[900], results[1024], out[1024], err[512];
    snprintf(base, sizeof base, "%s/layout_%zu%s", DPPLOT_TEST_OUT, nk, plan ? "_plan" : "");
    snprintf(results, sizeof results, "%s/results", base);
    snprintf(out, sizeof out, "%s/charts", base);
    if (mkdir(base, 0777) != 0 && errno != EEXIST) {
        tu_check(0, "cannot create %s", base);
        return;
    }
    if (!tu_check(make_sweep(results, nk, plan) == 0, "cannot write the %zu-variable sweep under %s", nk, results))
        return;
    layout_log log = {0};
    dpplot_options opt = dpplot_options_default();
    opt.layout = check_layout, opt.layout_user = &log;
    int rc = dpplot_render_dir(results, out, &opt, err, sizeof err);
    tu_check(rc == 0, "%zu variables: render rc %d (%s)", nk, rc, err);
    /* the charts each sweep size must produce, so a chart that stops drawing cannot pass */
    const char *expect[] = {"memory_breakdown_comparison.png",
                            "memory_timeline.png",
                            "performance_tradeoff.png",
                            "memory_analysis_overview.png",
                            nk == 1 ? "sweep_seq_len.png" : "memory_heatmap.png",
                            nk >= 3 ? "sweep_grid_peak.png" : "memory_timeline_points.png",
                            "memory_timeline_points.png"};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        tu_check(strstr(log.seen, expect[i]) != NULL, "%zu variables: %s was not drawn (drawn: %s)", nk, expect[i],
                 log.seen);
    printf("%zu variables: %d charts checked: %s\n", nk, log.charts, log.seen);
    check_contents(&log, nk, plan);
    for (int i = 0; i < log.charts && i < MAX_CHARTS; i++) free(log.texts[i]);
}

/* The checker itself: two titles that overlap are caught, neighbours are not. */
static void test_clash_rules(void) {
    dpplot_box a = {{0, 0, 100, 20}, DPPLOT_BOX_TITLE, 0, "a"}, b = {{90, 10, 100, 20}, DPPLOT_BOX_TITLE, 0, "b"};
    dpplot_box c = {{100, 0, 100, 20}, DPPLOT_BOX_TITLE, 0, "c"}, t = {{50, 5, 10, 10}, DPPLOT_BOX_TEXT, 0, "t"};
    dpplot_box u = {{52, 5, 10, 10}, DPPLOT_BOX_TEXT, 0, "u"}, k = {{52, 5, 10, 10}, DPPLOT_BOX_TICK, 0, "k"};
    tu_check(dpplot_boxes_clash(&a, &b), "overlapping titles clash");
    tu_check(!dpplot_boxes_clash(&a, &c), "titles edge to edge do not clash");
    tu_check(dpplot_boxes_clash(&a, &t), "text under a title clashes");
    tu_check(!dpplot_boxes_clash(&t, &u), "plain texts are not compared");
    tu_check(!dpplot_boxes_clash(&t, &k), "a tick label and plain text are not compared");
}

/* Panel titles wrap rather than run into the neighbour's: a long title in a narrow panel. */
/* Every chart's subtitle and the summaries name the configuration that was not swept (issue
 * 38.4): the checkpoint's name, LoRA's rank and targets, the optimizer and a distributed run's
 * strategy; a full fine-tuning run says so. Two runs of single/ made a LoRA run of a checkpoint
 * under fsdp with SGD. */
static void test_fixed_config(void) {
    const char *dir = DPPLOT_TEST_OUT "/fixed_config", *out = DPPLOT_TEST_OUT "/fixed_config_charts";
    int ok = tu_fresh_dir(dir) == 0;
    static const char *const names[2] = {"vanilla.json", "ghost.json"};
    for (int i = 0; i < 2 && ok; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", DPPLOT_FIXTURES "/single", names[i]);
        char *text = tu_read_file(path);
        cJSON *r = text ? cJSON_Parse(text) : NULL;
        free(text);
        cJSON *model = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "config"), "model");
        cJSON *opt = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "config"), "optimizer");
        if (!model || !opt) {
            ok = 0;
            cJSON_Delete(r);
            break;
        }
        cJSON_DeleteItemFromObject(model, "lora");
        cJSON *lora = cJSON_AddObjectToObject(model, "lora");
        cJSON_AddNumberToObject(lora, "rank", 16);
        cJSON *targets = cJSON_AddArrayToObject(lora, "targets");
        cJSON_AddItemToArray(targets, cJSON_CreateString("q_proj"));
        cJSON_AddItemToArray(targets, cJSON_CreateString("v_proj"));
        cJSON_AddStringToObject(model, "path", "/models/Llama-3.1-8B/");
        cJSON_ReplaceItemInObject(opt, "name", cJSON_CreateString("sgd"));
        cJSON *dist = cJSON_AddObjectToObject(r, "distributed");
        cJSON_AddStringToObject(dist, "strategy", "fsdp");
        cJSON_AddNumberToObject(dist, "world_size", 8);
        cJSON_AddNumberToObject(dist, "rank", 0);
        char *printed = cJSON_Print(r);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = printed ? fopen(path, "w") : NULL;
        ok = f && fputs(printed, f) >= 0;
        if (f) ok &= fclose(f) == 0;
        free(printed);
        cJSON_Delete(r);
    }
    if (!tu_check(ok, "fixed_config: fixtures written")) return;
    layout_log log = {0};
    dpplot_options o = dpplot_options_default();
    o.layout = check_layout, o.layout_user = &log;
    char err[512];
    tu_check(dpplot_render_dir(dir, out, &o, err, sizeof err) == 0, "fixed_config: render: %s", err);
    static const char *const charts[] = {"memory_breakdown_comparison.png", "memory_timeline.png",
                                         "performance_tradeoff.png", "memory_analysis_overview.png"};
    static const char *const want[] = {"Llama-3.1-8B", "LoRA rank 16 on q_proj,v_proj", "sgd",
                                       "fsdp over 8 ranks (rank 0's memory)"};
    /* a layout box keeps a text's first 63 bytes: the subtitle starts with the checkpoint's name;
     * the rest of it is the line summary.txt has (one function, dpplot_report_fixed_config) */
    for (size_t c = 0; c < sizeof charts / sizeof *charts; c++)
        tu_check(strstr(texts_of(&log, charts[c]), "\nLlama-3.1-8B  ·  12 layers") != NULL,
                 "fixed_config: %s's subtitle starts with the checkpoint's name", charts[c]);
    char path[1024];
    snprintf(path, sizeof path, "%s/summary.txt", out);
    char *txt = tu_read_file(path);
    const char *line = txt ? strstr(txt, "Configuration (every run): Llama-3.1-8B") : NULL;
    for (size_t w = 0; w < sizeof want / sizeof *want; w++)
        tu_check(line && strstr(line, want[w]) && strstr(line, want[w]) < strchr(line, '\n'),
                 "fixed_config: summary.txt's configuration line names '%s'", want[w]);
    free(txt);
    snprintf(path, sizeof path, "%s/summary.md", out);
    char *md = tu_read_file(path);
    tu_check(md && strstr(md, "Configuration (every run): Llama-3.1-8B"), "fixed_config: summary.md names it");
    free(md);
    for (int i = 0; i < log.charts && i < MAX_CHARTS; i++) free(log.texts[i]);
    /* the fixtures as they are: full fine-tuning with AdamW, said */
    char *single = tu_read_file(DPPLOT_TEST_OUT "/layout_single/summary.txt");
    tu_check(single && strstr(single, "full fine-tuning  ·  adamw"), "single/: full fine-tuning and adamw named");
    free(single);
}

/* A legacy file whose breakdown alone gives the components: its norm_samples_mb holds the
 * per-sample gradients too, so the charts' legends name the segment "Norm samples + per-sample
 * grads", as summary.txt does; a file with the categories keeps "Norm samples" (issue 38.4). */
static void test_legacy_norm_label(void) {
    const char *dir = DPPLOT_TEST_OUT "/legacy_label", *out = DPPLOT_TEST_OUT "/legacy_label_out";
    char path[1024];
    int ok = tu_fresh_dir(dir) == 0;
    snprintf(path, sizeof path, "%s/legacy.json", dir);
    FILE *f = ok ? fopen(path, "w") : NULL;
    ok = f && fputs("{\"experiment\": \"flat_legacy\", \"avg_time_ms\": 100.5, \"peak_memory_mb\": 1000,"
                    " \"breakdown\": {\"model_parameters_mb\": 100, \"optimizer_states_mb\": 200,"
                    " \"gradients_mb\": 100, \"activation_hooks_mb\": 300, \"norm_samples_mb\": 250,"
                    " \"temp_matrices_mb\": 10, \"peak_allocated_mb\": 1000}}",
                    f) >= 0;
    if (f) ok &= fclose(f) == 0;
    if (!tu_check(ok, "legacy_label: fixture written")) return;
    layout_log log = {0};
    dpplot_options o = dpplot_options_default();
    o.layout = check_layout, o.layout_user = &log;
    char err[512];
    tu_check(dpplot_render_dir(dir, out, &o, err, sizeof err) == 0, "legacy_label: render: %s", err);
    tu_check(strstr(texts_of(&log, "memory_breakdown_comparison.png"), "Norm samples + per-sample grads") != NULL,
             "legacy_label: the breakdown's legend says the segment holds both");
    for (int i = 0; i < log.charts && i < MAX_CHARTS; i++) free(log.texts[i]);
}

/* A sweep over LoRA's rank whose first point is rank 0 (no LoRA, so no targets): the targets the
 * other points share are still named ("LoRA on q_proj,v_proj"); they were left out when the
 * rank-0 point said nothing of them (issue 38.4). */
static void test_lora_rank_sweep(void) {
    const char *dir = DPPLOT_TEST_OUT "/lora_sweep", *out = DPPLOT_TEST_OUT "/lora_sweep_out";
    int ok = tu_fresh_dir(dir) == 0;
    static const int ranks[3] = {0, 8, 16};
    for (int i = 0; i < 3 && ok; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", DPPLOT_FIXTURES "/single", "ghost.json");
        char *text = tu_read_file(path);
        cJSON *r = text ? cJSON_Parse(text) : NULL;
        free(text);
        cJSON *model = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "config"), "model");
        if (!model) {
            ok = 0;
            cJSON_Delete(r);
            break;
        }
        cJSON_DeleteItemFromObject(model, "lora");
        if (ranks[i] > 0) {
            cJSON *lora = cJSON_AddObjectToObject(model, "lora");
            cJSON_AddNumberToObject(lora, "rank", ranks[i]);
            cJSON *targets = cJSON_AddArrayToObject(lora, "targets");
            cJSON_AddItemToArray(targets, cJSON_CreateString("q_proj"));
            cJSON_AddItemToArray(targets, cJSON_CreateString("v_proj"));
        } else {
            cJSON *lora = cJSON_AddObjectToObject(model, "lora");
            cJSON_AddNumberToObject(lora, "rank", 0);
        }
        cJSON_ReplaceItemInObject(r, "experiment", cJSON_CreateString(ranks[i] == 0 ? "r0" : ranks[i] == 8 ? "r8" : "r16"));
        cJSON *sweep = cJSON_AddObjectToObject(r, "sweep");
        cJSON_AddStringToObject(sweep, "name", "lora");
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(sweep, "vary"), "lora_rank", ranks[i]);
        char *printed = cJSON_Print(r);
        snprintf(path, sizeof path, "%s/r%d.json", dir, ranks[i]);
        FILE *f = printed ? fopen(path, "w") : NULL;
        ok = f && fputs(printed, f) >= 0;
        if (f) ok &= fclose(f) == 0;
        free(printed);
        cJSON_Delete(r);
    }
    if (!tu_check(ok, "lora_sweep: fixtures written")) return;
    char err[512];
    tu_check(dpplot_render_dir(dir, out, NULL, err, sizeof err) == 0, "lora_sweep: render: %s", err);
    char path[1024];
    snprintf(path, sizeof path, "%s/summary.txt", out);
    char *txt = tu_read_file(path);
    const char *line = txt ? strstr(txt, "Configuration (every run): ") : NULL;
    tu_check(line && strstr(line, "LoRA on q_proj,v_proj") && strstr(line, "LoRA on q_proj,v_proj") < strchr(line, '\n'),
             "lora_sweep: the targets the LoRA points share are named: %.200s", line ? line : "(no line)");
    free(txt);
}

/* Writes single/vanilla.json into dir with timing.spans replaced by a 100 ms clip band and, when
 * tiny_noise, a noise band of 5 us; 0 on success. */
static int write_banded(const char *dir, int tiny_noise) {
    if (tu_fresh_dir(dir) != 0) return -1;
    char *text = tu_read_file(DPPLOT_FIXTURES "/single/vanilla.json");
    cJSON *r = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *timing = cJSON_GetObjectItem(r, "timing");
    if (!timing) {
        cJSON_Delete(r);
        return -1;
    }
    cJSON *spans = cJSON_CreateArray();
    static const char *const phase[2] = {"clip", "noise"};
    static const double from[2] = {300, 500}, to[2] = {400, 500.005};
    for (int k = 0; k < 1 + tiny_noise; k++) {
        cJSON *sp = cJSON_CreateObject();
        cJSON_AddStringToObject(sp, "phase", phase[k]);
        cJSON_AddNumberToObject(sp, "start_ms", from[k]);
        cJSON_AddNumberToObject(sp, "end_ms", to[k]);
        cJSON_AddNumberToObject(sp, "iter", 0);
        cJSON_AddItemToArray(spans, sp);
    }
    cJSON_ReplaceItemInObject(timing, "spans", spans);
    char *printed = cJSON_Print(r), path[1024];
    cJSON_Delete(r);
    snprintf(path, sizeof path, "%s/vanilla.json", dir);
    FILE *f = printed ? fopen(path, "w") : NULL;
    int ok = f && fputs(printed, f) >= 0;
    if (f) ok &= fclose(f) == 0;
    free(printed);
    return ok ? 0 : -1;
}

/* A timeline's phase bands are to scale (issue 38.4): vanilla's 5 us noise bookkeeping on a
 * 750 ms axis is a 1 px line, not the 5 px band a floor drew, which read as time spent. The
 * charts with and without that span differ in at most 2 columns of the plot (antialiasing). */
static void test_bands_to_scale(void) {
    const char *in[2] = {DPPLOT_TEST_OUT "/bands_without", DPPLOT_TEST_OUT "/bands_with"};
    const char *out[2] = {DPPLOT_TEST_OUT "/bands_without_charts", DPPLOT_TEST_OUT "/bands_with_charts"};
    tu_image *img[2] = {NULL, NULL};
    char err[512], path[1024];
    for (int k = 0; k < 2; k++) {
        if (!tu_check(write_banded(in[k], k) == 0, "bands: fixture %s written", in[k])) goto done;
        tu_check(dpplot_render_dir(in[k], out[k], NULL, err, sizeof err) == 0, "bands: render %s: %s", in[k], err);
        snprintf(path, sizeof path, "%s/memory_timeline.png", out[k]);
        img[k] = tu_image_load(path);
        if (!tu_check(img[k] != NULL, "bands: %s loads", path)) goto done;
    }
    /* the plot's middle rows: below the legend (which gains "noise"), above the axis */
    int cols = tu_image_diff_columns(img[0], img[1], 0.40, 0.85);
    tu_check(cols >= 1 && cols <= 2, "bands: the 5 us noise band is drawn 1-2 px wide, not widened (%d columns)", cols);
done:
    tu_image_free(img[0]);
    tu_image_free(img[1]);
}

/* A legacy file's timeline (its snapshots) labels the file's peak, not its highest snapshot
 * (issue 38.4: "peak 39.1 GiB" where peak_memory_mb says 42.4 GiB): the label names both. */
static void test_legacy_peak_label(void) {
    const char *dir = DPPLOT_TEST_OUT "/legacy_peak", *out = DPPLOT_TEST_OUT "/legacy_peak_charts";
    char path[1024];
    int ok = tu_fresh_dir(dir) == 0;
    snprintf(path, sizeof path, "%s/ghost.json", dir);
    FILE *f = ok ? fopen(path, "w") : NULL;
    ok = f && fputs("{\"experiment\": \"ghost\", \"avg_time_ms\": 100.5, \"peak_memory_mb\": 43417.6,"
                    " \"snapshots\": [{\"name\": \"start\", \"allocated_mb\": 1000, \"reserved_mb\": 1200,"
                    " \"timestamp\": 1699612345.0}, {\"name\": \"after backward\", \"allocated_mb\": 40038.4,"
                    " \"reserved_mb\": 45000, \"timestamp\": 1699612345.5}, {\"name\": \"end\","
                    " \"allocated_mb\": 2000, \"reserved_mb\": 45000, \"timestamp\": 1699612346.0}]}",
                    f) >= 0;
    if (f) ok &= fclose(f) == 0;
    if (!tu_check(ok, "legacy_peak: fixture written")) return;
    layout_log log = {0};
    dpplot_options o = dpplot_options_default();
    o.layout = check_layout, o.layout_user = &log;
    char err[512];
    (void)dpplot_render_dir(dir, out, &o, err, sizeof err);
    const char *texts = texts_of(&log, "memory_timeline.png");
    tu_check(strstr(texts, "peak 42.4 GiB (snapshots reach 39.1 GiB)") != NULL,
             "legacy_peak: the timeline labels the file's peak and the highest snapshot: %s", texts);
    tu_check(!strstr(texts, "\npeak 39.1 GiB\n"), "legacy_peak: not the highest snapshot as the peak");
    for (int i = 0; i < log.charts && i < MAX_CHARTS; i++) free(log.texts[i]);
}

static void test_title_wraps(void) {
    dpplot_canvas *cv = dpplot_canvas_new(400, 300, 1.0);
    char out[256];
    const char *title = "batch=16, lora_rank=16, max_physical_batch_size=4";
    double size = dpplot_text_fit(cv, title, 180, DPPLOT_FONT_PANEL, 12.0, 1, 3, out, sizeof out);
    tu_check(strchr(out, '\n') != NULL, "'%s' wraps in 180 px (got '%s')", title, out);
    tu_check(dpplot_text_width(cv, out, size, 1) <= 180, "every line fits 180 px (%.0f)",
             dpplot_text_width(cv, out, size, 1));
    size = dpplot_text_fit(cv, "short", 180, DPPLOT_FONT_PANEL, 12.0, 1, 3, out, sizeof out);
    tu_check(size == DPPLOT_FONT_PANEL && strcmp(out, "short") == 0, "a short title stays as it is");
    size = dpplot_text_fit(cv, "averyveryverylongwordwithoutanyspaceinit", 60, 20, 12, 0, 2, out, sizeof out);
    tu_check(dpplot_text_width(cv, out, size, 0) <= 60 && strstr(out, "\xe2\x80\xa6"),
             "an unbreakable word is cut with an ellipsis ('%s')", out);
    dpplot_canvas_free(cv);
}

/* The kernel table explains a bandwidth over the peak (operands in cache) where one occurs, and
 * only then. */
static void test_bandwidth_note(void) {
    for (int over = 0; over < 2; over++) {
        char dir[900], out[1024], path[2048], err[512];
        snprintf(dir, sizeof dir, "%s/bw_note_%d", DPPLOT_TEST_OUT, over);
        snprintf(out, sizeof out, "%s/charts", dir);
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) continue;
        snprintf(path, sizeof path, "%s/single/vanilla.json", DPPLOT_FIXTURES);
        cJSON *r = load_json(path);
        if (!tu_check(r != NULL, "cannot read %s", path)) return;
        cJSON *ops = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "profile"), "ops");
        cJSON *first = cJSON_GetArrayItem(ops, 0);
        tu_check(first != NULL, "vanilla.json has profile.ops");
        if (first && over) cJSON_ReplaceItemInObject(first, "bandwidth_fraction", cJSON_CreateNumber(1.62));
        char *text = cJSON_Print(r);
        snprintf(path, sizeof path, "%s/vanilla.json", dir);
        tu_check(text && write_text(path, text) == 0, "write %s", path);
        free(text);
        cJSON_Delete(r);
        dpplot_render_dir(dir, out, NULL, err, sizeof err);
        snprintf(path, sizeof path, "%s/summary.txt", out);
        char *summary = tu_read_file(path);
        tu_check(summary && (strstr(summary, "cache-resident") != NULL) == over, "summary.txt %s the cache note",
                 over ? "has" : "has no");
        free(summary);
    }
}

/* A panel of 0..1000 ms × 0..10 on a fresh 800×500 canvas, for the drawing tests below. */
static dpplot_canvas *small_panel(dpplot_panel *p) {
    dpplot_canvas *cv = dpplot_canvas_new(800, 500, 1.0);
    dpplot_panel_spec s = {0};
    s.x_min = 0, s.x_max = 1000, s.y_min = 0, s.y_max = 10;
    s.x_unit = DPPLOT_UNIT_MS;
    tu_check(cv && dpplot_panel_begin(p, cv, (dpplot_rect){0, 0, 800, 500}, &s) == 0, "small panel");
    return cv;
}

/* The peak label goes where no curve runs: a step curve through the places a label would take by
 * default (left of and above the peak), so only a farther one is clear. */
static void test_peak_label_clear(void) {
    dpplot_panel p;
    dpplot_canvas *cv = small_panel(&p);
    if (!cv) return;
    double x[] = {0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000};
    double y[] = {8.4, 8.4, 8.4, 8.4, 8.4, 9.0, 8.4, 8.4, 8.4, 8.4, 8.4};
    dpplot_series s = {.name = "allocated", .color = DPPLOT_INK, .x = x, .y = y, .n = 11, .step = 1};
    dpplot_lines_draw(&p, &s, 1);
    size_t before;
    dpplot_canvas_boxes(cv, &before);
    dpplot_annotate_clear(&p, 500, 9.0, "peak 9 GiB", DPPLOT_INK, &s, 1);
    size_t n;
    const dpplot_box *boxes = dpplot_canvas_boxes(cv, &n);
    tu_check(n == before + 1, "one label drawn (%zu boxes)", n - before);
    if (n == before + 1)
        tu_check(!dpplot_series_crosses(&p, &s, boxes[before].r),
                 "the peak label (%.0f,%.0f %.0fx%.0f) is clear of the curve", boxes[before].r.x, boxes[before].r.y,
                 boxes[before].r.w, boxes[before].r.h);
    dpplot_canvas_free(cv);
}

/* A phase span of 0.1 ms on a 1000 ms axis is still a visible band (at least 5 px), and two
 * coincident scatter points both show (neither marker hidden under the other). */
static void test_thin_band_and_coincident_markers(void) {
    dpplot_panel p;
    dpplot_canvas *cv = small_panel(&p);
    if (!cv) return;
    dpplot_rgb band = dpplot_rgb_hex(0xAA4499);
    dpplot_shade sh = {500, 500.1, band, 1.0, 5.0};
    dpplot_shades_draw(&p, &sh, 1);
    dpplot_rgb grey = dpplot_rgb_hex(0x666666), orange = dpplot_rgb_hex(0xD55E00);
    dpplot_point pts[2] = {{250, 5, NULL, grey, DPPLOT_MARKER_CIRCLE, 0},
                           {250, 5, NULL, orange, DPPLOT_MARKER_HEXAGON, 0}};
    size_t group[2];
    tu_check(dpplot_points_coincide(&p, pts, 2, 22.0, group) == 1 && group[1] == 0, "the two points coincide");
    dpplot_scatter_draw(&p, pts, 2, 22.0);
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/layout_band_markers.png", DPPLOT_TEST_OUT);
    tu_check(dpplot_canvas_write_png(cv, path, err, sizeof err) == 0, "write %s: %s", path, err);
    dpplot_canvas_free(cv);
    tu_image *img = tu_image_load(path);
    if (!img) return;
    size_t band_px = tu_image_count_color(img, band, 3), plot_h = (size_t)p.plot.h;
    /* 5 px at a fractional offset: 4 whole columns in the band's colour, the edges blended */
    tu_check(band_px >= 4 * (plot_h - 2), "the band is at least 5 px wide (%zu px over %zu rows)", band_px, plot_h);
    size_t g = tu_image_count_color(img, grey, 3), o = tu_image_count_color(img, orange, 3);
    tu_check(g > 150 && o > 150, "both markers show (grey %zu px, orange %zu px)", g, o);
    tu_image_free(img);
}

/* Segment labels in one unit per chart, the value axis's: a 512 MiB segment under a GiB axis
 * reads "0.50 GiB" beside its 1.50 GiB neighbour, not "512 MiB". */
static void test_segment_labels_one_unit(void) {
    dpplot_canvas *cv = dpplot_canvas_new(800, 600, 1.0);
    const char *cats[] = {"vanilla", "ghost"};
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const double values[] = {0.5 * gib, 1.5 * gib, 0.75 * gib, 1.25 * gib};
    const dpplot_rgb colors[] = {dpplot_rgb_hex(0x0072B2), dpplot_rgb_hex(0xE69F00)};
    dpplot_bar_spec b = {2, 2, values, colors, 1, NULL, 1, DPPLOT_UNIT_BYTES, 0.6};
    dpplot_panel p;
    dpplot_panel_spec s = {0};
    s.y_unit = DPPLOT_UNIT_BYTES, s.y_min = 0, s.y_max = 2.2 * gib, s.y_extend = 1;
    s.x_categories = cats, s.n_x_categories = 2;
    if (!tu_check(cv && dpplot_panel_begin(&p, cv, (dpplot_rect){0, 0, 800, 600}, &s) == 0, "bar panel")) {
        dpplot_canvas_free(cv);
        return;
    }
    tu_check(strcmp(p.yt.unit, "GiB") == 0, "the axis is in GiB (%s)", p.yt.unit);
    size_t before, n;
    dpplot_canvas_boxes(cv, &before);
    dpplot_bars_draw(&p, &b);
    const dpplot_box *boxes = dpplot_canvas_boxes(cv, &n);
    const char *want[] = {"0.50 GiB", "1.50 GiB", "0.75 GiB", "1.25 GiB"};
    tu_check(n == before + 4, "four segment labels (%zu)", n - before);
    for (size_t i = 0; i < 4 && before + i < n; i++)
        tu_check(strcmp(boxes[before + i].text, want[i]) == 0, "segment %zu reads '%s' (want '%s')", i,
                 boxes[before + i].text, want[i]);
    dpplot_canvas_free(cv);
}

/* Panel titles of a timeline chart: its method names among the recorded titles. */
static size_t timeline_panels(const char *texts) {
    size_t n = 0;
    for (const char *line = texts; *line;) {
        size_t len = strcspn(line, "\n");
        static const char *const names[] = {"vanilla", "flat", "ghost", "mixed_ghost", "bk", "flash_clip"};
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            n += strlen(names[k]) == len && strncmp(line, names[k], len) == 0;
        line += len + (line[len] == '\n');
    }
    return n;
}

/* A directory of 12 (and 200) single runs: the timeline draws its 12 panels at the default
 * height (they once all failed to fit, and 200 results drew none), and at 600 px as many as fit,
 * the rest named in a note. check_layout fails a chart with no axes drawn. */
static void test_many_timelines(void) {
    static const char *const names[] = {"vanilla", "flat", "ghost", "mixed_ghost", "bk", "flash_clip"};
    const size_t counts[] = {12, 200};
    for (size_t c = 0; c < 2; c++) {
        char dir[900], out[1024], path[2048], err[512];
        snprintf(dir, sizeof dir, "%s/layout_many_%zu", DPPLOT_TEST_OUT, counts[c]);
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) continue;
        for (size_t i = 0; i < counts[c]; i++) {
            snprintf(path, sizeof path, "%s/single/%s.json", DPPLOT_FIXTURES, names[i % 6]);
            char *text = tu_read_file(path);
            snprintf(path, sizeof path, "%s/run%03zu.json", dir, i);
            tu_check(text && write_text(path, text) == 0, "write %s", path);
            free(text);
        }
        for (int small = 0; small < 2; small++) {
            layout_log log = {0};
            dpplot_options opt = dpplot_options_default();
            opt.layout = check_layout, opt.layout_user = &log;
            opt.height = small ? 600 : 1000;
            snprintf(out, sizeof out, "%s/charts_%d", dir, opt.height);
            tu_check(dpplot_render_dir(dir, out, &opt, err, sizeof err) == 0, "%s: %s", dir, err);
            const char *texts = texts_of(&log, "memory_timeline.png");
            size_t panels = timeline_panels(texts);
            if (!small)
                tu_check(panels == 12, "%zu results at 1000 px: 12 timeline panels (%zu)", counts[c], panels);
            else
                tu_check(panels >= 2 && panels < 12 && strstr(texts, "Not shown: "),
                         "%zu results at 600 px: the panels that fit (%zu) and a note on the rest", counts[c], panels);
            for (int i = 0; i < log.charts && i < MAX_CHARTS; i++) free(log.texts[i]);
        }
    }
}

/* Lines a hair apart (0.5% of the time axis: 682 and 685 ms) lie under each other; the grid's
 * legend names them as it names identical ones, and says they are near, not equal. */
static void test_near_lines(void) {
    const char *dir = DPPLOT_TEST_OUT "/layout_near", *out = DPPLOT_TEST_OUT "/layout_near_charts";
    static const char *const keys[3] = {"seq_len", "batch", "lora_rank"};
    const double GIB = 1073741824.0;
    int ok = tu_fresh_dir(dir) == 0;
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < 2; b++)
            for (int r = 0; r < 2; r++) {
                double v[3] = {128.0 * (s + 1), 8.0 * (b + 1), 8.0 * (r + 1)}, ms = 600.0 + 100 * s + 300 * b;
                ok &= tu_write_plan_point(dir, "vanilla", keys, v, 3, (16 + s) * GIB, GIB, GIB, ms, 80 * GIB) == 0;
                ok &=
                    tu_write_plan_point(dir, "ghost", keys, v, 3, (16 + s) * GIB, GIB, GIB, ms * 1.005, 80 * GIB) == 0;
                ok &= tu_write_plan_point(dir, "bk", keys, v, 3, (16 + s) * GIB, GIB, GIB, ms * 1.6, 80 * GIB) == 0;
            }
    if (!tu_check(ok, "layout_near: fixture written")) return;
    layout_log log = {0};
    dpplot_options opt = dpplot_options_default();
    opt.layout = check_layout, opt.layout_user = &log;
    char err[512];
    tu_check(dpplot_render_dir(dir, out, &opt, err, sizeof err) == 0, "layout_near: %s", err);
    const char *grid = texts_of(&log, "sweep_grid_time.png");
    tu_check(strstr(grid, "vanilla, ghost coincide") && strstr(grid, "within 1% of the axis") &&
                 !strstr(grid, "bk coincide"),
             "the near lines are named, bk's apart are not (texts: %.400s)", grid);
    /* the overview's totals in its time axis's one unit: bk's 1600 ms beside vanilla's 1000 ms,
     * not "1.6 s" */
    const char *overview = texts_of(&log, "memory_analysis_overview.png");
    tu_check(strstr(overview, "\n1600 ms\n") && strstr(overview, "\n1000 ms\n") && !strstr(overview, " s\n"),
             "overview times in ms (texts: %.600s)", overview);
    for (int i = 0; i < log.charts && i < MAX_CHARTS; i++) free(log.texts[i]);
    /* the same over one variable: ghost's times ring vanilla's, said with "≈" */
    const char *dir1 = DPPLOT_TEST_OUT "/layout_near_1", *out1 = DPPLOT_TEST_OUT "/layout_near_1_charts";
    ok = tu_fresh_dir(dir1) == 0;
    for (int k = 0; k < 3; k++) {
        double v[1] = {256.0 * (1 << k)}, ms = 600.0 * (1 << k);
        ok &= tu_write_plan_point(dir1, "vanilla", keys, v, 1, (16 + k) * GIB, GIB, GIB, ms, 80 * GIB) == 0;
        ok &= tu_write_plan_point(dir1, "ghost", keys, v, 1, (20 + k) * GIB, GIB, GIB, ms * 1.005, 80 * GIB) == 0;
        ok &= tu_write_plan_point(dir1, "bk", keys, v, 1, (24 + k) * GIB, GIB, GIB, ms * 1.6, 80 * GIB) == 0;
    }
    if (!tu_check(ok, "layout_near_1: fixture written")) return;
    layout_log log1 = {0};
    opt.layout_user = &log1;
    tu_check(dpplot_render_dir(dir1, out1, &opt, err, sizeof err) == 0, "layout_near_1: %s", err);
    const char *sweep = texts_of(&log1, "sweep_seq_len.png");
    tu_check(strstr(sweep, "ghost \xe2\x89\x88 vanilla (step time)") && !strstr(sweep, "bk \xe2\x89\x88"),
             "the sweep names ghost's times as under vanilla's (texts: %.400s)", sweep);
    for (int i = 0; i < log1.charts && i < MAX_CHARTS; i++) free(log1.texts[i]);
}

int main(void) {
    test_near_lines();
    test_lora_rank_sweep();
    test_legacy_norm_label();
    test_many_timelines();
    test_segment_labels_one_unit();
    test_peak_label_clear();
    test_thin_band_and_coincident_markers();
    test_bandwidth_note();
    test_clash_rules();
    test_title_wraps();
    /* even sizes as plan runs: their axis titles ("estimated, roofline") are the longest */
    for (size_t nk = 1; nk <= 5; nk++) test_sweep(nk, nk % 2 == 0);
    test_sweep(1, 1); /* the one-variable chart of a plan run */
    test_sweep(5, 1); /* a plan run's 30 timeline panels, each noting the card above its axis */
    /* the six single runs: three rows of timelines, where snapshot marks and peaks meet */
    layout_log log = {0};
    dpplot_options opt = dpplot_options_default();
    opt.layout = check_layout, opt.layout_user = &log;
    char err[512];
    tu_check(dpplot_render_dir(DPPLOT_FIXTURES "/single", DPPLOT_TEST_OUT "/layout_single", &opt, err, sizeof err) == 0,
             "single/: %s", err);
    tu_check(strstr(log.seen, "memory_timeline.png") != NULL, "single/: the timeline was drawn");
    for (int i = 0; i < log.charts && i < MAX_CHARTS; i++) free(log.texts[i]);
    test_fixed_config();
    test_bands_to_scale();
    test_legacy_peak_label();
    return tu_finish("dpplot_layout");
}
