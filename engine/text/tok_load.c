/* tok_load.c: tokenizer.json -> dp_tokenizer. Every component and option is read as HF's serde
 * layout spells it; whatever is not implemented, or set to a value that would change the ids in
 * a way this code does not reproduce, is refused with DP_ENOTSUP naming it. */
#include "tok_internal.h"

#include "error.h"
#include "safe_file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <utf8proc.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenizer regex, as HF's ByteLevel uses it with use_regex */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct {
    dp_tokenizer *t;
    const char *what; /* the file, for messages */
} loader;

static int bad(const loader *l, const char *fmt, const char *a, const char *b) {
    char msg[400];
    snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
    return dp_error_set(DP_EINVAL, "%s: %s", l->what, msg);
}

static int unsupported(const loader *l, const char *kind, const char *name, const char *implemented) {
    return dp_error_set(DP_ENOTSUP, "%s: %s '%s' is not implemented (implemented: %s)", l->what, kind, name,
                        implemented);
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* o[key] as a boolean: def when absent or null; -1 (error set) when another type */
static int flag(const loader *l, const cJSON *o, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return def;
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    bad(l, "'%s' must be true or false", key, NULL);
    return -1;
}

static char *dup_n(const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = 0;
    }
    return c;
}

/* A pattern object {"String": s} or {"Regex": r}: compiled (literal for String) */
static int pattern(const loader *l, const cJSON *p, const char *what, pcre2_code **re, char **literal) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String"), *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    if (cJSON_IsString(s)) {
        if (literal) {
            *literal = dup_n(s->valuestring, strlen(s->valuestring));
            return *literal ? DP_OK : dp_error_set(DP_EOOM, "tokenizer: out of host memory");
        }
        *re = tk_regex_compile(s->valuestring, strlen(s->valuestring), 1, what);
    } else if (cJSON_IsString(r)) {
        if (literal) *literal = NULL;
        *re = tk_regex_compile(r->valuestring, strlen(r->valuestring), 0, what);
    } else {
        return bad(l, "%s: 'pattern' must be {\"String\": ...} or {\"Regex\": ...}", what, NULL);
    }
    return *re ? DP_OK : dp_error_code();
}

/* ---- normalizers ------------------------------------------------------------------------------ */

static int add_normalizer(loader *l, const cJSON *o) {
    const char *type = type_of(o);
    if (!type) return bad(l, "a normalizer without a 'type'", NULL, NULL);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "normalizers"), *e;
        if (!cJSON_IsArray(list)) return bad(l, "normalizer Sequence: 'normalizers' must be an array", NULL, NULL);
        cJSON_ArrayForEach(e, list) DP_TRY(add_normalizer(l, e));
        return DP_OK;
    }
    tk_normalizer z = {0};
    if (strcmp(type, "Prepend") == 0) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prepend");
        if (!cJSON_IsString(p)) return bad(l, "normalizer Prepend: 'prepend' must be a string", NULL, NULL);
        z.kind = TK_NORM_PREPEND;
        z.pattern_n = strlen(p->valuestring);
        z.pattern = dup_n(p->valuestring, z.pattern_n);
    } else if (strcmp(type, "Replace") == 0) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "content");
        if (!cJSON_IsString(c)) return bad(l, "normalizer Replace: 'content' must be a string", NULL, NULL);
        z.kind = TK_NORM_REPLACE;
        DP_TRY(pattern(l, cJSON_GetObjectItemCaseSensitive(o, "pattern"), "normalizer Replace", &z.re, &z.pattern));
        if (z.pattern) z.pattern_n = strlen(z.pattern);
        if (!z.re && z.pattern_n == 0) return bad(l, "normalizer Replace: an empty pattern", NULL, NULL);
        z.content_n = strlen(c->valuestring);
        z.content = dup_n(c->valuestring, z.content_n);
    } else if (strcmp(type, "NFC") == 0 || strcmp(type, "NFD") == 0 || strcmp(type, "NFKC") == 0 ||
               strcmp(type, "NFKD") == 0) {
        z.kind = TK_NORM_UNICODE;
        z.forms = UTF8PROC_STABLE | (type[2] == 'K' ? UTF8PROC_COMPAT : 0) |
                  (type[strlen(type) - 1] == 'C' ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
    } else {
        return unsupported(l, "normalizer", type, "Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD");
    }
    tk_normalizer *v = realloc(l->t->norm, (size_t)(l->t->n_norm + 1) * sizeof *v);
    if (!v || (z.kind == TK_NORM_PREPEND && !z.pattern) || (z.kind == TK_NORM_REPLACE && !z.content)) {
        free(z.pattern);
        free(z.content);
        pcre2_code_free(z.re);
        if (v) l->t->norm = v;
        return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    }
    l->t->norm = v;
    v[l->t->n_norm++] = z;
    return DP_OK;
}

