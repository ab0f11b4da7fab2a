/* tok_decode.c: ids back to text as HF's decode does it: each id's token as the file spells it
 * (special ones dropped with skip_special), then the decoders, each over the list of strings
 * (HF's decoders): ByteLevel maps GPT-2's characters back to bytes (a token with a character
 * outside the map is kept as it is) and joins them, invalid UTF-8 replaced; Metaspace turns the
 * replacement into spaces (in the first token it drops them, unless prepend_scheme is never);
 * Replace; ByteFallback turns runs of <0xXX> tokens into their bytes (one U+FFFD a token when they
 * are not UTF-8); Fuse joins; Strip cuts its character off the ends. With no decoder the tokens
 * are joined with spaces. */
#include "tok_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    size_t n;
} str;

typedef struct {
    str *v;
    size_t n, cap;
} strs;

static int strs_add(strs *l, const char *s, size_t n) {
    DP_TRY(tk_reserve((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, 16, "decoding"));
    char *c = malloc(n + 1);
    if (!c) return dp_error_set(DP_EOOM, "tokenizer: out of host memory decoding");
    if (n) memcpy(c, s, n);
    c[n] = 0;
    l->v[l->n++] = (str){c, n};
    return DP_OK;
}

static void strs_free(strs *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].s);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* All of l joined with sep (sep_n bytes) into one string added to out. */
static int join(const strs *l, const char *sep, size_t sep_n, strs *out) {
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++) total += l->v[i].n + (i ? sep_n : 0);
    char *b = malloc(total + 1);
    if (!b) return dp_error_set(DP_EOOM, "tokenizer: out of host memory decoding");
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep_n) memcpy(b + k, sep, sep_n), k += sep_n;
        if (l->v[i].n) memcpy(b + k, l->v[i].s, l->v[i].n);
        k += l->v[i].n;
    }
    int rc = strs_add(out, b, k);
    free(b);
    return rc;
}

static int byte_level(const strs *in, strs *out) {
    strs bytes = {0};
    int rc = DP_OK;
    for (size_t i = 0; i < in->n && rc == DP_OK; i++) {
        const unsigned char *s = (const unsigned char *)in->v[i].s;
        size_t n = in->v[i].n, k = 0, j = 0;
        char *b = malloc(n + 1);
        if (!b) return strs_free(&bytes), dp_error_set(DP_EOOM, "tokenizer: out of host memory decoding");
        int mapped = 1;
        while (j < n && mapped) {
            uint32_t cp;
            size_t len = tk_utf8_valid(s + j, n - j, &cp);
            int byte = len ? tk_char_byte(cp) : -1;
            if (byte < 0)
                mapped = 0;
            else
                b[k++] = (char)byte, j += len;
        }
        rc = mapped ? strs_add(&bytes, b, k) : strs_add(&bytes, (const char *)s, n);
        free(b);
    }
    strs joined = {0};
    if (rc == DP_OK) rc = join(&bytes, "", 0, &joined);
    char *fixed = NULL;
    size_t fn = 0;
    if (rc == DP_OK) rc = tk_utf8_repair(joined.v[0].s, joined.v[0].n, &fixed, &fn);
    if (rc == DP_OK) rc = fixed ? strs_add(out, fixed, fn) : strs_add(out, joined.v[0].s, joined.v[0].n);
    free(fixed);
    strs_free(&joined);
    strs_free(&bytes);
    return rc;
}

/* s with every occurrence of pat replaced by rep (pat non-empty); drop_all: rep is nothing */
static int replace_in(const char *s, size_t n, const char *pat, size_t pn, const char *rep, size_t rn, strs *out) {
    char *b = malloc(n * (rn > pn ? rn : 1) + 1);
    if (!b) return dp_error_set(DP_EOOM, "tokenizer: out of host memory decoding");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (pn && i + pn <= n && memcmp(s + i, pat, pn) == 0) {
            memcpy(b + k, rep, rn);
            k += rn;
            i += pn;
        } else {
            b[k++] = s[i++];
        }
    }
    int rc = strs_add(out, b, k);
    free(b);
    return rc;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int flush_bytes(unsigned char *run, size_t *rn, strs *out) {
    if (!*rn) return DP_OK;
    int rc = DP_OK;
    size_t at = 0;
    int valid = 1;
    while (at < *rn && valid) {
        size_t len = tk_utf8_valid(run + at, *rn - at, NULL);
        if (!len) valid = 0;
        at += len;
    }
    if (valid)
        rc = strs_add(out, (const char *)run, *rn);
    else
        for (size_t i = 0; i < *rn && rc == DP_OK; i++) rc = strs_add(out, "\xEF\xBF\xBD", 3);
    *rn = 0;
    return rc;
}

