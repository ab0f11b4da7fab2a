/* dataset.c: data sets read as a stream of records (dataset.h): opening (the format by the name, a
 * .json file sniffed), JSON Lines, text lines and text windows, over the buffer of
 * dataset_buffer.c (1 MiB, grown only to hold one record, never past max_record_bytes and a few
 * bytes). A record over the cap is counted bad and skipped to its end without being held. A UTF-8
 * BOM at the file's start is skipped in every format. The top-level JSON array is dataset_json.c's. */
#include "dataset_internal.h"

#include "error.h"
#include "safe_file.h"
#include "tok_internal.h" /* tk_utf8_valid */

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_MAX_RECORD ((size_t)64 << 20)

/* Skips a UTF-8 BOM at the file's start (the buffer is at the start, unread). */
static int skip_bom(dp_dataset *d) {
    size_t got = 1;
    while (d->end < 3 && got) DP_TRY(ds_fill(d, &got));
    if (d->end >= 3 && memcmp(d->buf, "\xEF\xBB\xBF", 3) == 0) d->pos = 3;
    return DP_OK;
}

/* ---- lines ------------------------------------------------------------------------------------ */

/* The next line into [*s, *s + *n) (without its '\n' or "\r\n"), valid until the next read; its
 * line number is d->line before the call. Returns 1, 0 at the end, 2 for a line over max_record
 * (skipped to its end without being held), or < 0. */
static int next_line(dp_dataset *d, const unsigned char **s, size_t *n) {
    size_t scanned = 0; /* bytes from pos known to hold no '\n' */
    for (;;) {
        const unsigned char *nl = memchr(d->buf + d->pos + scanned, '\n', d->end - d->pos - scanned);
        size_t len;
        if (nl) {
            len = (size_t)(nl - (d->buf + d->pos));
            *s = d->buf + d->pos;
            d->pos += len + 1;
        } else if (d->eof) {
            len = d->end - d->pos;
            if (!len) return 0;
            *s = d->buf + d->pos;
            d->pos = d->end;
        } else {
            scanned = d->end - d->pos;
            size_t got = 0;
            if (scanned <= d->max_record + 1) DP_TRY(ds_fill(d, &got));
            if (got || d->eof) continue;
            /* over the cap with no end in sight: drop what is held, then everything to the '\n' */
            for (;;) {
                d->pos = d->end;
                DP_TRY(ds_fill(d, &got));
                if (!got) return 2; /* the file ended inside the line */
                nl = memchr(d->buf + d->pos, '\n', d->end - d->pos);
                if (nl) {
                    d->pos = (size_t)(nl - d->buf) + 1;
                    return 2;
                }
            }
        }
        if (len && (*s)[len - 1] == '\r') len--;
        *n = len;
        return len > d->max_record ? 2 : 1;
    }
}

/* The 0-based offset of the first byte of s that is not valid UTF-8, or n. */
static size_t utf8_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = tk_utf8_valid(s + i, n - i, NULL);
        if (!k) return i;
        i += k;
    }
    return n;
}

static int only_ws(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!ds_is_ws(s[i])) return 0;
    return 1;
}

static int lines_next(dp_dataset *d, dp_record *rec) {
    for (;;) {
        int64_t line = d->line;
        const unsigned char *s = NULL;
        size_t n = 0;
        int r = next_line(d, &s, &n);
        if (r <= 0) return r;
        d->line++;
        if (r == 2) {
            ds_bad(d, line, "over max_record_bytes (%zu)", d->max_record);
            continue;
        }
        if (d->fmt == DP_DATASET_TEXT_LINES) {
            if (!n) continue;
            size_t bad = utf8_prefix(s, n);
            if (bad < n) {
                ds_bad(d, line, "not UTF-8 at byte %zu", bad + 1);
                continue;
            }
            ((unsigned char *)s)[n] = 0; /* its '\r', '\n' or the byte past the data: NUL-terminated */
            rec->text = (const char *)s;
            rec->len = n;
        } else {
            if (only_ws(s, n)) continue;
            /* its '\r', '\n' or the byte past the data (the buffer has cap + 1 bytes), all consumed: a
             * NUL for cJSON to stop at, and the record's text NUL-terminated */
            ((unsigned char *)s)[n] = 0;
            const char *stop = NULL;
            cJSON *j = cJSON_ParseWithLengthOpts((const char *)s, n, &stop, 0);
            size_t at = stop ? (size_t)((const unsigned char *)stop - s) : 0;
            if (j) {
                while (at < n && ds_is_ws(s[at])) at++;
            }
            if (!j || at < n) {
                cJSON_Delete(j);
                ds_bad(d, line, "not JSON at column %zu%s", (at < n ? at : n) + 1, j ? " (bytes after the value)" : "");
                continue;
            }
            d->json = j;
            rec->json = j;
            rec->text = (const char *)s;
            rec->len = n;
        }
        rec->line = line;
        rec->index = d->index++;
        return 1;
    }
}

/* ---- windows ---------------------------------------------------------------------------------- */

static int is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

static int windows_next(dp_dataset *d, dp_record *rec) {
    size_t W = d->window_bytes, got = 1;
    while (d->end - d->pos < W + 4 && !d->eof && got) DP_TRY(ds_fill(d, &got));
    size_t avail = d->end - d->pos;
    if (!avail) return 0;
    const unsigned char *s = d->buf + d->pos;
    size_t k = avail < W ? avail : W;
    if (k < avail && is_cont(s[k])) { /* the cut inside a character: back to its first byte */
        size_t j = k;
        while (j > 0 && k - j < 3 && is_cont(s[j])) j--;
        if (j > 0 && !is_cont(s[j])) {
            k = j;
        } else if (j == 0) { /* the window's first character is longer than W: all of it */
            while (k < avail && k < W + 3 && is_cont(s[k])) k++;
        } /* else not UTF-8 there: cut at W */
    }
    rec->line = d->line;
    rec->text = (const char *)s;
    rec->len = k;
    rec->index = d->index++;
    ds_advance(d, k);
    return 1;
}