/* ---- pre-tokenizers --------------------------------------------------------------------------- */

static int push_pre(loader *l, tk_pretok q) {
    tk_pretok *v = realloc(l->t->pre, (size_t)(l->t->n_pre + 1) * sizeof *v);
    if (!v) {
        pcre2_code_free(q.re);
        return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    }
    l->t->pre = v;
    v[l->t->n_pre++] = q;
    return DP_OK;
}

static int prepend_scheme(const loader *l, const cJSON *o, const char *what, int *out) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "prepend_scheme");
    if (cJSON_IsString(s)) {
        if (strcmp(s->valuestring, "always") == 0)
            *out = TK_PREPEND_ALWAYS;
        else if (strcmp(s->valuestring, "first") == 0)
            *out = TK_PREPEND_FIRST;
        else if (strcmp(s->valuestring, "never") == 0)
            *out = TK_PREPEND_NEVER;
        else
            return bad(l, "%s: prepend_scheme '%s' (valid: always, first, never)", what, s->valuestring);
        return DP_OK;
    }
    int add = flag(l, o, "add_prefix_space", 1); /* files before prepend_scheme: a boolean */
    if (add < 0) return dp_error_code();
    *out = add ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    return DP_OK;
}

static int replacement(const loader *l, const cJSON *o, const char *what, char *out, size_t *n) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "replacement");
    const char *s = cJSON_IsString(r) ? r->valuestring : "\xE2\x96\x81"; /* U+2581 */
    size_t len = strlen(s);
    if (len == 0 || len > 4 || tk_utf8_valid((const unsigned char *)s, len, NULL) != len)
        return bad(l, "%s: 'replacement' must be one character", what, NULL);
    memcpy(out, s, len);
    out[len] = 0;
    *n = len;
    return DP_OK;
}

static int add_pretok(loader *l, const cJSON *o, int depth) {
    const char *type = type_of(o);
    if (!type) return bad(l, "a pre-tokenizer without a 'type'", NULL, NULL);
    if (l->t->byte_level)
        return dp_error_set(DP_ENOTSUP,
                            "%s: pre-tokenizer '%s' after ByteLevel is not implemented (ByteLevel must come last)",
                            l->what, type);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers"), *e;
        if (!cJSON_IsArray(list)) return bad(l, "pre-tokenizer Sequence: 'pretokenizers' must be an array", NULL, NULL);
        if (depth > 8) return bad(l, "pre-tokenizer Sequences nested too deep", NULL, NULL);
        cJSON_ArrayForEach(e, list) DP_TRY(add_pretok(l, e, depth + 1));
        return DP_OK;
    }
    tk_pretok q = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        q.kind = TK_PRE_BYTELEVEL;
        q.add_prefix_space = flag(l, o, "add_prefix_space", 1);
        q.use_regex = flag(l, o, "use_regex", 1);
        if (q.add_prefix_space < 0 || q.use_regex < 0) return dp_error_code();
        if (q.use_regex && !(q.re = tk_regex_compile(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, "ByteLevel")))
            return dp_error_code();
        DP_TRY(push_pre(l, q));
        l->t->byte_level = 1;
        return DP_OK;
    }
    if (strcmp(type, "Split") == 0) {
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "behavior");
        q.kind = TK_PRE_SPLIT;
        q.behavior = -1;
        for (int k = 0; k < 5 && cJSON_IsString(b); k++)
            if (strcmp(b->valuestring, names[k]) == 0) q.behavior = k;
        if (q.behavior < 0)
            return bad(l,
                       "pre-tokenizer Split: behavior '%s' (valid: Removed, Isolated, MergedWithPrevious, "
                       "MergedWithNext, Contiguous)",
                       cJSON_IsString(b) ? b->valuestring : "?", NULL);
        q.invert = flag(l, o, "invert", 0);
        if (q.invert < 0) return dp_error_code();
        DP_TRY(pattern(l, cJSON_GetObjectItemCaseSensitive(o, "pattern"), "pre-tokenizer Split", &q.re, NULL));
        return push_pre(l, q);
    }
    if (strcmp(type, "Metaspace") == 0) {
        q.kind = TK_PRE_METASPACE;
        DP_TRY(replacement(l, o, "pre-tokenizer Metaspace", q.replacement, &q.replacement_n));
        DP_TRY(prepend_scheme(l, o, "pre-tokenizer Metaspace", &q.prepend_scheme));
        q.split = flag(l, o, "split", 1);
        if (q.split < 0) return dp_error_code();
        if (!(q.re = tk_regex_compile(q.replacement, q.replacement_n, 1, "Metaspace"))) return dp_error_code();
        return push_pre(l, q);
    }
    if (strcmp(type, "Digits") == 0) {
        q.kind = TK_PRE_DIGITS;
        int each = flag(l, o, "individual_digits", 0);
        if (each < 0) return dp_error_code();
        q.behavior = each ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS;
        if (!(q.re = tk_regex_compile("\\p{N}", 5, 0, "Digits"))) return dp_error_code();
        return push_pre(l, q);
    }
    return unsupported(l, "pre-tokenizer", type, "Sequence, ByteLevel, Split, Metaspace, Digits");
}