static int byte_fallback(const strs *in, strs *out) {
    unsigned char *run = malloc(in->n + 1);
    if (!run) return dp_error_set(DP_EOOM, "tokenizer: out of host memory decoding");
    size_t rn = 0;
    int rc = DP_OK;
    for (size_t i = 0; i < in->n && rc == DP_OK; i++) {
        const char *s = in->v[i].s;
        int hi = -1, lo = -1;
        if (in->v[i].n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') {
            hi = hexval(s[3]);
            lo = hexval(s[4]);
        }
        if (hi >= 0 && lo >= 0) {
            run[rn++] = (unsigned char)(hi * 16 + lo);
            continue;
        }
        rc = flush_bytes(run, &rn, out);
        if (rc == DP_OK) rc = strs_add(out, s, in->v[i].n);
    }
    if (rc == DP_OK) rc = flush_bytes(run, &rn, out);
    free(run);
    return rc;
}

static int strip(const tk_decoder *d, const strs *in, strs *out) {
    int rc = DP_OK;
    for (size_t i = 0; i < in->n && rc == DP_OK; i++) {
        const char *s = in->v[i].s;
        size_t a = 0, e = in->v[i].n, cn = d->content_n;
        for (int k = 0; k < d->start && cn && a + cn <= e && memcmp(s + a, d->content, cn) == 0; k++) a += cn;
        for (int k = 0; k < d->stop && cn && e >= a + cn && memcmp(s + e - cn, d->content, cn) == 0; k++) e -= cn;
        rc = strs_add(out, s + a, e - a);
    }
    return rc;
}

static int apply(const tk_decoder *d, const strs *in, strs *out) {
    int rc = DP_OK;
    switch (d->kind) {
    case TK_DEC_BYTELEVEL: return byte_level(in, out);
    case TK_DEC_BYTEFALLBACK: return byte_fallback(in, out);
    case TK_DEC_FUSE: return join(in, "", 0, out);
    case TK_DEC_STRIP: return strip(d, in, out);
    case TK_DEC_REPLACE:
        for (size_t i = 0; i < in->n && rc == DP_OK; i++)
            rc = replace_in(in->v[i].s, in->v[i].n, d->pattern, d->pattern_n, d->content, d->content_n, out);
        return rc;
    case TK_DEC_METASPACE:
        for (size_t i = 0; i < in->n && rc == DP_OK; i++) {
            int drop = i == 0 && d->prepend_scheme != TK_PREPEND_NEVER;
            rc = replace_in(in->v[i].s, in->v[i].n, d->pattern, d->pattern_n, " ", drop ? 0 : 1, out);
        }
        return rc;
    default: return dp_error_set(DP_EINTERNAL, "tokenizer: decoder kind %d", d->kind);
    }
}

int dp_tokenizer_decode(const dp_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                        size_t *len) {
    if (!t || (!ids && n) || !text) return dp_error_set(DP_EINVAL, "tokenizer: decode needs a tokenizer and ids");
    *text = NULL;
    strs a = {0}, b = {0};
    int rc = DP_OK;
    for (size_t i = 0; i < n && rc == DP_OK; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->token[id]) {
            rc = dp_error_set(DP_EINVAL, "tokenizer: decode: id %d at position %zu is not a token (ids 0..%lld)",
                              (int)id, i, (long long)t->n_ids - 1);
            break;
        }
        if (skip_special && t->is_special[id]) continue;
        rc = strs_add(&a, t->token[id], strlen(t->token[id]));
    }
    for (int k = 0; k < t->n_dec && rc == DP_OK; k++) {
        rc = apply(&t->dec[k], &a, &b);
        strs_free(&a);
        a = b;
        b = (strs){0};
    }
    strs out = {0};
    if (rc == DP_OK) rc = t->n_dec ? join(&a, "", 0, &out) : join(&a, " ", 1, &out);
    if (rc == DP_OK) {
        *text = out.v[0].s;
        if (len) *len = out.v[0].n;
        out.v[0].s = NULL;
    }
    strs_free(&out);
    strs_free(&a);
    strs_free(&b);
    return rc;
}
