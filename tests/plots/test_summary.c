/* test_summary: summary.txt and summary.csv of each fixture directory against golden files in
 * tests/fixtures/results/golden/<dir>/ (set DPPLOT_UPDATE_GOLDEN=1 to rewrite them after a
 * deliberate change, then review the diff). The goldens are written by the code under test, so
 * every figure of summary.csv is also checked against the fixture files themselves, read here
 * with cJSON and computed as docs/results.md defines it (not through results_load.c). Also
 * sanity checks of summary.md and summary.tex. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define MIB 1048576.0

/* Splits one CSV line (fields quoted when they hold commas or quotes) into cells; returns n. */
static int csv_cells(char *line, char **cells, int cap) {
    int n = 0;
    char *p = line;
    while (n < cap) {
        if (*p == '"') {
            char *w = ++p;
            cells[n++] = w;
            while (*p && !(*p == '"' && p[1] != '"')) {
                if (*p == '"') p++;
                *w++ = *p++;
            }
            if (*p == '"') p++;
            *w = '\0';
            if (*p == ',')
                p++;
            else
                break;
        } else {
            cells[n++] = p;
            char *comma = strchr(p, ',');
            if (!comma) break;
            *comma = '\0';
            p = comma + 1;
        }
    }
    return n;
}

static const cJSON *at(const cJSON *o, const char *a, const char *b, const char *c) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (v && b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    if (v && c) v = cJSON_GetObjectItemCaseSensitive(v, c);
    return v;
}

/* "%.2f" of v, or "" when v is not a finite number (what summary.csv writes for a missing one). */
static void fmt2(char *buf, size_t n, double v) {
    if (isfinite(v))
        snprintf(buf, n, "%.2f", v);
    else
        buf[0] = '\0';
}

/* The live-at-peak bytes of the categories summary.csv's component column `key` adds up:
 * docs/results.md's categories, temp with workspace, and other with inputs and whatever of the
 * peak the categories do not cover. */
static double component_bytes(const cJSON *doc, const char *key) {
    static const char *const cats[] = {
        "parameters",   "gradients", "optimizer_states", "activations", "output_grads", "per_sample_grads",
        "norm_samples", "temp",      "workspace",        "inputs",      "other"};
    double sum = 0, all = 0;
    for (size_t i = 0; i < sizeof cats / sizeof *cats; i++) {
        const cJSON *v = at(doc, "memory", "categories", cats[i]);
        double b = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(v, "live_at_peak_bytes"))
                       ? cJSON_GetObjectItemCaseSensitive(v, "live_at_peak_bytes")->valuedouble
                       : 0.0;
        all += b;
        const char *c = cats[i];
        int mine = strcmp(c, key) == 0 || (strcmp(key, "temp") == 0 && strcmp(c, "workspace") == 0) ||
                   (strcmp(key, "other") == 0 && strcmp(c, "inputs") == 0);
        if (mine) sum += b;
    }
    const cJSON *peak = at(doc, "memory", "peak_bytes", NULL);
    if (strcmp(key, "other") == 0 && cJSON_IsNumber(peak) && peak->valuedouble > all) sum += peak->valuedouble - all;
    return sum;
}

