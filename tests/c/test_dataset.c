/* test_dataset.c: the streaming data set reader (engine/text/dataset.h) on small files written to
 * a temporary directory: the exact records, indexes, lines and bad records of each format (JSONL
 * with bad lines, CRLF, blank lines and records over max_record_bytes; JSON arrays with nesting,
 * strings holding ']', ',', '\"' and newlines, bad and empty elements, a BOM, and the files that
 * are not arrays or end inside one; text lines that are not UTF-8; windows that never split a
 * character), the records at and just past the cap, a 10 MB record under a 1 MiB cap (bad, and the
 * next one read: the buffer never holds it), and a ~30 MB file of 300k records read to the end
 * with its bad records counted and the progress. */
#include "check.h"
#include "dataset.h"
#include "error.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static const char *at(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void put(const char *name, const void *data, size_t n) {
    FILE *fp = fopen(at(name), "wb");
    if (!fp || fwrite(data, 1, n, fp) != n) {
        fprintf(stderr, "cannot write %s\n", at(name));
        exit(1);
    }
    fclose(fp);
}

static void puts_(const char *name, const char *text) { put(name, text, strlen(text)); }

#define MAXR 64
typedef struct {
    int n, rc;
    int64_t line[MAXR];
    char *s[MAXR]; /* text, or the JSON printed unformatted */
    int64_t bad;
    int kept;
    dp_bad_record badr[DP_DATASET_BAD_KEPT];
    dp_dataset_format fmt;
    char msg[400];
} got;

/* Reads name to its end (or its error) in format f; every record's index checked. */
static void readall(const char *name, dp_dataset_format f, size_t max_record, size_t window, got *g) {
    memset(g, 0, sizeof *g);
    dp_dataset_opts o = {f, window, max_record};
    dp_dataset *d = NULL;
    g->rc = dp_dataset_open(at(name), &o, &d);
    if (g->rc != DP_OK) {
        snprintf(g->msg, sizeof g->msg, "%s", dp_error_message());
        return;
    }
    g->fmt = dp_dataset_format_of(d);
    dp_record r;
    int rc;
    int64_t last_line = 0;
    while ((rc = dp_dataset_next(d, &r)) == 1) {
        CHECK_EQ_U64(r.index, g->n);
        CHECK(r.line >= last_line);
        last_line = r.line;
        if (g->n < MAXR) {
            g->line[g->n] = r.line;
            if (r.json) {
                g->s[g->n] = cJSON_PrintUnformatted(r.json);
            } else {
                g->s[g->n] = malloc(r.len + 1);
                memcpy(g->s[g->n], r.text, r.len);
                g->s[g->n][r.len] = 0;
            }
        }
        g->n++;
    }
    g->rc = rc;
    CHECK(rc <= 1);
    if (rc < 0) snprintf(g->msg, sizeof g->msg, "%s", dp_error_message());
    const dp_bad_record *kept;
    g->bad = dp_dataset_bad(d, &kept, &g->kept);
    CHECK(g->kept <= DP_DATASET_BAD_KEPT && g->bad >= g->kept);
    memcpy(g->badr, kept, (size_t)g->kept * sizeof *kept);
    if (rc == 0) { /* the end: everything consumed */
        uint64_t done, total;
        dp_dataset_progress(d, &done, &total);
        CHECK_EQ_U64(done, total);
    }
    CHECK(dp_dataset_next(d, &r) == rc); /* the end, or the error, again */
    dp_dataset_close(d);
}

static void drop(got *g) {
    for (int i = 0; i < g->n && i < MAXR; i++) free(g->s[i]);
}

static void check_rec(const got *g, int i, int64_t line, const char *s, int where) {
    if (i >= g->n || i >= MAXR) {
        fprintf(stderr, "line %d: no record %d (%d read)\n", where, i, g->n);
        check_failures++;
        return;
    }
    if (g->line[i] != line || strcmp(g->s[i], s) != 0) {
        fprintf(stderr, "line %d: record %d is (line %lld, '%s'), expected (line %lld, '%s')\n", where, i,
                (long long)g->line[i], g->s[i], (long long)line, s);
        check_failures++;
    }
}
#define REC(g, i, line, s) check_rec(g, i, line, s, __LINE__)

