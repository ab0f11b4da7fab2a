/* fuzz_mutate.c: the fuzz targets' shared generator and mutations; see fuzz_mutate.h. */
#include "fuzz_mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 1;

void fuzz_seed(uint64_t seed) { rng_state = seed; }

uint64_t fuzz_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

size_t fuzz_below(size_t n) { return n ? (size_t)(fuzz_u64() % n) : 0; }

char *fuzz_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *fuzz_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    if (buf && len) *len = (size_t)n;
    fclose(f);
    return buf;
}

int fuzz_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* ---- structural mutations ------------------------------------------------------------------- */

typedef struct node_list {
    cJSON **items;
    size_t n, cap;
} node_list;

static void collect(cJSON *it, node_list *l) {
    for (cJSON *c = it->child; c; c = c->next) {
        if (l->n == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 256;
            l->items = realloc(l->items, l->cap * sizeof *l->items);
        }
        l->items[l->n++] = c;
        collect(c, l);
    }
}

static cJSON *parent_of(cJSON *root, cJSON *item) {
    for (cJSON *c = root->child; c; c = c->next) {
        if (c == item) return root;
        cJSON *p = parent_of(c, item);
        if (p) return p;
    }
    return NULL;
}

cJSON *fuzz_hostile_value(const char *const *extra, size_t n_extra) {
    static const char *const raws[] = {"0",
                                       "-1",
                                       "1.5",
                                       "0.5",
                                       "-0",
                                       "1e300",
                                       "-1e300",
                                       "1e999",
                                       "-1e999",
                                       "9223372036854775807",
                                       "9223372036854775808",
                                       "-9223372036854775809",
                                       "18446744073709551616",
                                       "4.5e15",
                                       "1e-320",
                                       "123456789012345678901234567890",
                                       "3",
                                       "2.0",
                                       "true",
                                       "false",
                                       "null",
                                       "\"\"",
                                       "\"NaN\"",
                                       "\"Infinity\"",
                                       "\"ok\"",
                                       "\"oom\"",
                                       "\"ghost\"",
                                       "\"%s%n%d\"",
                                       "[]",
                                       "{}",
                                       "[0]",
                                       "[\"x\"]",
                                       "{\"a\":1}",
                                       "[null,1,\"2\"]",
                                       "{\"phase\":\"forward\"}"};
    size_t k = fuzz_below(sizeof raws / sizeof *raws + 2 + n_extra);
    if (k < sizeof raws / sizeof *raws) return cJSON_CreateRaw(raws[k]);
    if (k >= sizeof raws / sizeof *raws + 2) return cJSON_CreateRaw(extra[k - sizeof raws / sizeof *raws - 2]);
    if (k == sizeof raws / sizeof *raws) { /* a long string */
        size_t n = 1 + fuzz_below(20000);
        char *s = malloc(n + 1);
        for (size_t i = 0; i < n; i++) s[i] = (char)('a' + fuzz_below(26));
        s[n] = '\0';
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return v;
    }
    /* nesting: arrays 1 to 300 deep (cJSON's own limit is 1000) */
    size_t depth = 1 + fuzz_below(300);
    cJSON *v = cJSON_CreateNumber(1);
    for (size_t i = 0; i < depth; i++) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, v);
        v = a;
    }
    return v;
}

/* Replaces item (in parent) by replacement, keeping its key in an object. */
static void replace(cJSON *parent, cJSON *item, cJSON *replacement) {
    if (item->string && !replacement->string) {
        replacement->string = fuzz_strdup(item->string);
        replacement->type &= ~cJSON_StringIsConst;
    }
    cJSON_ReplaceItemViaPointer(parent, item, replacement);
}

int fuzz_mutate_tree(cJSON *root, const char *const *keys, size_t n_keys, const char *const *extra, size_t n_extra) {
    node_list l = {0};
    collect(root, &l);
    if (l.n == 0) {
        free(l.items);
        return 0;
    }
    cJSON *item = l.items[fuzz_below(l.n)];
    cJSON *parent = parent_of(root, item);
    int done = 1;
    switch (fuzz_below(6)) {
    case 0:
    case 1: replace(parent, item, fuzz_hostile_value(extra, n_extra)); break;
    case 2: cJSON_Delete(cJSON_DetachItemViaPointer(parent, item)); break;
    case 3: /* rename a member */
        if (item->string && n_keys) {
            char *old = item->string;
            item->string = fuzz_strdup(keys[fuzz_below(n_keys)]);
            free(old);
        } else {
            done = 0;
        }
        break;
    case 4: { /* a copy of another node, of another shape */
        cJSON *other = l.items[fuzz_below(l.n)];
        int is_ancestor = 0;
        for (cJSON *p = item; p; p = parent_of(root, p)) is_ancestor |= p == other;
        for (cJSON *p = other; p && !is_ancestor; p = parent_of(root, p)) is_ancestor |= p == item;
        if (is_ancestor) {
            done = 0;
            break;
        }
        cJSON *copy = cJSON_Duplicate(other, 1);
        free(copy->string);
        copy->string = NULL;
        replace(parent, item, copy);
        break;
    }
    default: /* an array grown: its first item repeated up to 6000 times */
        if (cJSON_IsArray(item) && item->child) {
            size_t n = 1 + fuzz_below(6000);
            for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(item, cJSON_Duplicate(item->child, 1));
        } else {
            done = 0;
        }
    }
    free(l.items);
    return done;
}

/* ---- text mutations ------------------------------------------------------------------------- */

char *fuzz_mutate_text(const char *text) {
    size_t n = strlen(text);
    char *out = malloc(n + 64);
    memcpy(out, text, n + 1);
    size_t edits = 1 + fuzz_below(4);
    for (size_t e = 0; e < edits && n > 0; e++) {
        size_t at = fuzz_below(n);
        switch (fuzz_below(3)) {
        case 0: {
            static const char bytes[] = "{}[]\",:0123456789.eE-+ntfa\\\x01\xff";
            out[at] = bytes[fuzz_below(sizeof bytes - 1)];
            break;
        }
        case 1: out[at] = '\0', n = at; break; /* cut */
        default:                               /* insert one byte */
            memmove(out + at + 1, out + at, n - at + 1);
            static const char inserted[] = "{[\",:-0.e9";
            out[at] = inserted[fuzz_below(sizeof inserted - 1)];
            n++;
        }
    }
    return out;
}