/* Every row of <out>/summary.csv against the fixture file it names. */
static void check_values(const char *fixture, const char *out) {
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.csv", out);
    char *csv = tu_read_file(path);
    if (!tu_check(csv != NULL, "%s: summary.csv not written", fixture)) return;
    char *save = NULL, *header_line = strtok_r(csv, "\n", &save);
    char *header[64];
    int nh = csv_cells(header_line, header, 64);
    int rows = 0, checked = 0;
    for (char *line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *cell[64];
        int nc = csv_cells(line, cell, 64);
        rows++;
        if (!tu_check(nc == nh, "%s row %d: %d cells for %d columns", fixture, rows, nc, nh)) continue;
        snprintf(path, sizeof path, "%s/%s/%s", DPPLOT_FIXTURES, fixture, cell[0]);
        char *text = tu_read_file(path);
        cJSON *doc = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (!tu_check(doc != NULL, "%s: %s is not a fixture file", fixture, cell[0])) continue;
        const cJSON *peak = at(doc, "memory", "peak_bytes", NULL),
                    *reserved = at(doc, "memory", "reserved_peak_bytes", NULL);
        /* the step time: the median of the repeated runs, else of the iterations, else the mean */
        const cJSON *avg = at(doc, "timing", "avg_ms", NULL), *med = at(doc, "timing", "median_ms", NULL);
        const cJSON *rep = at(doc, "repeats", "avg_ms", "median"), *n_rep = at(doc, "repeats", "n", NULL);
        double peak_mb = cJSON_IsNumber(peak) ? peak->valuedouble / MIB : NAN;
        double avg_ms = cJSON_IsNumber(rep) && cJSON_IsNumber(n_rep) && n_rep->valuedouble > 1 ? rep->valuedouble
                        : cJSON_IsNumber(med) && cJSON_IsNumber(at(doc, "timing", "min_ms", NULL)) &&
                              cJSON_IsNumber(at(doc, "timing", "max_ms", NULL))   ? med->valuedouble
                        : cJSON_IsNumber(avg)                                                    ? avg->valuedouble
                                                                                                  : NAN;
        for (int k = 0; k < nh; k++) {
            char want[64] = "";
            const char *h = header[k];
            size_t hl = strlen(h);
            if (strcmp(h, "experiment") == 0 || strcmp(h, "method") == 0 || strcmp(h, "status") == 0) {
                const cJSON *s = at(doc, h, NULL, NULL);
                snprintf(want, sizeof want, "%s", cJSON_IsString(s) ? s->valuestring : "?");
            } else if (strcmp(h, "peak_memory_mb") == 0) {
                fmt2(want, sizeof want, peak_mb);
            } else if (strcmp(h, "reserved_peak_mb") == 0) {
                fmt2(want, sizeof want, cJSON_IsNumber(reserved) ? reserved->valuedouble / MIB : NAN);
            } else if (strcmp(h, "step_time_ms") == 0) {
                fmt2(want, sizeof want, avg_ms);
            } else if (strcmp(h, "memory_per_time") == 0) {
                fmt2(want, sizeof want, avg_ms > 0 ? peak_mb / avg_ms : NAN);
            } else if (hl > 3 && strcmp(h + hl - 3, "_mb") == 0) { /* a component */
                char key[64];
                snprintf(key, sizeof key, "%.*s", (int)(hl - 3), h);
                fmt2(want, sizeof want,
                     cJSON_IsObject(at(doc, "memory", "categories", NULL)) ? component_bytes(doc, key) / MIB : NAN);
            } else {
                continue; /* file, predicted, sweep, swept values, message: not figures */
            }
            tu_check(strcmp(cell[k], want) == 0, "%s/%s: %s is '%s' in summary.csv, the fixture gives '%s'", fixture,
                     cell[0], h, cell[k], want);
            checked++;
        }
        cJSON_Delete(doc);
    }
    int files = 0;
    snprintf(path, sizeof path, "ls %s/%s/*.json | wc -l", DPPLOT_FIXTURES, fixture);
    FILE *p = popen(path, "r");
    if (p) {
        if (fscanf(p, "%d", &files) != 1) files = -1;
        pclose(p);
    }
    tu_check(rows == files, "%s: summary.csv has %d rows for %d fixture files", fixture, rows, files);
    tu_check(checked >= rows * 16, "%s: %d figures checked", fixture, checked);
    free(csv);
}

