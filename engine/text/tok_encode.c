/* tok_encode.c: one encode, HF's order (tokenizer/mod.rs encode_single_sequence): the repaired
 * text is split on the added tokens that are not normalized (leftmost-longest; lstrip and rstrip
 * take the whitespace beside a match with it), each other piece normalized and split on the
 * normalized added tokens, pre-tokenized, each word through the BPE model; then the
 * post-processor's single-sequence template. */
#include "tok_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

/* Unicode White_Space, as Rust's char::is_whitespace (what HF's lstrip and rstrip take). */
static int is_ws(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The whitespace character ending just before s[at] (its length, 0 when none). */
static size_t ws_before(const char *s, size_t at) {
    for (size_t k = 1; k <= 4 && k <= at; k++) {
        uint32_t cp;
        size_t len = tk_utf8_valid((const unsigned char *)s + at - k, k, &cp);
        if (len == k) return is_ws(cp) ? k : 0;
    }
    return 0;
}

/* The longest added token (normalized or not, as `normalized` says) at s[i], or -1. */
static int added_at(const dp_tokenizer *t, const char *s, size_t n, size_t i, int normalized) {
    unsigned char b = (unsigned char)s[i];
    if (t->first_added[b] < 0) return -1;
    for (int k = t->first_added[b]; k <= t->last_added[b]; k++) { /* longest first */
        const tk_added *a = &t->added[k];
        if (a->normalized == normalized && a->n <= n - i && memcmp(s + i, a->content, a->n) == 0) return k;
    }
    return -1;
}

/* Text s (base: its offset in the input, for the origin flag) split on the added tokens whose
 * `normalized` flag is `normalized`, appended to out; the stretches between them go to `text`
 * (a callback-free two-way: normalize each one when norm_after). */
static int split_added(const dp_tokenizer *t, tk_ctx *c, const char *s, size_t n, size_t base, int normalized,
                       int norm_after, tk_pieces *out) {
    size_t prev = 0, i = 0;
    while (i < n) {
        int k = t->n_added ? added_at(t, s, n, i, normalized) : -1;
        if (k < 0) {
            i++;
            continue;
        }
        const tk_added *a = &t->added[k];
        size_t ms = i, me = i + a->n, w;
        if (a->lstrip)
            while (ms > prev && (w = ws_before(s, ms)) > 0) ms -= w;
        if (a->rstrip)
            for (uint32_t cp; me < n;) {
                size_t len = tk_utf8_valid((const unsigned char *)s + me, n - me, &cp);
                if (!len || !is_ws(cp)) break;
                me += len;
            }
        if (ms > prev) {
            if (norm_after)
                DP_TRY(tk_normalize(t, c, s + prev, ms - prev, base + prev == 0, out));
            else
                DP_TRY(tk_pieces_add(out, s + prev, ms - prev, -1, base + prev == 0));
        }
        DP_TRY(tk_pieces_add(out, a->content, a->n, a->id, base + ms == 0));
        prev = i = me;
    }
    if (n > prev) {
        if (norm_after) return tk_normalize(t, c, s + prev, n - prev, base + prev == 0, out);
        return tk_pieces_add(out, s + prev, n - prev, -1, base + prev == 0);
    }
    return DP_OK;
}

static int has_normalized_added(const dp_tokenizer *t) {
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].normalized) return 1;
    return 0;
}

static int normalized_added(const dp_tokenizer *t, tk_ctx *c, const tk_piece *p, const void *arg, tk_pieces *out) {
    (void)arg;
    return split_added(t, c, c->a.buf + p->off, p->n, p->origin ? 0 : 1, 1, 0, out);
}

static int encode(const dp_tokenizer *t, tk_ctx *c, const char *s, size_t n, int add_special, dp_ids *out) {
    /* 1. the added tokens matched in the raw text; the rest normalized */
    DP_TRY(split_added(t, c, s, n, 0, 0, t->n_norm > 0, &c->a));
    if (t->n_norm == 0 && !has_normalized_added(t)) goto pretok;
    /* 2. the normalized added tokens, matched in each normalized piece (offsets: the piece's) */
    DP_TRY(tk_stage(t, c, normalized_added, NULL));
pretok:
    DP_TRY(tk_pretokenize(t, c));
    /* 3. the model; 4. the template around it */
    size_t tmpl_a = 0;
    int has_seq = 0;
    if (add_special)
        for (int k = 0; k < t->n_tmpl; k++) {
            if (t->tmpl[k].is_sequence) {
                has_seq = 1;
                break;
            }
            DP_TRY(dp_ids_push(out, t->tmpl[k].ids, t->tmpl[k].n));
            tmpl_a = (size_t)k + 1;
        }
    for (size_t i = 0; i < c->a.n; i++) {
        const tk_piece *p = &c->a.p[i];
        if (p->added >= 0)
            DP_TRY(dp_ids_push(out, &p->added, 1));
        else
            DP_TRY(tk_bpe_word(t, c->a.buf + p->off, p->n, out));
    }
    if (add_special && has_seq)
        for (int k = (int)tmpl_a + 1; k < t->n_tmpl; k++) {
            if (t->tmpl[k].is_sequence) continue; /* a second $A: never in a single template HF accepts */
            DP_TRY(dp_ids_push(out, t->tmpl[k].ids, t->tmpl[k].n));
        }
    return DP_OK;
}

int dp_tokenizer_encode(const dp_tokenizer *t, const char *text, size_t len, int add_special, dp_ids *out) {
    if (!t || (!text && len) || !out) return dp_error_set(DP_EINVAL, "tokenizer: encode needs a tokenizer and text");
    char *fixed = NULL;
    size_t n = len;
    DP_TRY(tk_utf8_repair(text ? text : "", len, &fixed, &n));
    tk_ctx c = {0};
    c.md = pcre2_match_data_create(1, NULL);
    int rc = c.md ? DP_OK : dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    size_t before = out->n;
    if (rc == DP_OK) rc = encode(t, &c, fixed ? fixed : text ? text : "", n, add_special, out);
    if (rc != DP_OK) out->n = before;
    pcre2_match_data_free(c.md);
    tk_pieces_free(&c.a);
    tk_pieces_free(&c.b);
    free(fixed);
    return rc;
}