/* ---- post-processors -------------------------------------------------------------------------- */

static int tmpl_push(loader *l, int is_seq, const int32_t *ids, size_t n) {
    tk_piece_tmpl *v = realloc(l->t->tmpl, (size_t)(l->t->n_tmpl + 1) * sizeof *v);
    if (!v) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    l->t->tmpl = v;
    tk_piece_tmpl p = {is_seq, NULL, n};
    if (n) {
        p.ids = malloc(n * sizeof *p.ids);
        if (!p.ids) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
        memcpy(p.ids, ids, n * sizeof *ids);
    }
    v[l->t->n_tmpl++] = p;
    return DP_OK;
}

/* Bert's and Roberta's [token, id] pairs */
static int pair_id(const loader *l, const cJSON *o, const char *key, int32_t *id) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, key), *v = cJSON_GetArrayItem(p, 1);
    if (!cJSON_IsArray(p) || !cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX)
        return bad(l, "post-processor: '%s' must be [token, id]", key, NULL);
    *id = (int32_t)v->valuedouble;
    return DP_OK;
}

static int template_single(loader *l, const cJSON *o) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single"),
                *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens"), *e;
    if (!cJSON_IsArray(single)) return bad(l, "TemplateProcessing: 'single' must be an array", NULL, NULL);
    int seqs = 0;
    cJSON_ArrayForEach(e, single) {
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence"),
                    *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        if (sq) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(sq, "id");
            if (!cJSON_IsString(id) || strcmp(id->valuestring, "A") != 0)
                return bad(l, "TemplateProcessing: the single template's sequence must be $A", NULL, NULL);
            if (seqs++) return bad(l, "TemplateProcessing: the single template holds $A twice", NULL, NULL);
            DP_TRY(tmpl_push(l, 1, NULL, 0));
            continue;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
        if (!cJSON_IsString(name))
            return bad(l, "TemplateProcessing: an item neither Sequence nor SpecialToken", NULL, NULL);
        const cJSON *def = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids"), *x;
        if (!cJSON_IsArray(ids))
            return bad(l, "TemplateProcessing: special token '%s' has no 'ids' in special_tokens", name->valuestring,
                       NULL);
        int n = cJSON_GetArraySize(ids), k = 0;
        int32_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
        if (!v) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
        cJSON_ArrayForEach(x, ids) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > INT32_MAX) {
                free(v);
                return bad(l, "TemplateProcessing: special token '%s' has an id that is not one", name->valuestring,
                           NULL);
            }
            v[k++] = (int32_t)x->valuedouble;
        }
        int rc = tmpl_push(l, 0, v, (size_t)k);
        free(v);
        DP_TRY(rc);
    }
    if (!seqs) return bad(l, "TemplateProcessing: the single template has no $A", NULL, NULL);
    return DP_OK;
}