static void check_dir(const char *fixture, int expect_rc) {
    char dir[1024], out[1024], err[512], actual[1100], golden[1100];
    snprintf(dir, sizeof dir, "%s/%s", DPPLOT_FIXTURES, fixture);
    snprintf(out, sizeof out, "%s/summary_%s", DPPLOT_TEST_OUT, fixture);
    int rc = dpplot_render_dir(dir, out, NULL, err, sizeof err);
    tu_check(rc == expect_rc, "%s: rc %d, expected %d (%s)", fixture, rc, expect_rc, err);
    static const char *const files[2] = {"summary.txt", "summary.csv"};
    for (int i = 0; i < 2; i++) {
        snprintf(actual, sizeof actual, "%s/%s", out, files[i]);
        snprintf(golden, sizeof golden, "%s/golden/%s/%s", DPPLOT_FIXTURES, fixture, files[i]);
        tu_check_golden(actual, golden);
    }
    snprintf(actual, sizeof actual, "%s/summary.md", out);
    char *md = tu_read_file(actual);
    tu_check(md && strncmp(md, "| Method | Status | Peak memory (MiB)", 36) == 0, "%s: summary.md header", fixture);
    free(md);
    snprintf(actual, sizeof actual, "%s/summary.tex", out);
    char *tex = tu_read_file(actual);
    tu_check(tex && strstr(tex, "\\begin{tabular}") && strstr(tex, "\\bottomrule") &&
                 !strstr(tex, "mixed_ghost"), /* underscores are escaped */
             "%s: summary.tex is a booktabs table with escaped names", fixture);
    free(tex);
}

/* The lines of text (a copy, cut at newlines); n set. Caller frees lines[0] and lines. */
static char **split_lines(const char *text, size_t *n) {
    char *copy = strdup(text ? text : "");
    size_t cap = 16;
    char **lines = malloc(cap * sizeof *lines);
    *n = 0;
    for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l && lines; l = strtok_r(NULL, "\n", &save)) {
        if (*n == cap) lines = realloc(lines, (cap *= 2) * sizeof *lines);
        if (lines) lines[(*n)++] = l;
    }
    if (!lines || *n == 0) free(copy);
    return lines;
}

/* Issue 27, defects 2, 3 and 5 and the summary.txt/.tex items: plan runs, one beyond the card.
 * Every report carries the fit (yes/no, as plan.fits), the reserved peak as the plan defines it
 * (plan.predicted_reserved_bytes, not the allocated peak), and marks the step times as
 * estimates naming the device model; summary.txt's columns line up with long point names, its
 * totals come after the components, and a 0 MB gradients beside others' says why;
 * summary.tex has the swept variables in columns of their own and a component table. */
