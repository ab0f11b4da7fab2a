/* fuzz_datasets: data set files from outside (data = { dataset = F }) through the streaming reader
 * (engine/text/dataset.h) in every format. Each iteration makes a file from one of a few seeds
 * (JSONL with bad lines and CRLF, a JSON array with nesting and strings holding ']' and ',', text
 * with multibyte characters and invalid UTF-8), damaged (bytes flipped, inserted, cut, chunks
 * repeated, a random byte soup, a very long line), and reads it to its end as jsonl, json, text
 * and windows, with a small or the default max_record_bytes. Every read must end with 0 or a
 * negative status and a one-line message; indexes count up from 0, lines never go back, a window
 * is never longer than its bytes allow, the bad count is at least the kept ones, and the progress
 * ends at the file's size when the stream ended cleanly. Under AddressSanitizer (the build-asan
 * run) a crash, leak or overflow fails it too. Seeded: a failure names its seed and iteration, and
 * its file is kept as <out>/fail_<iteration>.data.
 *
 *   fuzz_datasets OUT_DIR [ITERATIONS [SEED]]    (default 2000, seed 1) */
#include "dataset.h"
#include "error.h"
#include "fuzz_mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures;
static long n_records, n_bad, n_errors;

static const char *const SEEDS[] = {
    "{\"text\": \"In the beginning\"}\n\n{\"prompt\": \"Q\", \"completion\": \" A\"}\r\nnot json\n[1, 2]\n\"s\"\n42",
    "\xEF\xBB\xBF[\n {\"a\": {\"b\": [1, {\"c\": \"]\"}]}},\n \"x,y]\\\"z\\nw{[\" ,\n {\"bad\": },\n [1,\n 2], 3\n]\n",
    "first line\n\nsecond \xF0\x9F\x98\x80 emoji\r\n\xFF\xFE bad\n\xE6\x97\xA5\xE6\x9C\xAC\n\xC3",
    "[]",
    "[",
    "",
    "\n\n\n",
    "[{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}, {}, [], \"\", null]"};
#define N_SEEDS (sizeof SEEDS / sizeof *SEEDS)

static void fail(const char *keep, long it, const char *what) {
    fprintf(stderr, "fuzz_datasets: iteration %ld: %s (file kept as %s)\n", it, what, keep);
    failures++;
}

/* A file's bytes for iteration it (malloc'd, *n bytes). */
static char *make(size_t *n) {
    const char *seed = SEEDS[fuzz_below(N_SEEDS)];
    size_t kind = fuzz_below(6);
    if (kind == 0) { /* a byte soup of the characters the scanners care about */
        static const char alphabet[] = "[]{},:\"\\ \n\r\tab1\xFF\xC3\xE6\x80";
        size_t len = fuzz_below(4000);
        char *b = malloc(len + 1);
        for (size_t i = 0; i < len; i++) b[i] = alphabet[fuzz_below(sizeof alphabet - 1)];
        *n = len;
        return b;
    }
    if (kind == 1) { /* the seed repeated, past the reader's first buffer now and then */
        size_t reps = fuzz_below(8) == 0 ? 20000 : 1 + fuzz_below(50), sl = strlen(seed);
        char *b = malloc(sl * reps + 1);
        for (size_t r = 0; r < reps; r++) memcpy(b + r * sl, seed, sl);
        *n = sl * reps;
        return b;
    }
    if (kind == 2) { /* one long line between records */
        size_t len = 1000 + fuzz_below(1 << 21);
        char *b = malloc(len + 64);
        size_t k = (size_t)sprintf(b, "[\"a\",\n\"");
        memset(b + k, fuzz_below(2) ? 'x' : ']', len);
        k += len;
        k += (size_t)sprintf(b + k, "\",\n1]\n");
        *n = k;
        return b;
    }
    char *b = fuzz_strdup(seed);
    for (size_t m = fuzz_below(6); m > 0; m--) {
        char *c = fuzz_mutate_text(b);
        free(b);
        b = c;
    }
    *n = strlen(b);
    return b;
}

