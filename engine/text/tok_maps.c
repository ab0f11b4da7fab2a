/* tok_maps.c: the tokenizer's hash maps (token bytes -> id, id pair -> merge), the list of pieces
 * text travels through the pipeline in, and one stage of the pipeline over it. */
#include "tok_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    return h ? h : 1;
}

int tk_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first, const char *what) {
    if (need <= *cap) return DP_OK;
    size_t c = *cap ? *cap : first;
    while (c < need) {
        if (c > ((size_t)1 << 46) / elem) return dp_error_set(DP_EOOM, "tokenizer: %s past 64 TiB", what);
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return dp_error_set(DP_EOOM, "tokenizer: out of host memory for %s", what);
    *p = q;
    *cap = c;
    return DP_OK;
}

static const char *key_at(const tk_strmap *m, size_t slot, size_t *n) {
    *n = (size_t)(m->key[slot] & 0xFFFFFF);
    return m->pool + (m->key[slot] >> 24);
}

static int strmap_grow(tk_strmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *hash = calloc(cap, sizeof *hash), *key = malloc(cap * sizeof *key);
    int32_t *val = malloc(cap * sizeof *val);
    if (!hash || !key || !val) {
        free(hash);
        free(key);
        free(val);
        return dp_error_set(DP_EOOM, "tokenizer: out of host memory for the vocabulary");
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->hash[i]) continue;
        size_t j = m->hash[i] & (cap - 1);
        while (hash[j]) j = (j + 1) & (cap - 1);
        hash[j] = m->hash[i];
        key[j] = m->key[i];
        val[j] = m->val[i];
    }
    free(m->hash);
    free(m->key);
    free(m->val);
    m->hash = hash;
    m->key = key;
    m->val = val;
    m->cap = cap;
    return DP_OK;
}

int tk_strmap_put(tk_strmap *m, const char *s, size_t n, int32_t v) {
    if (n > 0xFFFFFF) return dp_error_set(DP_EINVAL, "tokenizer: a token of %zu bytes (at most 16 MiB)", n);
    if ((m->n + 1) * 2 > m->cap) DP_TRY(strmap_grow(m));
    uint64_t h = hash_bytes(s, n);
    size_t j = h & (m->cap - 1), kn;
    while (m->hash[j]) {
        const char *k = key_at(m, j, &kn);
        if (m->hash[j] == h && kn == n && memcmp(k, s, n) == 0) {
            m->val[j] = v;
            return DP_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    DP_TRY(tk_reserve((void **)&m->pool, &m->pool_cap, m->pool_n + n + 1, 1, 65536, "the vocabulary"));
    if (m->pool_n >= (size_t)1 << 40) return dp_error_set(DP_EINVAL, "tokenizer: vocabulary over 1 TiB");
    memcpy(m->pool + m->pool_n, s, n);
    m->pool[m->pool_n + n] = 0;
    m->hash[j] = h;
    m->key[j] = (uint64_t)m->pool_n << 24 | (uint64_t)n;
    m->val[j] = v;
    m->pool_n += n + 1;
    m->n++;
    return DP_OK;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t n) {
    if (!m->cap) return -1;
    uint64_t h = hash_bytes(s, n);
    size_t j = h & (m->cap - 1), kn;
    while (m->hash[j]) {
        if (m->hash[j] == h) {
            const char *k = key_at(m, j, &kn);
            if (kn == n && memcmp(k, s, n) == 0) return m->val[j];
        }
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tk_strmap_free(tk_strmap *m) {
    free(m->hash);
    free(m->val);
    free(m->key);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

int tk_mergemap_put(tk_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        uint64_t *key = calloc(cap, sizeof *key);
        int32_t *r = malloc(cap * sizeof *r), *g = malloc(cap * sizeof *g);
        if (!key || !r || !g) {
            free(key);
            free(r);
            free(g);
            return dp_error_set(DP_EOOM, "tokenizer: out of host memory for the merges");
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->key[i]) continue;
            size_t j = mix64(m->key[i]) & (cap - 1);
            while (key[j]) j = (j + 1) & (cap - 1);
            key[j] = m->key[i];
            r[j] = m->rank[i];
            g[j] = m->merged[i];
        }
        free(m->key);
        free(m->rank);
        free(m->merged);
        m->key = key;
        m->rank = r;
        m->merged = g;
        m->cap = cap;
    }
    uint64_t k = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    size_t j = mix64(k) & (m->cap - 1);
    while (m->key[j] && m->key[j] != k) j = (j + 1) & (m->cap - 1);
    if (m->key[j]) return DP_OK; /* a repeated merge keeps its first (lowest) rank, as HF's map does */
    m->key[j] = k;
    m->rank[j] = rank;
    m->merged[j] = merged;
    m->n++;
    return DP_OK;
}

int tk_mergemap_get(const tk_mergemap *m, int32_t left, int32_t right, int32_t *rank, int32_t *merged) {
    if (!m->cap) return 0;
    uint64_t k = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    for (size_t j = mix64(k) & (m->cap - 1); m->key[j]; j = (j + 1) & (m->cap - 1))
        if (m->key[j] == k) {
            *rank = m->rank[j];
            *merged = m->merged[j];
            return 1;
        }
    return 0;
}

void tk_mergemap_free(tk_mergemap *m) {
    free(m->key);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

int tk_pieces_add(tk_pieces *l, const char *s, size_t n, int32_t added, int origin) {
    DP_TRY(tk_reserve((void **)&l->buf, &l->buf_cap, l->buf_n + n, 1, 256, "the text's pieces"));
    DP_TRY(tk_reserve((void **)&l->p, &l->cap, l->n + 1, sizeof *l->p, 16, "the text's pieces"));
    if (n) memcpy(l->buf + l->buf_n, s, n);
    l->p[l->n++] = (tk_piece){l->buf_n, n, added, origin};
    l->buf_n += n;
    return DP_OK;
}

void tk_pieces_clear(tk_pieces *l) {
    l->buf_n = 0;
    l->n = 0;
}

void tk_pieces_free(tk_pieces *l) {
    free(l->buf);
    free(l->p);
    memset(l, 0, sizeof *l);
}

int tk_stage(const dp_tokenizer *t, tk_ctx *c, tk_piece_fn fn, const void *arg) {
    tk_pieces_clear(&c->b);
    for (size_t i = 0; i < c->a.n; i++) {
        const tk_piece *p = &c->a.p[i];
        if (p->added >= 0)
            DP_TRY(tk_pieces_add(&c->b, c->a.buf + p->off, p->n, p->added, p->origin));
        else
            DP_TRY(fn(t, c, p, arg, &c->b));
    }
    tk_pieces tmp = c->a;
    c->a = c->b;
    c->b = tmp;
    return DP_OK;
}

int dp_ids_push(dp_ids *out, const int32_t *ids, size_t n) {
    DP_TRY(tk_reserve((void **)&out->ids, &out->cap, out->n + n, sizeof *out->ids, 64, "the ids"));
    if (n) memcpy(out->ids + out->n, ids, n * sizeof *ids);
    out->n += n;
    return DP_OK;
}

void dp_ids_free(dp_ids *out) {
    free(out->ids);
    memset(out, 0, sizeof *out);
}
