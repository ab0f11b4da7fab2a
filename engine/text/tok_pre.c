/* tok_pre.c: the normalizers (Prepend, Replace, the Unicode forms by utf8proc) and pre-tokenizers (ByteLevel, Split,
 * Metaspace, Digits) over the pieces of one encode call, with HF's split behaviours (normalizer.rs): the pattern's
 * matches and the stretches between them cover the text; Removed drops the matches, Isolated keeps each apart,
 * MergedWithPrevious and MergedWithNext glue a match to the stretch before or after it, Contiguous glues adjacent
 * matches; invert swaps matches and stretches; empty pieces are dropped. Patterns are PCRE2 (UTF, UCP) where HF uses
 * Oniguruma; empty matches are skipped (no pattern HF ships matches empty). */
#include "tok_internal.h"

#include "error.h"

#include <stdlib.h>
#include <utf8proc.h>
#include <string.h>

pcre2_code *tk_regex_compile(const char *pattern, size_t n, int is_literal, const char *what) {
    int err;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | (is_literal ? PCRE2_LITERAL : PCRE2_UCP); /* UCP is no option of a literal */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, n, opts, &err, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        dp_error_set(DP_EINVAL, "tokenizer: %s: the pattern does not compile at offset %zu: %s", what, (size_t)at,
                     (const char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter where JIT is unavailable */
    return re;
}

static size_t char_len(const char *s, size_t n) {
    size_t k = tk_utf8_valid((const unsigned char *)s, n, NULL);
    return k ? k : 1;
}

int tk_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t start, size_t *ms,
                  size_t *me) {
    while (start <= n) {
        int r = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) return 0;
        if (r == PCRE2_ERROR_JIT_STACKLIMIT) /* a pathological input: the interpreter has no such limit */
            r = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (r < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(r, msg, sizeof msg);
            return dp_error_set(DP_EINVAL, "tokenizer: matching a pre-tokenizer pattern failed: %s", (const char *)msg),
                   -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return 1;
        }
        if (ov[0] >= n) return 0;
        start = ov[0] + char_len(s + ov[0], n - ov[0]);
    }
    return 0;
}

/* ---- normalizers ------------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static int buf_put(buf *b, const char *s, size_t n) {
    if (n > ((size_t)1 << 40) - b->n) return dp_error_set(DP_EINVAL, "tokenizer: a text over 1 TiB");
    DP_TRY(tk_reserve((void **)&b->p, &b->cap, b->n + n + 1, 1, 256, "a normalized text"));
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return DP_OK;
}

/* s with every match of the pattern (literal or re) replaced by content, into out. */
static int replace_all(const tk_normalizer *z, pcre2_match_data *md, const char *s, size_t n, buf *out) {
    size_t at = 0;
    for (;;) {
        size_t ms, me;
        int found;
        if (z->re) {
            found = tk_regex_next(z->re, md, s, n, at, &ms, &me);
            if (found < 0) return dp_error_code();
        } else {
            found = 0;
            for (size_t i = at; z->pattern_n && i + z->pattern_n <= n; i++)
                if (memcmp(s + i, z->pattern, z->pattern_n) == 0) {
                    ms = i;
                    me = i + z->pattern_n;
                    found = 1;
                    break;
                }
        }
        if (!found) break;
        DP_TRY(buf_put(out, s + at, ms - at));
        DP_TRY(buf_put(out, z->content, z->content_n));
        at = me;
    }
    return buf_put(out, s + at, n - at);
}

/* s in a Unicode normalization form (utf8proc's options), into out. The text is valid UTF-8 (repaired
 * first), NULs included (the length is given). */
static int unicode_form(int forms, const char *s, size_t n, buf *out) {
    if (!n) return DP_OK;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)forms);
    if (m < 0) {
        free(dst);
        return dp_error_set(m == UTF8PROC_ERROR_NOMEM ? DP_EOOM : DP_EINVAL, "tokenizer: a normalizer: %s",
                            utf8proc_errmsg(m));
    }
    int rc = buf_put(out, (const char *)dst, (size_t)m);
    free(dst);
    return rc;
}

int tk_normalize(const dp_tokenizer *t, tk_ctx *c, const char *s, size_t n, int origin, tk_pieces *out) {
    buf x = {0}, y = {0};
    int rc = buf_put(&x, s, n);
    for (int k = 0; k < t->n_norm && rc == DP_OK; k++) {
        const tk_normalizer *z = &t->norm[k];
        y.n = 0;
        if (z->kind == TK_NORM_PREPEND) {
            if (x.n) rc = buf_put(&y, z->pattern, z->pattern_n);
            if (rc == DP_OK) rc = buf_put(&y, x.p, x.n);
        } else if (z->kind == TK_NORM_UNICODE) {
            rc = unicode_form(z->forms, x.p, x.n, &y);
        } else {
            rc = replace_all(z, c->md, x.p, x.n, &y);
        }
        buf tmp = x;
        x = y;
        y = tmp;
    }
    if (rc == DP_OK && x.n) rc = tk_pieces_add(out, x.p, x.n, -1, origin);
    free(x.p);
    free(y.p);
    return rc;
}

/* ---- pre-tokenizers --------------------------------------------------------------------------- */

typedef struct {
    size_t s, e;
    int match;
} span;

/* The spans of s (matches of re, or of the single character cp when re is NULL), HF's
 * find_matches: stretches and matches in order, covering s. */