static void read_all(const char *path, dp_dataset_format f, size_t cap, size_t window, uint64_t size, long it,
                     const char *keep) {
    dp_dataset_opts o = {f, window, cap};
    dp_dataset *d = NULL;
    int rc = dp_dataset_open(path, &o, &d);
    if (rc != DP_OK) {
        if (d) fail(keep, it, "a failed open left a data set");
        if (rc < 0 || strchr(dp_error_message(), '\n')) fail(keep, it, "open: a bad status or message");
        return;
    }
    dp_record r;
    int64_t expect = 0, last_line = 0;
    int got;
    while ((got = dp_dataset_next(d, &r)) == 1) {
        if (r.index != expect++) fail(keep, it, "indexes do not count up from 0");
        if (r.line < last_line || r.line < 1) fail(keep, it, "a record's line went back");
        last_line = r.line;
        if (f == DP_DATASET_TEXT_WINDOWS && (r.len == 0 || r.len > window + 3)) fail(keep, it, "a window's length");
        if ((f == DP_DATASET_JSONL || f == DP_DATASET_JSON) && !r.json)
            fail(keep, it, "a JSON record without its value");
        if (r.text && r.len && memchr(r.text, 0, r.len) && f != DP_DATASET_TEXT_WINDOWS && f != DP_DATASET_TEXT_LINES)
            fail(keep, it, "a JSON record's text holds a NUL");
        n_records++;
    }
    if (got > 1) fail(keep, it, "next returned more than 1");
    if (got < 0) {
        n_errors++;
        if (!dp_error_message()[0] || strchr(dp_error_message(), '\n')) fail(keep, it, "an error without one line");
        if (dp_dataset_next(d, &r) != got) fail(keep, it, "the error did not stay");
    } else {
        uint64_t done, total;
        dp_dataset_progress(d, &done, &total);
        if (done != size || total != size) fail(keep, it, "the progress at the end is not the file's size");
        if (dp_dataset_next(d, &r) != 0) fail(keep, it, "the end did not stay");
    }
    const dp_bad_record *kept;
    int nk;
    int64_t bad = dp_dataset_bad(d, &kept, &nk);
    if (bad < nk || nk > DP_DATASET_BAD_KEPT) fail(keep, it, "bad count below the kept ones");
    for (int k = 0; k < nk; k++)
        if (kept[k].line < 1 || !kept[k].reason[0]) fail(keep, it, "a bad record without a line or reason");
    n_bad += bad;
    dp_dataset_close(d);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_datasets OUT_DIR [ITERATIONS [SEED]]\n");
        return 2;
    }
    const char *out = argv[1];
    long iters = argc > 2 ? atol(argv[2]) : 2000;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    mkdir(out, 0755);
    fuzz_seed(seed);
    char path[1200], keep[1300];
    snprintf(path, sizeof path, "%s/fuzz.data", out);
    for (long it = 0; it < iters; it++) {
        size_t n;
        char *b = make(&n);
        snprintf(keep, sizeof keep, "%s/fail_%ld.data", out, it);
        if (fuzz_write_file(path, b, n) != 0) {
            fprintf(stderr, "fuzz_datasets: cannot write %s\n", path);
            return 1;
        }
        int before = failures;
        size_t cap = fuzz_below(3) == 0 ? 1 + fuzz_below(64) : 0;
        size_t window = 1 + fuzz_below(cap ? cap : 300);
        for (int f = DP_DATASET_JSONL; f <= DP_DATASET_TEXT_WINDOWS; f++)
            read_all(path, (dp_dataset_format)f, cap, window, n, it, keep);
        if (failures != before) fuzz_write_file(keep, b, n);
        free(b);
    }
    printf("fuzz_datasets: %ld files (seed %llu) read in 4 formats: %ld records, %ld bad, %ld streams ended by an "
           "error, %d failures\n",
           iters, (unsigned long long)seed, n_records, n_bad, n_errors, failures);
    return failures ? 1 : 0;
}