static int add_post(loader *l, const cJSON *o, int depth) {
    const char *type = type_of(o);
    if (!type) return bad(l, "a post-processor without a 'type'", NULL, NULL);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "processors"), *e;
        if (!cJSON_IsArray(list) || depth > 8)
            return bad(l, "post-processor Sequence: 'processors' must be an array", NULL, NULL);
        cJSON_ArrayForEach(e, list) DP_TRY(add_post(l, e, depth + 1));
        return DP_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) return DP_OK; /* offsets only */
    if (l->t->n_tmpl) return bad(l, "two post-processors that add tokens ('%s' after another)", type, NULL);
    if (strcmp(type, "TemplateProcessing") == 0) return template_single(l, o);
    if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
        int32_t cls, sep;
        DP_TRY(pair_id(l, o, "cls", &cls));
        DP_TRY(pair_id(l, o, "sep", &sep));
        DP_TRY(tmpl_push(l, 0, &cls, 1));
        DP_TRY(tmpl_push(l, 1, NULL, 0));
        return tmpl_push(l, 0, &sep, 1);
    }
    return unsupported(l, "post-processor", type,
                       "Sequence, ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing");
}

/* ---- decoders --------------------------------------------------------------------------------- */

static int add_decoder(loader *l, const cJSON *o, int depth) {
    const char *type = type_of(o);
    if (!type) return bad(l, "a decoder without a 'type'", NULL, NULL);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "decoders"), *e;
        if (!cJSON_IsArray(list) || depth > 8)
            return bad(l, "decoder Sequence: 'decoders' must be an array", NULL, NULL);
        cJSON_ArrayForEach(e, list) DP_TRY(add_decoder(l, e, depth + 1));
        return DP_OK;
    }
    tk_decoder d = {0};
    char rep[8];
    size_t rn = 0;
    if (strcmp(type, "ByteLevel") == 0) {
        d.kind = TK_DEC_BYTELEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        d.kind = TK_DEC_BYTEFALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d.kind = TK_DEC_FUSE;
    } else if (strcmp(type, "Metaspace") == 0) {
        d.kind = TK_DEC_METASPACE;
        DP_TRY(replacement(l, o, "decoder Metaspace", rep, &rn));
        DP_TRY(prepend_scheme(l, o, "decoder Metaspace", &d.prepend_scheme));
        d.pattern = dup_n(rep, rn);
        d.pattern_n = rn;
    } else if (strcmp(type, "Replace") == 0) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern"),
                    *c = cJSON_GetObjectItemCaseSensitive(o, "content");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
        if (!cJSON_IsString(s))
            return dp_error_set(DP_ENOTSUP, "%s: decoder Replace with a Regex pattern is not implemented (a String is)",
                                l->what);
        if (!cJSON_IsString(c) || !s->valuestring[0])
            return bad(l, "decoder Replace: needs a non-empty String pattern and a 'content'", NULL, NULL);
        d.kind = TK_DEC_REPLACE;
        d.pattern_n = strlen(s->valuestring);
        d.pattern = dup_n(s->valuestring, d.pattern_n);
        d.content_n = strlen(c->valuestring);
        d.content = dup_n(c->valuestring, d.content_n);
    } else if (strcmp(type, "Strip") == 0) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "content"),
                    *a = cJSON_GetObjectItemCaseSensitive(o, "start"), *b = cJSON_GetObjectItemCaseSensitive(o, "stop");
        if (!cJSON_IsString(c) || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 ||
            b->valuedouble < 0 || a->valuedouble > 1e6 || b->valuedouble > 1e6)
            return bad(l, "decoder Strip: needs 'content' (a character), 'start' and 'stop' (counts)", NULL, NULL);
        d.kind = TK_DEC_STRIP;
        d.content_n = strlen(c->valuestring);
        d.content = dup_n(c->valuestring, d.content_n);
        d.start = (int)a->valuedouble;
        d.stop = (int)b->valuedouble;
    } else {
        return unsupported(l, "decoder", type, "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip");
    }
    tk_decoder *v = realloc(l->t->dec, (size_t)(l->t->n_dec + 1) * sizeof *v);
    if (!v) {
        free(d.pattern);
        free(d.content);
        return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    }
    l->t->dec = v;
    v[l->t->n_dec++] = d;
    return DP_OK;
}

