/* dataset_buffer.c: the data set reader's buffer (dataset_internal.h), shared by dataset.c and
 * dataset_json.c: refilled from the file (the unread bytes moved to its start, grown only to hold
 * one record, up to its limit), consumed with its lines and column counted, JSON whitespace
 * skipped; and the bad records and the error that ends the stream recorded. */
#include "dataset_internal.h"

#include "error.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int ds_fail(dp_dataset *d, int code, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(d->errmsg, sizeof d->errmsg, "%s: %s", d->path, msg);
    d->err = code;
    dp_error_set(code, "%s", d->errmsg);
    return -code; /* negative: 1 (DP_EINVAL) would read as a record */
}

void ds_bad(dp_dataset *d, int64_t line, const char *fmt, ...) {
    if (d->n_kept < DP_DATASET_BAD_KEPT) {
        dp_bad_record *b = &d->bad[d->n_kept++];
        b->line = line;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->reason, sizeof b->reason, fmt, ap);
        va_end(ap);
    }
    d->n_bad++;
}

int ds_fill(dp_dataset *d, size_t *got) {
    *got = 0;
    if (d->eof) return DP_OK;
    if (d->pos > 0) { /* the unread bytes to the start */
        memmove(d->buf, d->buf + d->pos, d->end - d->pos);
        d->end -= d->pos;
        d->pos = 0;
    }
    if (d->end == d->cap) {
        if (d->cap >= d->limit) return DP_OK; /* full at its limit: the caller's record is too long */
        size_t cap = d->cap > d->limit / 2 ? d->limit : d->cap * 2;
        unsigned char *b = realloc(d->buf, cap + 1);
        if (!b) return ds_fail(d, DP_EOOM, "out of host memory growing the read buffer to %zu bytes", cap);
        d->buf = b;
        d->cap = cap;
    }
    size_t n = fread(d->buf + d->end, 1, d->cap - d->end, d->fp);
    if (n == 0) {
        if (ferror(d->fp)) return ds_fail(d, DP_EIO, "read error after %llu bytes", (unsigned long long)d->nread);
        d->eof = 1;
    }
    d->end += n;
    d->nread += n;
    *got = n;
    return DP_OK;
}

void ds_advance(dp_dataset *d, size_t n) {
    const unsigned char *p = d->buf + d->pos, *e = p + n;
    for (;;) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(e - p));
        if (!nl) break;
        d->line++;
        d->col = 0;
        p = nl + 1;
    }
    d->col += (size_t)(e - p);
    d->pos += n;
}

int ds_skip_ws(dp_dataset *d, int *c) {
    for (;;) {
        size_t i = d->pos;
        while (i < d->end && ds_is_ws(d->buf[i])) i++;
        ds_advance(d, i - d->pos);
        if (d->pos < d->end) {
            *c = d->buf[d->pos];
            return DP_OK;
        }
        size_t got;
        DP_TRY(ds_fill(d, &got));
        if (!got) {
            *c = -1;
            return DP_OK;
        }
    }
}
