/* dataset_json.c: a data set that is one top-level JSON array, read element by element and never
 * parsed whole. An incremental scanner follows strings (with their escapes) and the nesting depth
 * to find where each element ends (a ',' or ']' at depth 0 outside a string); the element alone is
 * parsed with cJSON. An element that does not parse, or is longer than max_record_bytes (skipped to
 * its end without being held), is a bad record, and reading goes on after it. A file whose top level
 * is not an array, one that ends before the array's ']', or bytes after the ']' end the stream
 * with DP_EINVAL naming the line. */
#include "dataset_internal.h"

#include "error.h"

#include <cjson/cJSON.h>
#include <string.h>

/* The line and 1-based column of byte e of an element that starts at (line, col). */
static void where(const unsigned char *s, size_t e, int64_t line, size_t col, int64_t *l, size_t *c) {
    size_t last = 0;
    int nl = 0;
    for (size_t i = 0; i < e; i++)
        if (s[i] == '\n') line++, last = i + 1, nl = 1;
    *l = line;
    *c = (nl ? e - last : col + e) + 1;
}

/* The element at pos: 1 with rec set, 2 when it was bad (counted), < 0 on an error. */
static int element(dp_dataset *d, dp_record *rec) {
    int64_t line = d->line;
    size_t col = d->col, k = 0, depth = 0;
    int in_str = 0, esc = 0, too_long = 0;
    for (;;) {
        const unsigned char *s = d->buf + d->pos;
        size_t n = d->end - d->pos;
        int found = 0;
        for (; k < n; k++) {
            unsigned char ch = s[k];
            if (in_str) {
                if (esc)
                    esc = 0;
                else if (ch == '\\')
                    esc = 1;
                else if (ch == '"')
                    in_str = 0;
            } else if (ch == '"') {
                in_str = 1;
            } else if (ch == '[' || ch == '{') {
                depth++;
            } else if (ch == ']' || ch == '}') {
                if (depth > 0)
                    depth--;
                else if (ch == ']') {
                    found = 1;
                    break;
                }
            } else if (ch == ',' && depth == 0) {
                found = 1;
                break;
            }
        }
        if (found) break;
        if (too_long || k > d->max_record) { /* over the cap: what is held is dropped */
            too_long = 1;
            ds_advance(d, k);
            k = 0;
        }
        size_t got;
        DP_TRY(ds_fill(d, &got));
        if (!got && d->eof) return ds_fail(d, DP_EINVAL, "ends inside the array (no closing ']')");
        if (!got) too_long = 1; /* the buffer full at its limit (not reached: the cap comes first) */
    }
    const unsigned char *s = d->buf + d->pos;
    size_t m = k;
    while (m > 0 && ds_is_ws(s[m - 1])) m--;
    d->jstate = 2;
    if (too_long || m > d->max_record) {
        ds_advance(d, k);
        ds_bad(d, line, "over max_record_bytes (%zu)", d->max_record);
        return 2;
    }
    /* s[m] (whitespace or the ',' / ']') becomes a NUL for cJSON to stop at, then comes back */
    unsigned char *t = d->buf + d->pos, saved = t[m];
    t[m] = 0;
    const char *stop = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts((const char *)s, m, &stop, 0);
    size_t at = stop ? (size_t)((const unsigned char *)stop - s) : 0;
    if (j)
        while (at < m && ds_is_ws(s[at])) at++;
    if (!j || at < m) {
        t[m] = saved;
        cJSON_Delete(j);
        int64_t el;
        size_t ec;
        where(s, at < m ? at : m, line, col, &el, &ec);
        ds_bad(d, line, "not JSON at line %lld column %zu%s", (long long)el, ec, j ? " (bytes after the value)" : "");
        ds_advance(d, k);
        return 2;
    }
    rec->json = d->json = j;
    rec->text = (const char *)s; /* the element's JSON text, valid until the next call */
    rec->len = m;
    rec->line = line;
    rec->index = d->index++;
    t[m] = saved; /* the lines counted over the real bytes */
    ds_advance(d, k);
    if (m < k) t[m] = 0; /* whitespace now consumed: the text stays NUL-terminated */
    return 1;
}

int ds_json_next(dp_dataset *d, dp_record *rec) {
    for (;;) {
        int c;
        DP_TRY(ds_skip_ws(d, &c));
        int64_t line = d->line;
        switch (d->jstate) {
        case 0: /* before the '[' */
            if (c != '[')
                return ds_fail(d, DP_EINVAL, "line %lld: the top level is not a JSON array ([...])%s", (long long)line,
                               c < 0 ? ": the file is empty" : "");
            ds_advance(d, 1);
            d->jstate = 1;
            break;
        case 1: /* before an element */
        case 4:
            if (c < 0) return ds_fail(d, DP_EINVAL, "ends inside the array (no closing ']')");
            if (c == ']' || c == ',') {
                if (c == ',' || d->jstate == 4) ds_bad(d, line, "an empty element (two ',' or a ',' before the ']')");
                ds_advance(d, 1);
                d->jstate = c == ']' ? 3 : 4;
                break;
            }
            {
                int r = element(d, rec);
                if (r != 2) return r;
            }
            break;
        case 2: /* after an element: the scanner stopped at its ',' or ']' */
            if (c < 0) return ds_fail(d, DP_EINVAL, "ends inside the array (no closing ']')");
            ds_advance(d, 1);
            d->jstate = c == ']' ? 3 : 4;
            break;
        default: /* after the ']' */
            if (c < 0) return 0;
            return ds_fail(d, DP_EINVAL, "line %lld: bytes after the array's closing ']'", (long long)line);
        }
    }
}