/* ---- the model -------------------------------------------------------------------------------- */

static int set_token(loader *l, int32_t id, const char *s) {
    dp_tokenizer *t = l->t;
    if (id >= t->n_ids) return bad(l, "an id beyond the vocabulary", NULL, NULL);
    free(t->token[id]);
    t->token[id] = dup_n(s, strlen(s));
    return t->token[id] ? DP_OK : dp_error_set(DP_EOOM, "tokenizer: out of host memory");
}

/* The raw bytes a byte-level token spells into out (strlen(s) bytes at most); -1 when a character
 * is outside GPT-2's map (such a token is never formed from bytes). */
static long unmap(const char *s, char *out) {
    size_t n = strlen(s), k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = tk_utf8_valid((const unsigned char *)s + i, n - i, &cp);
        int b = len ? tk_char_byte(cp) : -1;
        if (b < 0) return -1;
        out[k++] = (char)b;
        i += len;
    }
    return (long)k;
}

static int read_merges(loader *l, const cJSON *merges) {
    dp_tokenizer *t = l->t;
    const cJSON *e;
    int32_t rank = 0;
    char *joined = NULL;
    size_t cap = 0;
    int rc = DP_OK;
    cJSON_ArrayForEach(e, merges) {
        const char *a = NULL, *b = NULL;
        char *line = NULL;
        if (cJSON_IsString(e)) { /* "a b" (files before tokenizers 0.20) */
            const char *sp = strchr(e->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                line = dup_n(e->valuestring, strlen(e->valuestring));
                if (!line) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
                line[sp - e->valuestring] = 0;
                a = line;
                b = line + (sp - e->valuestring) + 1;
            }
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a = cJSON_GetArrayItem(e, 0)->valuestring;
            b = cJSON_GetArrayItem(e, 1)->valuestring;
        }
        if (!a) {
            free(line);
            free(joined);
            char num[24];
            snprintf(num, sizeof num, "%d", (int)rank);
            return bad(l, "model: merge %s is neither \"a b\" nor [\"a\", \"b\"]", num, NULL);
        }
        size_t an = strlen(a), bn = strlen(b);
        if (an + bn + 1 > cap) {
            cap = (an + bn + 1) * 2;
            char *j = realloc(joined, cap);
            if (!j) {
                free(line);
                free(joined);
                return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
            }
            joined = j;
        }
        memcpy(joined, a, an);
        memcpy(joined + an, b, bn);
        joined[an + bn] = 0;
        int32_t ia = tk_strmap_get(&t->spelled, a, an), ib = tk_strmap_get(&t->spelled, b, bn),
                im = tk_strmap_get(&t->spelled, joined, an + bn);
        if (ia < 0 || ib < 0 || im < 0)
            rc = dp_error_set(DP_EINVAL, "%s: model: merge %d ('%s' '%s'): '%s' is not in the vocabulary", l->what,
                              (int)rank, a, b,
                              ia < 0   ? a
                              : ib < 0 ? b
                                       : joined);
        if (rc == DP_OK) rc = tk_mergemap_put(&t->merges, ia, ib, rank, im);
        free(line);
        if (rc != DP_OK) break;
        rank++;
    }
    free(joined);
    return rc;
}