static void test_plan_reports(void) {
    const char *dir = DPPLOT_TEST_OUT "/plan_reports", *out = DPPLOT_TEST_OUT "/summary_plan_reports";
    static const char *const keys[2] = {"max_physical_batch_size", "seq_len"};
    const double GIB = 1073741824.0, card = 24 * GIB;
    int ok = tu_fresh_dir(dir) == 0;
    /* vanilla keeps 1 GiB of gradients at its peak; flash_clip none at its peak (they peak at 2 GiB after) */
    for (int s = 0; s < 2; s++) {
        double v[2] = {1, s ? 4096 : 1024};
        ok &= tu_write_plan_point(dir, "vanilla", keys, v, 2, (16 + 2 * s) * GIB, GIB, GIB, 100 + s, card) == 0;
        ok &= tu_write_plan_point(dir, "flash_clip", keys, v, 2, (16 + 8 * s) * GIB, 0, 2 * GIB, 120 + s, card) == 0;
    }
    if (!tu_check(ok, "plan_reports: fixture written")) return;
    char err[512], path[1200];
    tu_check(dpplot_render_dir(dir, out, NULL, err, sizeof err) == 0, "plan_reports: render: %s", err);

    /* summary.csv: fits and the reserved peak of each row, from the fixture file it names */
    snprintf(path, sizeof path, "%s/summary.csv", out);
    char *csv = tu_read_file(path);
    size_t nl = 0;
    char **lines = split_lines(csv, &nl);
    tu_check(nl == 5, "plan_reports: summary.csv has a header and 4 rows (%zu lines)", nl);
    char *header[64], *cell[64];
    int nh = nl ? csv_cells(lines[0], header, 64) : 0, c_fits = -1, c_res = -1, c_est = -1, c_seq = -1;
    for (int k = 0; k < nh; k++) {
        if (!strcmp(header[k], "fits")) c_fits = k;
        if (!strcmp(header[k], "reserved_peak_mb")) c_res = k;
        if (!strcmp(header[k], "time_estimated_for")) c_est = k;
        if (!strcmp(header[k], "seq_len")) c_seq = k;
    }
    tu_check(c_fits >= 0 && c_res >= 0 && c_est >= 0 && c_seq >= 0, "summary.csv has fits, reserved_peak_mb, "
                                                                    "time_estimated_for and seq_len columns");
    int unfit_rows = 0;
    for (size_t i = 1; i < nl && c_fits >= 0 && c_res >= 0 && c_est >= 0; i++) {
        if (csv_cells(lines[i], cell, 64) != nh) continue;
        snprintf(path, sizeof path, "%s/%s", dir, cell[0]);
        char *text = tu_read_file(path);
        cJSON *doc = text ? cJSON_Parse(text) : NULL;
        free(text);
        const cJSON *fits = at(doc, "plan", "fits", NULL), *res = at(doc, "plan", "predicted_reserved_bytes", NULL);
        char want[64];
        fmt2(want, sizeof want, cJSON_IsNumber(res) ? res->valuedouble / MIB : NAN);
        tu_check(!strcmp(cell[c_fits], cJSON_IsTrue(fits) ? "yes" : "no"), "%s: fits '%s'", cell[0], cell[c_fits]);
        tu_check(!strcmp(cell[c_res], want), "%s: reserved_peak_mb '%s', plan.predicted_reserved_bytes gives '%s'",
                 cell[0], cell[c_res], want);
        tu_check(!strcmp(cell[c_est], "tiny"), "%s: time estimated for '%s'", cell[0], cell[c_est]);
        unfit_rows += !cJSON_IsTrue(fits);
        cJSON_Delete(doc);
    }
    tu_check(unfit_rows == 1, "plan_reports: one point does not fit (%d)", unfit_rows);
    if (lines) free(lines[0]);
    free(lines), free(csv);

    /* summary.md: the fit column and the estimate named */
    snprintf(path, sizeof path, "%s/summary.md", out);
    char *md = tu_read_file(path);
    tu_check(md && strstr(md, "| Fits |") &&
                 strstr(md, "| flash_clip max_physical_batch_size=1 seq_len=4096 | ok | no |"),
             "summary.md has a Fits column, 'no' for the point beyond the card");
    tu_check(md && strstr(md, " * |") && strstr(md, "roofline estimate") && strstr(md, "tiny model (a test card)"),
             "summary.md marks its times as estimates for the tiny model");
    free(md);

    /* summary.tex: swept variables in columns, the fit, the estimate, a component table */
    snprintf(path, sizeof path, "%s/summary.tex", out);
    char *tex = tu_read_file(path);
    tu_check(tex && strstr(tex, "Method & max\\_physical\\_batch\\_size & seq\\_len & Peak memory (MiB)") &&
                 strstr(tex, "flash\\_clip & 1 & 4096 & 24576.00 & 24883.20"),
             "summary.tex: the swept variables in columns of their own");
    tu_check(tex && strstr(tex, "& Fits") && strstr(tex, "& ok & no \\\\"), "summary.tex has the fit");
    tu_check(tex && strstr(tex, "$^{*}$") && strstr(tex, "tiny model (a test card)"),
             "summary.tex marks its times as estimated, naming the model");
    const char *second = tex ? strstr(tex, "\\begin{tabular}") : NULL;
    second = second ? strstr(second + 1, "\\begin{tabular}") : NULL;
    tu_check(second && strstr(second, "Gradients") && strstr(second, "vanilla & 1 & 1024 & 15360.00 & 1024.00"),
             "summary.tex has a component table (what was live at the peak)");
    free(tex);

    /* summary.txt: aligned columns, the fit, the totals last, the note on gradients */
    snprintf(path, sizeof path, "%s/summary.txt", out);
    char *txt = tu_read_file(path);
    lines = split_lines(txt, &nl);
    int rows = 0, aligned = 1;
    size_t peak_end = 0;
    for (size_t i = 0; i < nl; i++) {
        const char *h = strstr(lines[i], "Peak Memory (MB)");
        if (h && !peak_end) {
            peak_end = (size_t)(h - lines[i]) + strlen("Peak Memory (MB)");
            continue;
        }
        if (peak_end && strstr(lines[i], " seq_len=") && strlen(lines[i]) > peak_end && strstr(lines[i], " *")) {
            rows++;
            aligned &= lines[i][peak_end - 1] >= '0' && lines[i][peak_end - 1] <= '9' && lines[i][peak_end] == ' ';
            const char *end = lines[i] + strlen(lines[i]) - 3;
            aligned &= !strcmp(end, "yes") || !strcmp(end, " no");
        }
    }
    tu_check(rows == 4 && aligned, "summary.txt: 4 rows, the peak column ends where its header does (%d rows)", rows);
    const char *block = txt ? strstr(txt, "\nflash_clip max_physical_batch_size=1 seq_len=1024:") : NULL;
    const char *temp = block ? strstr(block, "Temp Matrices") : NULL,
               *total = block ? strstr(block, "Total Allocated") : NULL;
    tu_check(temp && total && total > temp, "summary.txt: Total Allocated after the components");
    tu_check(block && strstr(block, "note: Gradients 0 MB") && strstr(block, "own peak: 2048.00 MB"),
             "summary.txt says why flash_clip's gradients are 0 MB at its peak");
    tu_check(txt && strstr(txt, "roofline estimate") && strstr(txt, "tiny model (a test card)") &&
                 strstr(txt, "Fits: "),
             "summary.txt names the estimate and the fit");
    if (lines) free(lines[0]);
    free(lines), free(txt);
}

