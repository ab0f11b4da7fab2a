/* dataset_internal.h: the data set reader's state and its buffer, shared by dataset.c (opening,
 * JSONL, text lines and windows), dataset_json.c (a top-level JSON array read element by element)
 * and dataset_buffer.c (the buffer, the bad records, the error that ends the stream). */
#ifndef DP_DATASET_INTERNAL_H
#define DP_DATASET_INTERNAL_H

#include "dataset.h"

#include <stdio.h>

/* The buffer starts at 1 MiB and grows only to hold one record (max_record_bytes + DS_SLACK). */
#define DS_CHUNK ((size_t)1 << 20)
#define DS_SLACK 8

struct dp_dataset {
    FILE *fp;
    char *path; /* for messages */
    dp_dataset_format fmt;
    size_t window_bytes, max_record;
    unsigned char *buf; /* cap + 1 bytes: one past the data is always writable (a NUL for cJSON) */
    size_t cap, limit;  /* limit: the most cap may grow to */
    size_t pos, end;    /* the unread bytes are buf[pos, end) */
    int eof;            /* the file gave its last byte */
    uint64_t nread, total;
    int64_t line; /* the line of buf[pos] (1-based) */
    size_t col;   /* JSON: the 0-based column of buf[pos] */
    int64_t index;
    int64_t n_bad;
    int n_kept;
    dp_bad_record bad[DP_DATASET_BAD_KEPT];
    struct cJSON *json; /* the last record's, freed at the next call */
    int err;            /* sticky: the error that ended the stream */
    char errmsg[400];
    /* JSON: 0 before the '[', 1 before the first element, 2 after an element (',' or ']' next),
     * 3 after the ']', 4 before an element after a ',' */
    int jstate;
};

/* JSON's whitespace (and what a blank line holds). */
static inline int ds_is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Reads more of the file after moving the unread bytes to the buffer's start, growing the buffer
 * (up to limit) when it is full; *got the bytes read (0 at the end of the file, or when the buffer
 * is full at its limit). DP_OK, or -DP_EIO / -DP_EOOM (the stream ended). */
int ds_fill(dp_dataset *d, size_t *got);
/* Counts a bad record at line (reason printf-style). */
void ds_bad(dp_dataset *d, int64_t line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Ends the stream with code and the message "<path>: ..." (kept for later calls); returns -code. */
int ds_fail(dp_dataset *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Consumes n unread bytes, counting lines and the column. */
void ds_advance(dp_dataset *d, size_t n);

/* Consumes JSON whitespace; *c the next byte (left unread), or -1 at the end of the file. DP_OK or
 * the error that ended the stream. */
int ds_skip_ws(dp_dataset *d, int *c);
/* JSON: the next element of the top-level array. */
int ds_json_next(dp_dataset *d, dp_record *rec);

#endif
