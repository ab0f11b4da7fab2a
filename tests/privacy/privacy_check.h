/* privacy_check.h: what the accountants' C tests share: counting checks, opening a fixture of
 * tests/fixtures/privacy and splitting its CSV lines. */
#ifndef DP_PRIVACY_CHECK_H
#define DP_PRIVACY_CHECK_H

#include <stdio.h>
#include <string.h>

#ifndef DP_PRIVACY_FIXTURE_DIR
#error "define DP_PRIVACY_FIXTURE_DIR as the absolute path of tests/fixtures/privacy"
#endif

static int n_passed, n_failed;

/* Counts a check; prints "FAIL: what" when it failed. */
static inline void check(int ok, const char *what) {
    if (ok) {
        n_passed++;
    } else {
        n_failed++;
        printf("FAIL: %s\n", what);
    }
}

/* Opens tests/fixtures/privacy/name for reading; NULL (and a FAIL line) when it cannot. */
static inline FILE *open_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", DP_PRIVACY_FIXTURE_DIR, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) printf("FAIL: cannot open %s\n", path);
    return f;
}

/* Reads f's next line that is neither a comment (#) nor blank into line; 0 at the end. */
static inline int fixture_line(FILE *f, char *line, int size) {
    while (fgets(line, size, f) != NULL)
        if (line[0] != '#' && line[0] != '\n') return 1;
    return 0;
}

/* Splits a line in place at sep into at most max_fields fields (the line end dropped); returns
 * the count. */
static inline int split(char *line, char sep, char **fields, int max_fields) {
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    char *p = line;
    while (n < max_fields) {
        fields[n++] = p;
        char *at = strchr(p, sep);
        if (at == NULL) break;
        *at = '\0';
        p = at + 1;
    }
    return n;
}

#endif /* DP_PRIVACY_CHECK_H */
