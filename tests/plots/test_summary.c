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
        const cJSON *avg = at(doc, "timing", "avg_ms", NULL);
        double peak_mb = cJSON_IsNumber(peak) ? peak->valuedouble / MIB : NAN;
        double avg_ms = cJSON_IsNumber(avg) ? avg->valuedouble : NAN;
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
            } else if (strcmp(h, "avg_time_ms") == 0) {
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

int main(void) {
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
