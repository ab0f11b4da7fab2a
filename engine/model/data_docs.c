/* data_docs.c: the documents of a token file, ended by an end-of-sequence id (see data.h).
 * One pass over the file in chunks; the index grows by doubling. */
#include "data.h"

#include "error.h"
#include "safe_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void dp_docs_free(dp_docs *d) {
    free(d->start);
    free(d->length);
    memset(d, 0, sizeof *d);
}

/* appends document [start, start + n) (n tokens) to d, or counts it empty */
static int add_doc(dp_docs *d, int64_t *cap, int64_t start, int64_t n) {
    if (n < 2) {
        if (n == 1) d->empty++;
        return DP_OK;
    }
    if (d->n == *cap) {
        int64_t c = *cap ? 2 * *cap : 1024;
        int64_t *s = realloc(d->start, (size_t)c * sizeof *s);
        if (s) d->start = s;
        int64_t *l = s ? realloc(d->length, (size_t)c * sizeof *l) : NULL;
        if (l) d->length = l;
        if (!s || !l) return dp_error_set(DP_EOOM, "documents: out of host memory for %lld documents", (long long)c);
        *cap = c;
    }
    d->start[d->n] = start;
    d->length[d->n] = n - 1;
    d->n++;
    return DP_OK;
}

int dp_docs_scan(FILE *f, const char *name, dp_token_dtype dt, int64_t eos, int64_t vocab, dp_docs *out) {
    memset(out, 0, sizeof *out);
    const int w = dt == DP_TOKENS_U32 ? 4 : 2;
    if (vocab < 1 || vocab > INT32_MAX)
        return dp_error_set(DP_EINVAL, "documents: vocabulary size %lld is out of range", (long long)vocab);
    if (eos < 0 || eos >= vocab)
        return dp_error_set(DP_EINVAL, "documents: eos %lld is outside the vocabulary [0, %lld) of '%s'",
                            (long long)eos, (long long)vocab, name);
    unsigned char buf[1 << 16];
    int64_t cap = 0, at = 0, doc_start = 0;
    unsigned char part[4];
    size_t have = 0; /* bytes of a token split across two reads */
    int rc = DP_OK;
    for (;;) {
        size_t got = fread(buf, 1, sizeof buf, f);
        if (got == 0) break;
        size_t i = 0;
        while (i < got && rc == DP_OK) {
            const unsigned char *p;
            if (have > 0 || got - i < (size_t)w) { /* assemble a token across reads */
                while (have < (size_t)w && i < got) part[have++] = buf[i++];
                if (have < (size_t)w) break;
                p = part;
                have = 0;
            } else {
                p = buf + i;
                i += (size_t)w;
            }
            uint32_t id = w == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                                 : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            if ((int64_t)id >= vocab) {
                rc = dp_error_set(DP_EINVAL,
                                  "documents: token %u at position %lld of '%s' is outside the vocabulary [0, %lld)",
                                  id, (long long)at, name, (long long)vocab);
                break;
            }
            at++;
            if ((int64_t)id == eos) {
                rc = add_doc(out, &cap, doc_start, at - doc_start);
                doc_start = at;
            }
        }
        if (rc != DP_OK) break;
    }
    if (rc == DP_OK && ferror(f)) rc = dp_error_set(DP_EIO, "documents: cannot read '%s': %s", name, strerror(errno));
    if (rc == DP_OK && have != 0)
        rc = dp_error_set(DP_EIO, "documents: '%s' ends in a partial token: not a whole number of %s tokens", name,
                          dp_token_dtype_name(dt));
    if (rc == DP_OK) rc = add_doc(out, &cap, doc_start, at - doc_start); /* a last document without eos */
    out->tokens = at;
    if (rc == DP_OK && out->n == 0)
        rc = dp_error_set(DP_EINVAL,
                          "documents: '%s' (%lld %s tokens) holds no document of two tokens or more ended by eos %lld: "
                          "an empty data set",
                          name, (long long)at, dp_token_dtype_name(dt), (long long)eos);
    if (rc != DP_OK) dp_docs_free(out);
    return rc;
}

int dp_docs_open(const char *path, dp_token_dtype dt, int64_t eos, int64_t vocab, dp_docs *out) {
    memset(out, 0, sizeof *out);
    char why[1024];
    FILE *f = dpfile_open_read(path, why, sizeof why);
    if (!f) return dp_error_set(DP_EIO, "documents: cannot open token file %s", why);
    int rc = dp_docs_scan(f, path, dt, eos, vocab, out);
    fclose(f);
    return rc;
}