static int read_model(loader *l, const cJSON *m) {
    dp_tokenizer *t = l->t;
    const char *type = type_of(m);
    if (!cJSON_IsObject(m)) return bad(l, "no 'model' object", NULL, NULL);
    if (type && strcmp(type, "BPE") != 0) return unsupported(l, "model", type, "BPE");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"),
                *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return type ? bad(l, "model BPE: needs 'vocab' (an object) and 'merges' (an array)", NULL, NULL)
                    : unsupported(l, "model", "(no type, no merges)", "BPE");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return dp_error_set(DP_ENOTSUP, "%s: model BPE: dropout is set (random merges at encode time): not implemented",
                            l->what);
    static const char *nulls[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, nulls[k]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return dp_error_set(DP_ENOTSUP, "%s: model BPE: '%s' is not implemented (it must be null)", l->what,
                                nulls[k]);
    }
    t->fuse_unk = flag(l, m, "fuse_unk", 0);
    t->byte_fallback = flag(l, m, "byte_fallback", 0);
    t->ignore_merges = flag(l, m, "ignore_merges", 0);
    if (t->fuse_unk < 0 || t->byte_fallback < 0 || t->ignore_merges < 0) return dp_error_code();
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (double)(1 << 30) ||
            e->valuedouble != (double)(int32_t)e->valuedouble)
            return bad(l, "model: the id of token '%s' is not an id", e->string, NULL);
        if ((int64_t)e->valuedouble + 1 > t->n_ids) t->n_ids = (int64_t)e->valuedouble + 1;
    }
    return DP_OK;
}

/* After the ids are known: the maps, the spellings, the merges. */
static int fill_model(loader *l, const cJSON *m) {
    dp_tokenizer *t = l->t;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"), *e;
    char *raw = NULL;
    size_t raw_cap = 0;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = (int32_t)e->valuedouble;
        const char *s = e->string;
        size_t n = strlen(s);
        DP_TRY(set_token(l, id, s));
        DP_TRY(tk_strmap_put(&t->spelled, s, n, id));
        if (!t->byte_level) {
            DP_TRY(tk_strmap_put(&t->vocab, s, n, id));
            continue;
        }
        if (n + 1 > raw_cap) {
            raw_cap = (n + 1) * 2;
            char *r = realloc(raw, raw_cap);
            if (!r) return free(raw), dp_error_set(DP_EOOM, "tokenizer: out of host memory");
            raw = r;
        }
        long k = unmap(s, raw);
        int rc = k >= 0 ? tk_strmap_put(&t->vocab, raw, (size_t)k, id) : DP_OK;
        if (rc != DP_OK) return free(raw), rc;
    }
    free(raw);
    for (int b = 0; b < 256; b++) {
        char name[8], ch[4];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_token[b] = tk_strmap_get(&t->spelled, name, strlen(name));
        if (t->byte_level) {
            size_t n = tk_utf8_put(tk_byte_char((unsigned char)b), ch);
            t->single_byte[b] = tk_strmap_get(&t->spelled, ch, n);
        } else {
            t->single_byte[b] = -1;
        }
    }
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(m, "unk_token");
    t->unk = -1;
    if (cJSON_IsString(unk)) {
        t->unk = tk_strmap_get(&t->vocab, unk->valuestring, strlen(unk->valuestring));
        if (t->byte_level) t->unk = tk_strmap_get(&t->spelled, unk->valuestring, strlen(unk->valuestring));
        if (t->unk < 0) return bad(l, "model: unk_token '%s' is not in the vocabulary", unk->valuestring, NULL);
    } else if (unk && !cJSON_IsNull(unk)) {
        return bad(l, "model: unk_token must be a string or null", NULL, NULL);
    }
    return read_merges(l, cJSON_GetObjectItemCaseSensitive(m, "merges"));
}

/* ---- added tokens ----------------------------------------------------------------------------- */

static int added_cmp(const void *pa, const void *pb) {
    const tk_added *a = pa, *b = pb;
    unsigned char fa = (unsigned char)a->content[0], fb = (unsigned char)b->content[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->n != b->n) return a->n > b->n ? -1 : 1; /* longest first */
    return a->id < b->id ? -1 : a->id > b->id;
}