static int find_spans(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, span **out, size_t *count) {
    size_t cap = 16, k = 0, prev = 0, at = 0;
    span *v = malloc(cap * sizeof *v);
    if (!v) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    for (;;) {
        size_t ms, me;
        int r = tk_regex_next(re, md, s, n, at, &ms, &me);
        if (r < 0) {
            free(v);
            return dp_error_code();
        }
        if (k + 2 >= cap) {
            cap *= 2;
            span *w = realloc(v, cap * sizeof *w);
            if (!w) {
                free(v);
                return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
            }
            v = w;
        }
        if (!r) break;
        if (ms != prev) v[k++] = (span){prev, ms, 0};
        v[k++] = (span){ms, me, 1};
        prev = at = me;
    }
    if (prev != n || k == 0) v[k++] = (span){prev, n, 0};
    *out = v;
    *count = k;
    return DP_OK;
}

/* Piece text s split by re under behavior (invert: matches are the stretches), into out. */
static int split_piece(const pcre2_code *re, int behavior, int invert, tk_ctx *c, const char *s, size_t n, int origin,
                       tk_pieces *out) {
    span *v = NULL;
    size_t k = 0;
    DP_TRY(find_spans(re, c->md, s, n, &v, &k));
    for (size_t i = 0; i < k; i++) v[i].match ^= invert;
    /* (span, removed) as HF folds them */
    size_t m = 0;
    int prev_match = 0;
    if (behavior == TK_SPLIT_MERGED_NEXT) {
        for (size_t i = k; i-- > 0;) { /* folded from the end, then reversed */
            int mt = v[i].match;
            if (mt && !prev_match && m > 0) {
                v[k - m].s = v[i].s; /* the last pushed is at the front of what is kept */
            } else {
                v[k - ++m] = (span){v[i].s, v[i].e, 0};
            }
            prev_match = mt;
        }
        memmove(v, v + (k - m), m * sizeof *v);
    } else {
        for (size_t i = 0; i < k; i++) {
            int mt = v[i].match, glue = 0, drop = 0;
            if (behavior == TK_SPLIT_REMOVED) drop = mt;
            if (behavior == TK_SPLIT_CONTIGUOUS) glue = mt == prev_match;
            if (behavior == TK_SPLIT_MERGED_PREV) glue = mt && !prev_match;
            if (glue && m > 0)
                v[m - 1].e = v[i].e;
            else
                v[m++] = (span){v[i].s, v[i].e, drop};
            prev_match = mt;
        }
    }
    int rc = DP_OK;
    for (size_t i = 0; i < m && rc == DP_OK; i++) {
        if (v[i].match || v[i].e == v[i].s) continue; /* removed, or empty */
        rc = tk_pieces_add(out, s + v[i].s, v[i].e - v[i].s, -1, origin && v[i].s == 0);
    }
    free(v);
    return rc;
}

/* One pre-tokenizer over piece p of list `in` (its buffer), into out. */
static int pre_one(const tk_pretok *q, tk_ctx *c, const tk_pieces *in, const tk_piece *p, tk_pieces *out) {
    const char *s = in->buf + p->off;
    size_t n = p->n;
    buf x = {0};
    int rc = DP_OK;
    switch (q->kind) {
    case TK_PRE_BYTELEVEL:
        if (q->add_prefix_space && n && s[0] != ' ') {
            rc = buf_put(&x, " ", 1);
            if (rc == DP_OK) rc = buf_put(&x, s, n);
            s = x.p;
            n = x.n;
        }
        if (rc == DP_OK)
            rc = q->use_regex ? split_piece(q->re, TK_SPLIT_ISOLATED, 0, c, s, n, p->origin, out)
                              : tk_pieces_add(out, s, n, -1, p->origin);
        break;
    case TK_PRE_SPLIT:
    case TK_PRE_DIGITS: rc = split_piece(q->re, q->behavior, q->invert, c, s, n, p->origin, out); break;
    case TK_PRE_METASPACE: {
        for (size_t i = 0; i < n && rc == DP_OK; i++) /* ' ' -> the replacement */
            rc = s[i] == ' ' ? buf_put(&x, q->replacement, q->replacement_n) : buf_put(&x, s + i, 1);
        int starts = x.n >= q->replacement_n && memcmp(x.p, q->replacement, q->replacement_n) == 0;
        int prepend = x.n && !starts &&
                      (q->prepend_scheme == TK_PREPEND_ALWAYS || (q->prepend_scheme == TK_PREPEND_FIRST && p->origin));
        buf y = {0};
        if (rc == DP_OK && prepend) rc = buf_put(&y, q->replacement, q->replacement_n);
        if (rc == DP_OK) rc = buf_put(&y, x.p, x.n);
        if (rc == DP_OK) {
            if (q->split)
                rc = split_piece(q->re, TK_SPLIT_MERGED_NEXT, 0, c, y.p, y.n, p->origin, out);
            else if (y.n)
                rc = tk_pieces_add(out, y.p, y.n, -1, p->origin);
        }
        free(y.p);
        break;
    }
    default: rc = dp_error_set(DP_EINTERNAL, "tokenizer: pre-tokenizer kind %d", q->kind);
    }
    free(x.p);
    return rc;
}

static int pre_stage(const dp_tokenizer *t, tk_ctx *c, const tk_piece *p, const void *arg, tk_pieces *out) {
    (void)t;
    return pre_one(arg, c, &c->a, p, out);
}

int tk_pretokenize(const dp_tokenizer *t, tk_ctx *c) {
    for (int k = 0; k < t->n_pre; k++) DP_TRY(tk_stage(t, c, pre_stage, &t->pre[k]));
    return DP_OK;
}