static void check_bad(const got *g, int i, int64_t line, const char *reason, int where) {
    if (i >= g->kept || g->badr[i].line != line || !strstr(g->badr[i].reason, reason)) {
        fprintf(stderr, "line %d: bad record %d is (line %lld, '%s'), expected (line %lld, '...%s...')\n", where, i,
                i < g->kept ? (long long)g->badr[i].line : -1LL, i < g->kept ? g->badr[i].reason : "(none)",
                (long long)line, reason);
        check_failures++;
    }
}
#define BAD(g, i, line, reason) check_bad(g, i, line, reason, __LINE__)

static void test_jsonl(void) {
    puts_("a.jsonl", "{\"a\":1}\n"    /* 1 */
                     "\n"             /* 2: blank */
                     "   \t \r\n"     /* 3: whitespace */
                     "{\"a\":2}\r\n"  /* 4 */
                     "not json\n"     /* 5: bad */
                     "{\"a\":3} x\n"  /* 6: bytes after the value */
                     "\"str\"\n"      /* 7 */
                     "  [1, 2]  \r\n" /* 8 */
                     "{\"a\":\n"      /* 9: cut */
                     "42");           /* 10: no newline at the end */
    got g;
    readall("a.jsonl", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.fmt == DP_DATASET_JSONL);
    CHECK_EQ_U64(g.n, 5);
    REC(&g, 0, 1, "{\"a\":1}");
    REC(&g, 1, 4, "{\"a\":2}");
    REC(&g, 2, 7, "\"str\"");
    REC(&g, 3, 8, "[1,2]");
    REC(&g, 4, 10, "42");
    CHECK_EQ_U64(g.bad, 3);
    BAD(&g, 0, 5, "not JSON at column 1");
    BAD(&g, 1, 6, "not JSON at column 9");
    BAD(&g, 2, 9, "not JSON at column");
    drop(&g);

    /* max_record_bytes 8: 8 bytes (before "\r\n") is a record, 9 is bad, and reading goes on */
    puts_("cap.jsonl", "12345678\r\n123456789\n\"abcdef\"\n\"abcdefghij\"\n7");
    readall("cap.jsonl", DP_DATASET_JSONL, 8, 0, &g);
    CHECK(g.rc == 0 && g.n == 3 && g.bad == 2);
    REC(&g, 0, 1, "12345678");
    REC(&g, 1, 3, "\"abcdef\"");
    REC(&g, 2, 5, "7");
    BAD(&g, 0, 2, "over max_record_bytes");
    BAD(&g, 1, 4, "over max_record_bytes");
    drop(&g);

    /* an empty file, and one of blank lines: no records, nothing bad */
    puts_("empty.jsonl", "");
    readall("empty.jsonl", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.n == 0 && g.bad == 0);
    puts_("blank.jsonl", "\n\r\n  \n");
    readall("blank.jsonl", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.n == 0 && g.bad == 0);
}

/* A record of n bytes between two small ones, in a buffer of its own. */
static void big_between(const char *name, size_t n, int json_array, char fill) {
    size_t total = n + 64;
    char *b = malloc(total);
    size_t k = 0;
    k += (size_t)sprintf(b + k, json_array ? "[1,\n\"" : "1\n\"");
    memset(b + k, fill, n - 2);
    k += n - 2;
    k += (size_t)sprintf(b + k, json_array ? "\",\n{\"z\":1}]\n" : "\"\n{\"z\":1}\n");
    put(name, b, k);
    free(b);
}

