/* tok_bpe.c: the BPE model over one pre-tokenized word, as HF's BPE::merge_word does it: each
 * character (each byte, byte-level) becomes its token, a character the vocabulary lacks its
 * <0xXX> byte tokens (byte_fallback) or the unk token (consecutive ones fused with fuse_unk; with
 * neither, HF drops the character, and so does this); then the adjacent pair of lowest merge
 * rank is merged, the leftmost first, until no pair has a merge. With ignore_merges a word that
 * is a token is that token. */
#include "tok_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;
    int32_t prev, next; /* -1 at the ends; a merged-away symbol has id -1 */
} sym;

typedef struct {
    int32_t rank, pos; /* the pair (pos, its next) */
    int32_t left, right;
} cand;

static int cand_less(const cand *a, const cand *b) { return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos; }

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best)) {
            m = l;
            best = &h[l];
        }
        if (r < *n && cand_less(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

/* The word's initial symbols into s (n at most), HF's order: known characters, byte fallback,
 * pending (fused) unk. Returns the count. */
static size_t initial(const dp_tokenizer *t, const unsigned char *w, size_t n, sym *s) {
    size_t k = 0;
    int pending_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t len = 1;
        int32_t id;
        if (t->byte_level) {
            id = t->single_byte[w[i]];
        } else {
            len = tk_utf8_valid(w + i, n - i, NULL);
            if (!len) len = 1; /* the text was repaired: not reached */
            id = tk_strmap_get(&t->vocab, (const char *)w + i, len);
        }
        if (id >= 0) {
            if (pending_unk) s[k++].id = t->unk;
            pending_unk = 0;
            s[k++].id = id;
        } else {
            int all = t->byte_fallback;
            for (size_t b = 0; all && b < len; b++) all = t->byte_token[w[i + b]] >= 0;
            if (all) {
                if (pending_unk) s[k++].id = t->unk;
                pending_unk = 0;
                for (size_t b = 0; b < len; b++) s[k++].id = t->byte_token[w[i + b]];
            } else if (t->unk >= 0) {
                if (pending_unk && !t->fuse_unk) s[k++].id = t->unk;
                pending_unk = 1;
            }
        }
        i += len;
    }
    if (pending_unk) s[k++].id = t->unk;
    for (size_t i = 0; i < k; i++) {
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
    }
    return k;
}

static void push_pair(const dp_tokenizer *t, const sym *s, int32_t pos, cand *h, size_t *hn) {
    int32_t nx = s[pos].next, rank, merged;
    if (nx < 0) return;
    if (tk_mergemap_get(&t->merges, s[pos].id, s[nx].id, &rank, &merged))
        heap_push(h, hn, (cand){rank, pos, s[pos].id, s[nx].id});
}

int tk_bpe_word(const dp_tokenizer *t, const char *word, size_t n, dp_ids *out) {
    const unsigned char *w = (const unsigned char *)word;
    if (n == 0) return DP_OK;
    if (t->ignore_merges) {
        int32_t id = tk_strmap_get(&t->vocab, word, n);
        if (id >= 0) return dp_ids_push(out, &id, 1);
    }
    if (n > (size_t)INT32_MAX / 4) return dp_error_set(DP_EINVAL, "tokenizer: a word of %zu bytes", n);
    sym stack_s[64];
    cand stack_h[3 * 64];
    /* at most one symbol a byte (byte fallback spells a character's bytes); the heap holds the
     * initial pairs and at most two a merge */
    size_t cap = n + 1;
    sym *s = cap <= 64 ? stack_s : malloc(cap * sizeof *s);
    cand *h = cap <= 64 ? stack_h : malloc(3 * cap * sizeof *h);
    int rc = DP_OK;
    if (!s || !h) {
        rc = dp_error_set(DP_EOOM, "tokenizer: out of host memory for a word of %zu bytes", n);
        goto done;
    }
    size_t k = initial(t, w, n, s), hn = 0;
    for (size_t i = 0; i + 1 < k; i++) push_pair(t, s, (int32_t)i, h, &hn);
    while (hn) {
        cand c = heap_pop(h, &hn);
        int32_t nx = s[c.pos].next;
        if (s[c.pos].id != c.left || nx < 0 || s[nx].id != c.right) continue; /* stale */
        int32_t rank, merged;
        if (!tk_mergemap_get(&t->merges, c.left, c.right, &rank, &merged)) continue;
        s[c.pos].id = merged; /* the pair becomes its left symbol */
        s[nx].id = -1;
        s[c.pos].next = s[nx].next;
        if (s[nx].next >= 0) s[s[nx].next].prev = c.pos;
        if (s[c.pos].prev >= 0) push_pair(t, s, s[c.pos].prev, h, &hn);
        push_pair(t, s, c.pos, h, &hn);
    }
    for (int32_t i = k ? 0 : -1; i >= 0 && rc == DP_OK; i = s[i].next) rc = dp_ids_push(out, &s[i].id, 1);
done:
    if (s != stack_s) free(s);
    if (h != stack_h) free(h);
    return rc;
}
