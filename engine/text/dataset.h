/* dataset.h: data sets read as a stream of records (issue 41.2), in bounded memory whatever the
 * file's size: JSON Lines (one JSON value a line), a JSON array of values (read element by element,
 * never parsed whole), and plain text (one record a line, or the whole file cut into windows).
 *
 * A record the reader cannot use (a JSONL line that is not JSON, an element of the array that is
 * not, a record over max_record_bytes, a line that is not UTF-8 when the file is text) is a bad
 * record: never skipped in silence, it is counted and the first DP_DATASET_BAD_KEPT of them are
 * kept with their line numbers and reasons (dp_dataset_bad), and reading goes on. A file that is
 * not in the format at all (a JSON file whose top level is not an array, a truncated array) ends
 * the stream with DP_EINVAL naming the line. Empty lines of JSONL and text-lines files are not
 * records and not bad. */
#ifndef DP_DATASET_H
#define DP_DATASET_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

typedef enum {
    DP_DATASET_AUTO = 0, /* by the name: .jsonl/.ndjson JSONL, .json a JSON array (or JSONL when its
                            first value is not an array), anything else text lines */
    DP_DATASET_JSONL,
    DP_DATASET_JSON, /* a top-level array */
    DP_DATASET_TEXT_LINES,
    DP_DATASET_TEXT_WINDOWS /* the whole file cut into windows of window_bytes (at a UTF-8 boundary) */
} dp_dataset_format;

typedef struct {
    dp_dataset_format format;
    size_t window_bytes;     /* TEXT_WINDOWS: bytes a window (> 0) */
    size_t max_record_bytes; /* a longer record is bad (0: 64 MiB) */
} dp_dataset_opts;

typedef struct {
    int64_t index;    /* 0-based among the good records */
    int64_t line;     /* 1-based line of the file where the record starts */
    const char *text; /* TEXT_*: the record's bytes (no newline), valid until the next call */
    size_t len;
    struct cJSON *json; /* JSONL / JSON: the parsed record, owned by the dataset until the next call */
} dp_record;

#define DP_DATASET_BAD_KEPT 32

typedef struct {
    int64_t line;
    char reason[120];
} dp_bad_record;

typedef struct dp_dataset dp_dataset;

/* Opens path for reading as o says (o NULL: AUTO). DP_EIO when it cannot be read, DP_EINVAL for bad
 * options (naming them). */
int dp_dataset_open(const char *path, const dp_dataset_opts *o, dp_dataset **out);
/* The next good record into *rec: 1, or 0 at the end; < 0 on an error that ends the stream
 * (DP_EIO, or DP_EINVAL when the file is not in its format; the message names the line). */
int dp_dataset_next(dp_dataset *d, dp_record *rec);
/* The format being read (AUTO resolved). */
dp_dataset_format dp_dataset_format_of(const dp_dataset *d);
/* The name of a format: "jsonl", "json", "text", "windows" ("auto" for AUTO). */
const char *dp_dataset_format_name(dp_dataset_format f);
/* Parses a format name (those above); returns 0 and sets *out, or -1. */
int dp_dataset_format_parse(const char *name, dp_dataset_format *out);
/* How many bad records so far; *kept (may be NULL) the first DP_DATASET_BAD_KEPT of them. */
int64_t dp_dataset_bad(const dp_dataset *d, const dp_bad_record **kept, int *n_kept);
/* Bytes read so far and the file's size (for progress). */
void dp_dataset_progress(const dp_dataset *d, uint64_t *done, uint64_t *total);
/* Closes d (NULL is fine). */
void dp_dataset_close(dp_dataset *d);

#endif
