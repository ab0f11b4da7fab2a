/* test_summary: summary.txt and summary.csv of each fixture directory against golden files in
 * tests/fixtures/results/golden/<dir>/ (set DPPLOT_UPDATE_GOLDEN=1 to rewrite them after a
 * deliberate change, then review the diff). Also sanity checks of summary.md and summary.tex. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

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
    check_dir("malformed", 1);
    return tu_finish("test_summary");
}