static int read_added(loader *l, const cJSON *list) {
    dp_tokenizer *t = l->t;
    if (!list || cJSON_IsNull(list)) return DP_OK;
    if (!cJSON_IsArray(list)) return bad(l, "'added_tokens' must be an array", NULL, NULL);
    int n = cJSON_GetArraySize(list);
    t->added = calloc((size_t)(n ? n : 1), sizeof *t->added);
    if (!t->added) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"),
                    *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (double)(1 << 30) || !cJSON_IsString(c) ||
            !c->valuestring[0])
            return bad(l, "added_tokens: each needs an 'id' and a non-empty 'content'", NULL, NULL);
        tk_added a = {(int32_t)id->valuedouble, NULL, strlen(c->valuestring), 0, 0, 0, 0};
        int single = flag(l, e, "single_word", 0);
        a.special = flag(l, e, "special", 0);
        a.normalized = flag(l, e, "normalized", !a.special);
        a.lstrip = flag(l, e, "lstrip", 0);
        a.rstrip = flag(l, e, "rstrip", 0);
        if (single < 0 || a.special < 0 || a.normalized < 0 || a.lstrip < 0 || a.rstrip < 0) return dp_error_code();
        if (single)
            return dp_error_set(DP_ENOTSUP, "%s: added token '%s': single_word is not implemented", l->what,
                                c->valuestring);
        a.content = dup_n(c->valuestring, a.n);
        if (!a.content) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
        t->added[t->n_added++] = a;
        if (a.id + 1 > t->n_ids) t->n_ids = a.id + 1;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, added_cmp);
    for (int b = 0; b < 256; b++) t->first_added[b] = t->last_added[b] = -1;
    for (int k = 0; k < t->n_added; k++) {
        unsigned char b = (unsigned char)t->added[k].content[0];
        if (t->first_added[b] < 0) t->first_added[b] = k;
        t->last_added[b] = k;
    }
    return DP_OK;
}

/* ---- the whole file --------------------------------------------------------------------------- */

static const char *component_name(const cJSON *o) {
    const char *t = type_of(o);
    return t ? t : "none";
}

static void describe(dp_tokenizer *t, const cJSON *root) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    char pres[160] = "";
    if (type_of(pre) && strcmp(type_of(pre), "Sequence") == 0) {
        const cJSON *e;
        size_t k = (size_t)snprintf(pres, sizeof pres, "Sequence[");
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers")) {
            if (k < sizeof pres)
                k += (size_t)snprintf(pres + k, sizeof pres - k, "%s%s", e->prev && e != e->prev->next ? "" : "",
                                      component_name(e));
            if (e->next && k < sizeof pres) k += (size_t)snprintf(pres + k, sizeof pres - k, ", ");
        }
        if (k < sizeof pres) snprintf(pres + k, sizeof pres - k, "]");
    } else {
        snprintf(pres, sizeof pres, "%s", component_name(pre));
    }
    snprintf(t->desc, sizeof t->desc, "%s BPE, %lld ids, %zu merges, %d added tokens, pre-tokenizer %s%s%s",
             t->byte_level      ? "byte-level"
             : t->byte_fallback ? "SentencePiece-style (byte fallback)"
                                : "character",
             (long long)t->n_ids, t->merges.n, t->n_added, pres, t->n_norm ? ", normalizer " : "",
             t->n_norm ? component_name(cJSON_GetObjectItemCaseSensitive(root, "normalizer")) : "");
}