static void test_over_cap(void) {
    got g;
    /* a 10 MB line under a 1 MiB cap: bad, never held, and the next record read */
    big_between("big.jsonl", (size_t)10 << 20, 0, 'x');
    readall("big.jsonl", DP_DATASET_JSONL, (size_t)1 << 20, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 1);
    REC(&g, 0, 1, "1");
    REC(&g, 1, 3, "{\"z\":1}");
    BAD(&g, 0, 2, "over max_record_bytes");
    drop(&g);
    /* the same as text lines */
    readall("big.jsonl", DP_DATASET_TEXT_LINES, (size_t)1 << 20, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 1);
    REC(&g, 1, 3, "{\"z\":1}");
    BAD(&g, 0, 2, "over max_record_bytes");
    drop(&g);
    /* an element of 10 MB of ']' and ',' inside a string: the scanner keeps its state across chunks */
    big_between("big.json", (size_t)10 << 20, 1, ']');
    readall("big.json", DP_DATASET_JSON, (size_t)1 << 20, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 1);
    REC(&g, 0, 1, "1");
    REC(&g, 1, 3, "{\"z\":1}");
    BAD(&g, 0, 2, "over max_record_bytes");
    drop(&g);
    big_between("big2.json", (size_t)3 << 20, 1, ',');
    readall("big2.json", DP_DATASET_JSON, (size_t)1 << 20, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 1);
    drop(&g);
    /* records past the first 1 MiB buffer, exactly at the cap (grown to hold them) and one past */
    size_t cap = ((size_t)1 << 20) + 100;
    big_between("atcap.jsonl", cap, 0, 'y');
    readall("atcap.jsonl", DP_DATASET_JSONL, cap, 0, &g);
    CHECK(g.rc == 0 && g.n == 3 && g.bad == 0);
    CHECK(g.n == 3 && strlen(g.s[1]) == cap);
    drop(&g);
    readall("atcap.jsonl", DP_DATASET_JSONL, cap - 1, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 1);
    drop(&g);
    big_between("atcap.json", cap, 1, 'y');
    readall("atcap.json", DP_DATASET_JSON, cap, 0, &g);
    CHECK(g.rc == 0 && g.n == 3 && g.bad == 0);
    drop(&g);
    readall("atcap.json", DP_DATASET_JSON, cap - 1, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 1);
    drop(&g);
}

