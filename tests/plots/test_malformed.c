/* test_malformed: a damaged or partial results directory gives clear messages naming file and
 * field, a non-zero status, and still renders what it can. Also the loader's handling of single
 * malformed documents, and directories that cannot be rendered at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static void collect(void *user, const char *message) { (void)dpplot_strlist_addf(user, "%s", message); }

static int has(const dpplot_strlist *l, const char *needle) {
    for (size_t i = 0; i < l->n; i++)
        if (strstr(l->items[i], needle)) return 1;
    return 0;
}

static void test_directory(void) {
    dpplot_strlist msgs = {0};
    dpplot_options opt = dpplot_options_default();
    opt.warn = collect, opt.warn_user = &msgs;
    char err[1024];
    const char *out = DPPLOT_TEST_OUT "/malformed";
    int rc = dpplot_render_dir(DPPLOT_FIXTURES "/malformed", out, &opt, err, sizeof err);
    tu_check(rc == 1, "malformed dir: rc %d, expected 1", rc);
    tu_check(strstr(err, "bk.json: invalid JSON at line") != NULL && !strchr(err, '\n'),
             "err is one line naming the first problem: '%s'", err);
    static const char *const expected[] = {
        "bk.json: invalid JSON at line",
        "ghost.json: field 'memory.peak_bytes' is a string, expected a number",
        "flash_clip.json: field 'timing.avg_ms' missing",
        "flash_clip.json: field 'memory.timeline.reserved_bytes' has 298 entries but 't_ms' has 300",
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        tu_check(has(&msgs, expected[i]), "a message says '%s'", expected[i]);
    tu_check(!has(&msgs, "trace.json") && !has(&msgs, "sweep_config.json"),
             "files that are not results are skipped quietly");
    tu_check(!has(&msgs, "flat.json"), "an OOM result is not a problem");
    /* still rendered: vanilla, flash_clip (memory only) and the custom method */
    const char *bars[] = {"vanilla", "flash_clip", "ghost+twopass"};
    char path[1024];
    snprintf(path, sizeof path, "%s/memory_breakdown_comparison.png", out);
    tu_check_chart(path, 1600, 1000, bars, 3, 100);
    snprintf(path, sizeof path, "%s/memory_timeline.png", out);
    tu_check_chart(path, 1600, 1000, bars, 3, 100);
    const char *timed[] = {"vanilla", "ghost+twopass"}; /* flash_clip lost its timing */
    snprintf(path, sizeof path, "%s/performance_tradeoff.png", out);
    tu_check_chart(path, 1600, 1000, timed, 2, 100);
    snprintf(path, sizeof path, "%s/summary.txt", out);
    char *txt = tu_read_file(path);
    tu_check(txt && strstr(txt, "flat: oom, requested") && strstr(txt, "PROBLEMS READING RESULTS:") &&
                 strstr(txt, "ghost.json: field 'memory.peak_bytes'"),
             "summary.txt notes the OOM run and lists the problems");
    free(txt);
    dpplot_strlist_release(&msgs);
}

static void test_unrenderable(void) {
    char err[512];
    int rc = dpplot_render_dir(DPPLOT_FIXTURES "/does-not-exist", DPPLOT_TEST_OUT "/none", NULL, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "does-not-exist") && strstr(err, "cannot open"), "missing directory: rc %d, '%s'",
             rc, err);
    /* a directory with no results: the golden/ folder holds only text files */
    rc = dpplot_render_dir(DPPLOT_FIXTURES "/golden", DPPLOT_TEST_OUT "/none", NULL, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "no results files"), "empty directory: rc %d, '%s'", rc, err);
    /* an output directory that cannot be created (its parent is a file) */
    rc = dpplot_render_dir(DPPLOT_FIXTURES "/single", DPPLOT_FIXTURES "/generate.lua/out", NULL, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "cannot create output directory"), "bad out dir: rc %d, '%s'", rc, err);
    /* err may be omitted */
    tu_check(dpplot_render_dir(DPPLOT_FIXTURES "/does-not-exist", NULL, NULL, NULL, 0) == -1, "NULL err");
}