static int load(loader *l, const cJSON *root) {
    dp_tokenizer *t = l->t;
    if (!cJSON_IsObject(root)) return bad(l, "the top level is not a JSON object", NULL, NULL);
    static const char *nulls[] = {"truncation", "padding"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, nulls[k]);
        if (v && !cJSON_IsNull(v))
            return dp_error_set(DP_ENOTSUP, "%s: '%s' is set: dpprof encodes whole texts (set it to null)", l->what,
                                nulls[k]);
    }
    const cJSON *c;
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "normalizer")) && !cJSON_IsNull(c)) DP_TRY(add_normalizer(l, c));
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")) && !cJSON_IsNull(c)) DP_TRY(add_pretok(l, c, 0));
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "post_processor")) && !cJSON_IsNull(c)) DP_TRY(add_post(l, c, 0));
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "decoder")) && !cJSON_IsNull(c)) DP_TRY(add_decoder(l, c, 0));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    DP_TRY(read_model(l, model));
    DP_TRY(read_added(l, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")));
    if (t->n_ids == 0) return bad(l, "an empty vocabulary", NULL, NULL);
    t->token = calloc((size_t)t->n_ids, sizeof *t->token);
    t->is_special = calloc((size_t)t->n_ids, 1);
    if (!t->token || !t->is_special)
        return dp_error_set(DP_EOOM, "tokenizer: out of host memory for %lld ids", (long long)t->n_ids);
    DP_TRY(fill_model(l, model));
    for (int k = 0; k < t->n_added; k++) { /* an added token's spelling is its content (id_to_token) */
        DP_TRY(set_token(l, t->added[k].id, t->added[k].content));
        DP_TRY(tk_strmap_put(&t->spelled, t->added[k].content, t->added[k].n, t->added[k].id));
        t->is_special[t->added[k].id] = (unsigned char)t->added[k].special;
    }
    for (int k = 0; k < t->n_tmpl; k++)
        for (size_t i = 0; i < t->tmpl[k].n; i++)
            if (t->tmpl[k].ids[i] >= t->n_ids || !t->token[t->tmpl[k].ids[i]])
                return bad(l, "the post-processor adds an id that is no token", NULL, NULL);
    describe(t, root);
    return DP_OK;
}

int dp_tokenizer_parse(const char *json, size_t len, const char *what, dp_tokenizer **out) {
    *out = NULL;
    loader l = {calloc(1, sizeof(dp_tokenizer)), what ? what : "tokenizer.json"};
    if (!l.t) return dp_error_set(DP_EOOM, "tokenizer: out of host memory");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    int rc;
    if (!root) {
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        rc = dp_error_set(DP_EINVAL, "%s: invalid JSON near byte %zu", l.what, at);
    } else {
        rc = load(&l, root);
    }
    cJSON_Delete(root);
    if (rc != DP_OK) {
        dp_tokenizer_free(l.t);
        return rc;
    }
    *out = l.t;
    return DP_OK;
}

int dp_tokenizer_load(const char *path, dp_tokenizer **out) {
    *out = NULL;
    if (!path || !*path) return dp_error_set(DP_EINVAL, "tokenizer: no path");
    char file[4096], err[512];
    size_t pn = strlen(path);
    int is_json = pn >= 5 && strcmp(path + pn - 5, ".json") == 0;
    if (snprintf(file, sizeof file, is_json ? "%s" : "%s/tokenizer.json", path) >= (int)sizeof file)
        return dp_error_set(DP_EINVAL, "tokenizer: path too long");
    char *text = NULL;
    size_t len = 0;
    if (dpfile_read(file, DPFILE_MAX_READ, &text, &len, err, sizeof err) != 0)
        return dp_error_set(DP_EIO, "tokenizer: %s%s", err,
                            is_json ? "" : " (a checkpoint folder needs its tokenizer.json)");
    int rc = dp_tokenizer_parse(text, len, file, out);
    free(text);
    return rc;
}

void dp_tokenizer_free(dp_tokenizer *t) {
    if (!t) return;
    tk_strmap_free(&t->vocab);
    tk_strmap_free(&t->spelled);
    tk_mergemap_free(&t->merges);
    for (int64_t i = 0; t->token && i < t->n_ids; i++) free(t->token[i]);
    free(t->token);
    free(t->is_special);
    for (int k = 0; k < t->n_norm; k++) {
        free(t->norm[k].pattern);
        free(t->norm[k].content);
        pcre2_code_free(t->norm[k].re);
    }
    free(t->norm);
    for (int k = 0; k < t->n_pre; k++) pcre2_code_free(t->pre[k].re);
    free(t->pre);
    for (int k = 0; k < t->n_added; k++) free(t->added[k].content);
    free(t->added);
    for (int k = 0; k < t->n_tmpl; k++) free(t->tmpl[k].ids);
    free(t->tmpl);
    for (int k = 0; k < t->n_dec; k++) {
        free(t->dec[k].pattern);
        free(t->dec[k].content);
    }
    free(t->dec);
    free(t);
}

int64_t dp_tokenizer_vocab_size(const dp_tokenizer *t) { return t ? t->n_ids : 0; }

const char *dp_tokenizer_describe(const dp_tokenizer *t) { return t ? t->desc : ""; }

const char *dp_tokenizer_token(const dp_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids ? t->token[id] : NULL;
}

int32_t dp_tokenizer_token_id(const dp_tokenizer *t, const char *token) {
    return t && token ? tk_strmap_get(&t->spelled, token, strlen(token)) : -1;
}

int dp_tokenizer_is_special(const dp_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids && t->is_special[id];
}