static void test_json(void) {
    puts_("a.json", "\xEF\xBB\xBF  [\n"                             /* 1 */
                    "  {\"a\": {\"b\": [1, 2, {\"c\": \"]\"}]}},\n" /* 2 */
                    "  \"x,y]\\\"z\\nw{[\" ,\n"                     /* 3 */
                    "  {\"bad\": },\n"                              /* 4: bad */
                    "  [1,\n"                                       /* 5 */
                    "   2],\n"                                      /* 6 */
                    "  \"line\nbreak\", \n"                         /* 7-8 */
                    "  3\n"                                         /* 9 */
                    "]\n\n");
    got g;
    readall("a.json", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.fmt == DP_DATASET_JSON);
    CHECK_EQ_U64(g.n, 5);
    REC(&g, 0, 2, "{\"a\":{\"b\":[1,2,{\"c\":\"]\"}]}}");
    REC(&g, 1, 3, "\"x,y]\\\"z\\nw{[\"");
    REC(&g, 2, 5, "[1,2]");
    REC(&g, 3, 7, "\"line\\nbreak\"");
    REC(&g, 4, 9, "3");
    CHECK_EQ_U64(g.bad, 1);
    BAD(&g, 0, 4, "not JSON at line 4 column 11");
    drop(&g);

    /* empty and trailing-comma elements are bad; [] holds nothing */
    puts_("e.json", "[1,,2,\n]");
    readall("e.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 2);
    BAD(&g, 0, 1, "empty element");
    BAD(&g, 1, 2, "empty element");
    drop(&g);
    puts_("none.json", " [ ] ");
    readall("none.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == 0 && g.n == 0 && g.bad == 0);

    /* an element over the cap, in the buffer */
    puts_("c.json", "[1, \"xxxxxxxxxxxxxxxxxxxxxxxx\",\n 3]");
    readall("c.json", DP_DATASET_JSON, 16, 0, &g);
    CHECK(g.rc == 0 && g.n == 2 && g.bad == 1);
    REC(&g, 1, 2, "3");
    BAD(&g, 0, 1, "over max_record_bytes");
    drop(&g);

    /* not arrays, or cut: DP_EINVAL naming the line, after the records before */
    puts_("obj.json", "\n\n  {\"a\": 1}\n");
    readall("obj.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == -DP_EINVAL && g.n == 0);
    CHECK(strstr(g.msg, "obj.json: line 3: the top level is not a JSON array") != NULL);
    puts_("cut.json", "[1,\n 2"); /* the cut element is no record */
    readall("cut.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == -DP_EINVAL && g.n == 1);
    CHECK(strstr(g.msg, "cut.json: ends inside the array (no closing ']')") != NULL);
    drop(&g);
    puts_("cut2.json", "[1, {\"a\": \"]}]");
    readall("cut2.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == -DP_EINVAL && g.n == 1 && strstr(g.msg, "no closing ']'"));
    drop(&g);
    puts_("cut3.json", "[1,  ");
    readall("cut3.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == -DP_EINVAL && g.n == 1 && strstr(g.msg, "no closing ']'"));
    drop(&g);
    puts_("after.json", "[1]\n[2]\n");
    readall("after.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == -DP_EINVAL && g.n == 1 && strstr(g.msg, "after.json: line 2: bytes after"));
    drop(&g);
    puts_("void.json", "  \n");
    readall("void.json", DP_DATASET_JSON, 0, 0, &g);
    CHECK(g.rc == -DP_EINVAL && strstr(g.msg, "not a JSON array"));

    /* AUTO: a .json file of JSON lines is JSONL; an empty one too */
    puts_("lines.json", "\n{\"a\":1}\n{\"a\":2}\n");
    readall("lines.json", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.fmt == DP_DATASET_JSONL && g.n == 2);
    REC(&g, 0, 2, "{\"a\":1}");
    REC(&g, 1, 3, "{\"a\":2}");
    drop(&g);
    readall("void.json", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.fmt == DP_DATASET_JSONL && g.n == 0);
    puts_("UP.JSON", "\xEF\xBB\xBF[\"a\"]");
    readall("UP.JSON", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.fmt == DP_DATASET_JSON && g.n == 1);
    REC(&g, 0, 1, "\"a\"");
    drop(&g);
}

static void test_text_lines(void) {
    puts_("t.txt", "hello\n"          /* 1 */
                   "\n"               /* 2 */
                   "w\xC3\xB6rld\r\n" /* 3 */
                   "\xFF\xFE"
                   "abc\n"                              /* 4: bad at byte 1 */
                   "ab\xC3\n"                           /* 5: cut character at byte 3 */
                   "ok \xC0\xAF\n"                      /* 6: overlong at byte 4 */
                   "\xED\xA0\x80\n"                     /* 7: a surrogate */
                   "  \n"                               /* 8: spaces are text */
                   "\xE2\x82\xAC end\xF0\x9F\x98\x80"); /* 9 */
    got g;
    readall("t.txt", DP_DATASET_AUTO, 0, 0, &g);
    CHECK(g.rc == 0 && g.fmt == DP_DATASET_TEXT_LINES);
    CHECK_EQ_U64(g.n, 4);
    REC(&g, 0, 1, "hello");
    REC(&g, 1, 3, "w\xC3\xB6rld");
    REC(&g, 2, 8, "  ");
    REC(&g, 3, 9, "\xE2\x82\xAC end\xF0\x9F\x98\x80");
    CHECK_EQ_U64(g.bad, 4);
    BAD(&g, 0, 4, "not UTF-8 at byte 1");
    BAD(&g, 1, 5, "not UTF-8 at byte 3");
    BAD(&g, 2, 6, "not UTF-8 at byte 4");
    BAD(&g, 3, 7, "not UTF-8 at byte 1");
    drop(&g);
    /* more bad lines than are kept: all counted */
    char many[400];
    size_t k = 0;
    for (int i = 0; i < 40; i++) many[k++] = (char)0xFF, many[k++] = '\n';
    many[k++] = 'z';
    put("many.txt", many, k);
    readall("many.txt", DP_DATASET_TEXT_LINES, 0, 0, &g);
    CHECK(g.rc == 0 && g.n == 1 && g.bad == 40 && g.kept == DP_DATASET_BAD_KEPT);
    BAD(&g, DP_DATASET_BAD_KEPT - 1, DP_DATASET_BAD_KEPT, "not UTF-8");
    REC(&g, 0, 41, "z");
    drop(&g);
}

static int utf8_whole(const char *s, size_t n) { /* starts and ends at a character boundary */
    if (n == 0 || ((unsigned char)s[0] & 0xC0) == 0x80) return 0;
    return 1;
}

static void test_windows(void) {
    const char text[] = "a\xF0\x9F\x98\x80"
                        "bc\xF0\x9F\x98\x80\xF0\x9F\x98\x80"
                        "d\n\xC3\xA9\n\xE2\x82\xAC"
                        "f";
    size_t n = sizeof text - 1;
    put("w.txt", text, n);
    for (size_t W = 1; W <= 7; W++) {
        dp_dataset_opts o = {DP_DATASET_TEXT_WINDOWS, W, 0};
        dp_dataset *d = NULL;
        CHECK_OK(dp_dataset_open(at("w.txt"), &o, &d));
        if (!d) continue;
        dp_record r;
        size_t off = 0;
        int64_t i = 0;
        int rc;
        while ((rc = dp_dataset_next(d, &r)) == 1) {
            CHECK_EQ_U64(r.index, i);
            CHECK(off + r.len <= n && memcmp(r.text, text + off, r.len) == 0);
            CHECK(utf8_whole(r.text, r.len));
            CHECK(off + r.len == n || ((unsigned char)text[off + r.len] & 0xC0) != 0x80); /* the cut */
            CHECK(r.len <= (W < 4 ? 4 : W));
            int64_t line = 1;
            for (size_t j = 0; j < off; j++) line += text[j] == '\n';
            CHECK_EQ_U64(r.line, line);
            off += r.len;
            i++;
        }
        CHECK(rc == 0 && off == n);
        dp_dataset_close(d);
    }
    /* exact windows: four bytes hold one emoji; three, a whole emoji anyway */
    put("e.txt", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80", 8);
    got g;
    readall("e.txt", DP_DATASET_TEXT_WINDOWS, 0, 4, &g);
    CHECK(g.rc == 0 && g.n == 2);
    REC(&g, 1, 1, "\xF0\x9F\x98\x80");
    drop(&g);
    readall("e.txt", DP_DATASET_TEXT_WINDOWS, 0, 7, &g);
    CHECK(g.rc == 0 && g.n == 2);
    REC(&g, 0, 1, "\xF0\x9F\x98\x80");
    drop(&g);
    readall("e.txt", DP_DATASET_TEXT_WINDOWS, 0, 3, &g);
    CHECK(g.rc == 0 && g.n == 2);
    drop(&g);
    /* windows across the 1 MiB chunks: the whole file back */
    size_t big = ((size_t)3 << 20) + 7;
    char *b = malloc(big);
    for (size_t j = 0; j < big; j++) b[j] = (char)('a' + j % 26);
    for (size_t j = 0; j + 4 <= big; j += 1001) memcpy(b + j, "\xF0\x9F\x98\x80", 4);
    put("big.txt", b, big);
    dp_dataset_opts o = {DP_DATASET_TEXT_WINDOWS, 65537, 0};
    dp_dataset *d = NULL;
    CHECK_OK(dp_dataset_open(at("big.txt"), &o, &d));
    dp_record r;
    size_t off = 0;
    int same = 1;
    while (d && dp_dataset_next(d, &r) == 1) {
        same &= off + r.len <= big && memcmp(r.text, b + off, r.len) == 0 && utf8_whole(r.text, r.len);
        off += r.len;
    }
    CHECK(same && off == big);
    dp_dataset_close(d);
    free(b);
}

/* ~30 MB of JSONL: 300k records, every 7919th of them over the cap */
static void test_large(void) {
    FILE *fp = fopen(at("large.jsonl"), "wb");
    const int N = 300000;
    int n_bad = 0;
    for (int i = 0; i < N; i++) {
        if (i % 7919 == 7918) {
            fprintf(fp, "{\"i\":%d,\"t\":\"%0300d\"}\n", i, 0);
            n_bad++;
        } else {
            fprintf(fp, "{\"i\":%d,\"t\":\"the quick brown fox jumps over the lazy dog, the record number %08d\"}\n", i,
                    i);
        }
    }
    fclose(fp);
    dp_dataset_opts o = {DP_DATASET_AUTO, 0, 256};
    dp_dataset *d = NULL;
    CHECK_OK(dp_dataset_open(at("large.jsonl"), &o, &d));
    if (!d) return;
    dp_record r;
    int64_t n = 0;
    int ok = 1, rc;
    uint64_t done, total, first_done = 0;
    while ((rc = dp_dataset_next(d, &r)) == 1) {
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(r.json, "i");
        int want = (int)(r.line - 1);
        ok &= r.index == n && cJSON_IsNumber(i) && i->valueint == want && want % 7919 != 7918;
        if (n == 0) dp_dataset_progress(d, &first_done, &total);
        n++;
    }
    CHECK(ok && rc == 0);
    CHECK_EQ_U64(n, N - n_bad);
    const dp_bad_record *kept;
    int n_kept;
    CHECK_EQ_U64(dp_dataset_bad(d, &kept, &n_kept), n_bad);
    CHECK(n_kept == DP_DATASET_BAD_KEPT && kept[0].line == 7919 && kept[1].line == 2 * 7919);
    dp_dataset_progress(d, &done, &total);
    struct stat st;
    stat(at("large.jsonl"), &st);
    CHECK(total == (uint64_t)st.st_size && done == total && total > ((uint64_t)25 << 20));
    CHECK_EQ_U64(first_done, strlen("{\"i\":0,\"t\":\"the quick brown fox jumps over the lazy dog, the record number "
                                    "00000000\"}\n"));
    dp_dataset_close(d);
}

static void test_api(void) {
    for (int f = DP_DATASET_AUTO; f <= DP_DATASET_TEXT_WINDOWS; f++) {
        dp_dataset_format back = (dp_dataset_format)-1;
        CHECK(dp_dataset_format_parse(dp_dataset_format_name((dp_dataset_format)f), &back) == 0 && (int)back == f);
    }
    CHECK(strcmp(dp_dataset_format_name(DP_DATASET_JSONL), "jsonl") == 0);
    CHECK(strcmp(dp_dataset_format_name(DP_DATASET_TEXT_WINDOWS), "windows") == 0);
    dp_dataset_format f;
    CHECK(dp_dataset_format_parse("JSONL", &f) == -1 && dp_dataset_format_parse("", &f) == -1);
    CHECK(dp_dataset_format_parse(NULL, &f) == -1);
    dp_dataset *d = (dp_dataset *)1;
    CHECK(dp_dataset_open(at("nope.jsonl"), NULL, &d) == DP_EIO && d == NULL);
    puts_("x.txt", "x\n");
    dp_dataset_opts o = {DP_DATASET_TEXT_WINDOWS, 0, 0};
    CHECK(dp_dataset_open(at("x.txt"), &o, &d) == DP_EINVAL && strstr(dp_error_message(), "window_bytes"));
    o.window_bytes = 100, o.max_record_bytes = 10;
    CHECK(dp_dataset_open(at("x.txt"), &o, &d) == DP_EINVAL);
    o.format = (dp_dataset_format)99;
    CHECK(dp_dataset_open(at("x.txt"), &o, &d) == DP_EINVAL);
    CHECK(dp_dataset_open(dir, NULL, &d) == DP_EIO); /* a directory */
    if (mkfifo(at("fifo.jsonl"), 0600) == 0) CHECK(dp_dataset_open(at("fifo.jsonl"), NULL, &d) == DP_EIO);
    CHECK(dp_dataset_open(at("x.txt"), NULL, &d) == DP_OK && dp_dataset_format_of(d) == DP_DATASET_TEXT_LINES);
    uint64_t done = 9, total = 0;
    dp_dataset_progress(d, &done, &total);
    CHECK(done == 0 && total == 2);
    dp_dataset_close(d);
    dp_dataset_close(NULL);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/dpprof_dataset_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_api();
    test_jsonl();
    test_over_cap();
    test_json();
    test_text_lines();
    test_windows();
    test_large();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report("test_dataset");
}