/* ---- the API ---------------------------------------------------------------------------------- */

static const char *const NAMES[] = {"auto", "jsonl", "json", "text", "windows"};

const char *dp_dataset_format_name(dp_dataset_format f) {
    return (unsigned)f < sizeof NAMES / sizeof NAMES[0] ? NAMES[f] : "unknown";
}

int dp_dataset_format_parse(const char *name, dp_dataset_format *out) {
    for (unsigned i = 0; name && i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(name, NAMES[i]) == 0) {
            if (out) *out = (dp_dataset_format)i;
            return 0;
        }
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    if (n < k) return 0;
    for (size_t i = 0; i < k; i++) {
        char c = s[n - k + i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != suffix[i]) return 0;
    }
    return 1;
}

static int resolve_auto(dp_dataset *d) {
    if (ends_with(d->path, ".jsonl") || ends_with(d->path, ".ndjson")) {
        d->fmt = DP_DATASET_JSONL;
    } else if (ends_with(d->path, ".json")) {
        int c;
        DP_TRY(ds_skip_ws(d, &c)); /* only whitespace consumed: no record or line lost */
        d->fmt = c == '[' ? DP_DATASET_JSON : DP_DATASET_JSONL;
    } else {
        d->fmt = DP_DATASET_TEXT_LINES;
    }
    return DP_OK;
}

int dp_dataset_open(const char *path, const dp_dataset_opts *o, dp_dataset **out) {
    if (!out) return dp_error_set(DP_EINVAL, "dp_dataset_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return dp_error_set(DP_EINVAL, "dp_dataset_open: no path");
    dp_dataset_opts opts = {DP_DATASET_AUTO, 0, 0};
    if (o) opts = *o;
    if ((unsigned)opts.format > DP_DATASET_TEXT_WINDOWS)
        return dp_error_set(DP_EINVAL, "%s: unknown data set format %d", path, (int)opts.format);
    size_t max = opts.max_record_bytes ? opts.max_record_bytes : DEFAULT_MAX_RECORD;
    if (max > ((size_t)1 << 40))
        return dp_error_set(DP_EINVAL, "%s: max_record_bytes %zu is over 1 TiB", path, opts.max_record_bytes);
    if (opts.format == DP_DATASET_TEXT_WINDOWS && (opts.window_bytes == 0 || opts.window_bytes > max))
        return dp_error_set(DP_EINVAL, "%s: window_bytes %zu must be in 1..max_record_bytes (%zu)", path,
                            opts.window_bytes, max);
    char err[512];
    FILE *fp = dpfile_open_read(path, err, sizeof err);
    if (!fp) return dp_error_set(DP_EIO, "%s", err);
    dp_dataset *d = calloc(1, sizeof *d);
    size_t plen = strlen(path);
    if (d) d->path = malloc(plen + 1);
    if (d && d->path) d->buf = malloc(DS_CHUNK + 1);
    if (!d || !d->path || !d->buf) {
        fclose(fp);
        if (d) free(d->path);
        free(d);
        return dp_error_set(DP_EOOM, "%s: out of host memory opening the data set", path);
    }
    memcpy(d->path, path, plen + 1);
    d->fp = fp;
    d->fmt = opts.format;
    d->window_bytes = opts.window_bytes;
    d->max_record = max;
    d->cap = DS_CHUNK;
    d->limit = max + DS_SLACK > DS_CHUNK ? max + DS_SLACK : DS_CHUNK;
    d->line = 1;
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && st.st_size > 0) d->total = (uint64_t)st.st_size;
    int rc = skip_bom(d);
    if (rc == DP_OK && d->fmt == DP_DATASET_AUTO) rc = resolve_auto(d);
    if (rc != DP_OK) {
        dp_dataset_close(d);
        return -rc;
    }
    *out = d;
    return DP_OK;
}

int dp_dataset_next(dp_dataset *d, dp_record *rec) {
    if (!d || !rec) return -dp_error_set(DP_EINVAL, "dp_dataset_next: no data set or record");
    memset(rec, 0, sizeof *rec);
    cJSON_Delete(d->json);
    d->json = NULL;
    if (d->err) return -dp_error_set(d->err, "%s", d->errmsg);
    switch (d->fmt) {
    case DP_DATASET_JSON: return ds_json_next(d, rec);
    case DP_DATASET_TEXT_WINDOWS: return windows_next(d, rec);
    default: return lines_next(d, rec);
    }
}

dp_dataset_format dp_dataset_format_of(const dp_dataset *d) { return d ? d->fmt : DP_DATASET_AUTO; }

int64_t dp_dataset_bad(const dp_dataset *d, const dp_bad_record **kept, int *n_kept) {
    if (kept) *kept = d ? d->bad : NULL;
    if (n_kept) *n_kept = d ? d->n_kept : 0;
    return d ? d->n_bad : 0;
}

void dp_dataset_progress(const dp_dataset *d, uint64_t *done, uint64_t *total) {
    if (done) *done = d ? d->nread - (d->end - d->pos) : 0;
    if (total) *total = d ? d->total : 0;
}

void dp_dataset_close(dp_dataset *d) {
    if (!d) return;
    cJSON_Delete(d->json);
    if (d->fp) fclose(d->fp);
    free(d->buf);
    free(d->path);
    free(d);
}