/* One document through the loader; returns the problems found (caller releases). */
static dpplot_strlist load_one(const char *json, dpplot_results *rs) {
    dpplot_strlist problems = {0};
    memset(rs, 0, sizeof *rs);
    dpplot_results_add_json(rs, "case.json", json, &problems);
    dpplot_results_finish(rs);
    return problems;
}

static void test_documents(void) {
    dpplot_results rs;
    dpplot_strlist p;

    p = load_one("{\"experiment\": \"x\", \"status\": \"ok\", \"peak_memory_mb\": \"big\"}", &rs);
    tu_check(has(&p, "case.json: field 'peak_memory_mb' is a string, expected a number"), "wrong type named");
    tu_check(rs.n == 1 && !rs.items[0].has_peak, "kept, without a peak");
    dpplot_strlist_release(&p), dpplot_results_release(&rs);

    p = load_one("{\"schema_version\": 1, \"method\": \"ghost\", \"status\": \"exploded\"}", &rs);
    tu_check(has(&p, "field 'status' has unknown value 'exploded'"), "unknown status named");
    dpplot_strlist_release(&p), dpplot_results_release(&rs);

    p = load_one("{\"schema_version\": 1, \"method\": \"ghost\", \"status\": \"oom\", "
                 "\"sweep\": {\"name\": \"s\", \"vary\": {\"seq_len\": [1, 2]}}}",
                 &rs);
    tu_check(has(&p, "field 'sweep.vary.seq_len' is an array"), "bad sweep value named");
    tu_check(!has(&p, "peak_bytes"), "an OOM result needs no peak");
    dpplot_strlist_release(&p), dpplot_results_release(&rs);

    p = load_one("[1, 2, 3]", &rs);
    tu_check(has(&p, "case.json: top level is an array, expected an object") && rs.n == 0, "top-level array");
    dpplot_strlist_release(&p), dpplot_results_release(&rs);

    p = load_one("{\"experiment\": \"ghost\",\n  \"peak_memory_mb\": 12,,}", &rs);
    tu_check(has(&p, "case.json: invalid JSON at line 2"), "syntax error located");
    dpplot_strlist_release(&p), dpplot_results_release(&rs);

    /* A file from the PyTorch tooling: legacy keys only, wall-clock timestamps. */
    p = load_one("{\"experiment\": \"ghost\", \"avg_time_ms\": 100.5, \"peak_memory_mb\": 1000,"
                 " \"breakdown\": {\"model_parameters_mb\": 100, \"optimizer_states_mb\": 200,"
                 " \"gradients_mb\": 100, \"activation_hooks_mb\": 300, \"norm_samples_mb\": 50,"
                 " \"temp_matrices_mb\": 10, \"peak_allocated_mb\": 1000},"
                 " \"snapshots\": [{\"name\": \"a\", \"allocated_mb\": 100, \"reserved_mb\": 120,"
                 " \"timestamp\": 1699612345.0}, {\"name\": \"b\", \"allocated_mb\": 1000,"
                 " \"reserved_mb\": 1100, \"timestamp\": 1699612345.5}]}",
                 &rs);
    tu_check(p.n == 0, "a legacy file is not a problem (%zu problems)", p.n);
    if (rs.n == 1) {
        const dpplot_result *r = &rs.items[0];
        tu_check(strcmp(r->method, "ghost") == 0 && r->status == DPPLOT_STATUS_OK, "legacy method and status");
        tu_check(r->has_peak && r->peak_bytes == 1000.0 * 1048576 && r->has_time && r->avg_ms == 100.5,
                 "legacy peak and time");
        tu_check(r->has_components && r->component_bytes[DPPLOT_COMP_NORM_SAMPLES] == 50.0 * 1048576 &&
                     r->component_bytes[DPPLOT_COMP_OTHER] == 240.0 * 1048576,
                 "legacy breakdown, the rest of the peak as other");
        tu_check(r->n_timeline == 2 && r->t_ms[0] == 0 && r->t_ms[1] == 500 && r->reserved_bytes[1] == 1100.0 * 1048576,
                 "snapshots become a timeline counted from the first");
    } else {
        tu_check(0, "legacy file loaded");
    }
    dpplot_strlist_release(&p), dpplot_results_release(&rs);
}

int main(void) {
    test_directory();
    test_unrenderable();
    test_documents();
    return tu_finish("test_malformed");
}