/* summary.txt's breakdown names per-sample gradients apart from norm samples (issue 38.4: flat's
 * 29,662 MB of them read as "Norm Samples"): a file with memory.categories gets a line
 * "Per-sample Grads" beside "Norm Samples"; one with the legacy breakdown only, whose
 * norm_samples_mb holds both, says so on its one line. */
static void test_per_sample_grads_line(void) {
    const char *dir = DPPLOT_TEST_OUT "/psg_in", *out = DPPLOT_TEST_OUT "/psg_out";
    char path[1024];
    int ok = tu_fresh_dir(dir) == 0;
    snprintf(path, sizeof path, "%s/legacy.json", dir);
    FILE *f = ok ? fopen(path, "w") : NULL;
    if (f) {
        fputs("{\"experiment\": \"flat_legacy\", \"avg_time_ms\": 100.5, \"peak_memory_mb\": 1000,"
              " \"breakdown\": {\"model_parameters_mb\": 100, \"optimizer_states_mb\": 200,"
              " \"gradients_mb\": 100, \"activation_hooks_mb\": 300, \"norm_samples_mb\": 250,"
              " \"temp_matrices_mb\": 10, \"peak_allocated_mb\": 1000}}",
              f);
        ok = fclose(f) == 0;
    } else {
        ok = 0;
    }
    snprintf(path, sizeof path, "%s/flat.json", DPPLOT_FIXTURES "/single");
    char *flat = tu_read_file(path);
    snprintf(path, sizeof path, "%s/flat.json", dir);
    f = ok && flat ? fopen(path, "w") : NULL;
    ok = f && fputs(flat, f) >= 0;
    if (f) ok &= fclose(f) == 0;
    free(flat);
    if (!tu_check(ok, "psg: fixture written")) return;
    char err[1024];
    tu_check(dpplot_render_dir(dir, out, NULL, err, sizeof err) == 0, "psg: render: %s", err);
    snprintf(path, sizeof path, "%s/summary.txt", out);
    char *txt = tu_read_file(path);
    const char *flat_block = txt ? strstr(txt, "\nflat:\n") : NULL;
    const char *legacy_block = txt ? strstr(txt, "\nflat_legacy:\n") : NULL;
    if (!tu_check(flat_block && legacy_block, "psg: both blocks in summary.txt")) {
        free(txt);
        return;
    }
    /* the blocks in either order: each ends where the next starts (or at the kernel table) */
    const char *flat_end = legacy_block > flat_block ? legacy_block : txt + strlen(txt);
    const char *legacy_end = flat_block > legacy_block ? flat_block : txt + strlen(txt);
    const char *psg = strstr(flat_block, "  Per-sample Grads ");
    const char *norm = strstr(flat_block, "  Norm Samples ");
    double v_psg = -1, v_norm = -1, v_both = -1;
    if (psg && psg < flat_end) (void)sscanf(psg, "  Per-sample Grads %lf MB", &v_psg);
    if (norm && norm < flat_end) (void)sscanf(norm, "  Norm Samples %lf MB", &v_norm);
    tu_check(v_psg == 588.95, "psg: flat has a Per-sample Grads line of 588.95 MB (%.2f)", v_psg);
    tu_check(v_norm == 0.0, "psg: flat's Norm Samples hold 0 MB (%.2f)", v_norm);
    const char *both = strstr(legacy_block, "  Norm Samples + Per-sample Grads ");
    if (both && both < legacy_end) (void)sscanf(both, "  Norm Samples + Per-sample Grads %lf MB", &v_both);
    tu_check(v_both == 250.0, "psg: the legacy line says it holds both (%.2f MB)", v_both);
    tu_check(!strstr(legacy_block, "  Norm Samples  ") || strstr(legacy_block, "  Norm Samples  ") > legacy_end,
             "psg: no bare Norm Samples line for a legacy file");
    free(txt);
}

/* Issue 38.2: a run taken on a loaded machine (environment.host_load.loaded) is said so in
 * summary.txt and .md, with the share other processes took; runs on an idle one are not. */
static void test_load_note(void) {
    const char *dir = DPPLOT_TEST_OUT "/load_in", *out = DPPLOT_TEST_OUT "/load_out";
    char path[1024];
    int ok = tu_fresh_dir(dir) == 0;
    static const char *const names[2] = {"flat", "ghost"};
    static const char *const loads[2] = {
        "\"host_load\": {\"wall_s\": 2.0, \"cpu_s\": 1.9, \"cores\": 2, \"others_share\": 0.63, \"loaded\": true},",
        "\"host_load\": {\"wall_s\": 2.0, \"cpu_s\": 1.9, \"cores\": 2, \"others_share\": 0.02, \"loaded\": false},"};
    for (int i = 0; i < 2 && ok; i++) {
        snprintf(path, sizeof path, "%s/%s.json", DPPLOT_FIXTURES "/single", names[i]);
        char *text = tu_read_file(path);
        char *env = text ? strstr(text, "\"environment\": {") : NULL;
        snprintf(path, sizeof path, "%s/%s.json", dir, names[i]);
        FILE *f = env ? fopen(path, "w") : NULL;
        if (f) {
            size_t head = (size_t)(env - text) + strlen("\"environment\": {");
            ok = fwrite(text, 1, head, f) == head && fputs(loads[i], f) >= 0 && fputs(text + head, f) >= 0;
            ok &= fclose(f) == 0;
        } else {
            ok = 0;
        }
        free(text);
    }
    if (!tu_check(ok, "load: fixtures written")) return;
    char err[1024];
    tu_check(dpplot_render_dir(dir, out, NULL, err, sizeof err) == 0, "load: render: %s", err);
    static const char *const want =
        "1 of 2 measured runs taken on a loaded machine (other processes kept up to 63% of the CPUs busy): "
        "their times are not what the machine gives one run (environment.host_load).";
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/summary.%s", out, k ? "md" : "txt");
        char *txt = tu_read_file(path);
        tu_check(txt && strstr(txt, want), "load: summary.%s says one run was taken on a loaded machine",
                 k ? "md" : "txt");
        free(txt);
    }
    /* the fixtures themselves, without host_load: no such line */
    snprintf(path, sizeof path, "%s/summary_single/summary.txt", DPPLOT_TEST_OUT);
    char *plain = tu_read_file(path);
    tu_check(!plain || !strstr(plain, "loaded machine"), "load: no note for runs that do not say so");
    free(plain);
}

int main(void) {
    test_per_sample_grads_line();
    test_load_note();
    test_plan_reports();
    check_dir("single", 0);
    check_dir("sweep_seq", 0);
    check_dir("sweep_2d", 0);
    check_dir("sweep_3d", 0);
    static const char *const valid[] = {"single", "sweep_seq", "sweep_2d", "sweep_3d"};
    for (int i = 0; i < 4; i++) {
        char out[1024];
        snprintf(out, sizeof out, "%s/summary_%s", DPPLOT_TEST_OUT, valid[i]);
        check_values(valid[i], out);
    }
    check_dir("malformed", 1);
    return tu_finish("test_summary");
}
