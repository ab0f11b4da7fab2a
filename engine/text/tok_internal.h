/* tok_internal.h: the tokenizer's parts, shared by tok_load.c (tokenizer.json -> these), tok_bpe.c
 * (the model), tok_pre.c (normalizers and pre-tokenizers), tok_encode.c and tok_decode.c. */
#ifndef DP_TOK_INTERNAL_H
#define DP_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

/* ---- maps ------------------------------------------------------------------------------------ */

/* bytes -> id, open addressing; keys copied into the map's own pool */
typedef struct {
    uint64_t *hash; /* 0: empty slot */
    int32_t *val;
    uint64_t *key; /* offset << 24 | length in pool (keys up to 16 MiB) */
    size_t cap, n;
    char *pool;
    size_t pool_n, pool_cap;
} tk_strmap;

/* Grows the array *p (of *cap elements of elem bytes; `first` elements the first time) to hold
 * `need`, doubling. DP_EOOM (with `what` in the message), *p unchanged then. */
int tk_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first, const char *what);

/* Inserts (or overwrites) s -> v. DP_EOOM, DP_EINVAL for a key over 16 MiB. */
int tk_strmap_put(tk_strmap *m, const char *s, size_t n, int32_t v);
/* The value of s, or -1. */
int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t n);
/* Frees m's arrays. */
void tk_strmap_free(tk_strmap *m);

/* (left, right) ids -> (rank, merged id), open addressing */
typedef struct {
    uint64_t *key; /* left << 32 | right, +1 (0 is empty) */
    int32_t *rank, *merged;
    size_t cap, n;
} tk_mergemap;

/* ---- the pipeline's components --------------------------------------------------------------- */

enum { TK_NORM_PREPEND, TK_NORM_REPLACE, TK_NORM_UNICODE };
typedef struct {
    int kind;
    int forms;     /* Unicode: utf8proc's options (NFC, NFD, NFKC, NFKD) */
    char *pattern; /* Prepend: the text; Replace: the literal pattern (NULL when re) */
    size_t pattern_n;
    pcre2_code *re; /* Replace with a Regex pattern */
    char *content;  /* Replace: what a match becomes */
    size_t content_n;
} tk_normalizer;

enum { TK_PRE_BYTELEVEL, TK_PRE_SPLIT, TK_PRE_METASPACE, TK_PRE_DIGITS };
enum { TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_MERGED_PREV, TK_SPLIT_MERGED_NEXT, TK_SPLIT_CONTIGUOUS };
enum { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER };
typedef struct {
    int kind;
    int add_prefix_space, use_regex; /* ByteLevel */
    pcre2_code *re;                  /* Split (Regex or literal, compiled), ByteLevel's GPT-2 regex, Digits */
    int behavior, invert;            /* Split, Digits */
    char replacement[8];             /* Metaspace: the replacement character's UTF-8 */
    size_t replacement_n;
    int prepend_scheme, split; /* Metaspace */
} tk_pretok;

typedef struct {
    int32_t id;
    char *content;
    size_t n;
    int special, normalized, lstrip, rstrip;
} tk_added;

/* the single-sequence template: $A, or a special token's ids */
typedef struct {
    int is_sequence;
    int32_t *ids;
    size_t n;
} tk_piece_tmpl;

enum { TK_DEC_BYTELEVEL, TK_DEC_METASPACE, TK_DEC_REPLACE, TK_DEC_BYTEFALLBACK, TK_DEC_FUSE, TK_DEC_STRIP };
typedef struct {
    int kind;
    char *pattern, *content; /* Replace (literal), Strip's content; Metaspace's replacement */
    size_t pattern_n, content_n;
    int start, stop;    /* Strip */
    int prepend_scheme; /* Metaspace */
} tk_decoder;

struct dp_tokenizer {
    /* the BPE model */
    int byte_level;    /* a ByteLevel pre-tokenizer: the vocabulary spells bytes as GPT-2's characters */
    tk_strmap vocab;   /* the model's tokens as raw bytes (unmapped when byte_level) -> id */
    tk_strmap spelled; /* every token as the file spells it (vocabulary and added) -> id */
    tk_mergemap merges;
    char **token; /* id -> the file's spelling (NUL-terminated), NULL for an unused id */
    int64_t n_ids;
    int32_t unk; /* -1: none */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_token[256];   /* <0xXX>'s id, or -1 */
    int32_t single_byte[256];  /* byte_level: the id of each byte alone, or -1 */
    unsigned char *is_special; /* n_ids flags */
    /* the pipeline */
    tk_normalizer *norm;
    int n_norm;
    tk_pretok *pre;
    int n_pre;
    tk_added *added;
    int n_added;
    int32_t first_added[256]; /* -1, or the first index in `added` (sorted by first byte) with that first byte */
    int32_t last_added[256];
    tk_piece_tmpl *tmpl;
    int n_tmpl;
    tk_decoder *dec;
    int n_dec;
    char desc[320];
};

/* ---- pieces of text in flight ----------------------------------------------------------------- */

typedef struct {
    size_t off, n; /* in the list's buffer */
    int32_t added; /* >= 0: an added token's id (not tokenized further) */
    int origin;    /* the piece starts at the input's first byte (Metaspace's prepend_scheme "first") */
} tk_piece;

typedef struct {
    char *buf;
    size_t buf_n, buf_cap;
    tk_piece *p;
    size_t n, cap;
} tk_pieces;

/* Appends a piece of n bytes s (copied). DP_EOOM. */
int tk_pieces_add(tk_pieces *l, const char *s, size_t n, int32_t added, int origin);
/* Empties l, keeping its memory. */
void tk_pieces_clear(tk_pieces *l);
/* Frees l. */
void tk_pieces_free(tk_pieces *l);

/* What one encode call owns (never shared between threads). */
typedef struct {
    pcre2_match_data *md;
    tk_pieces a, b; /* the pipeline's lists, swapped stage by stage */
} tk_ctx;

/* ---- the stages ------------------------------------------------------------------------------- */

/* What a stage makes of one piece that is not an added token: its pieces appended to out. */
typedef int (*tk_piece_fn)(const dp_tokenizer *t, tk_ctx *c, const tk_piece *p, const void *arg, tk_pieces *out);
/* One stage of the pipeline: each piece of c->a through fn (added tokens copied as they are) into
 * c->b, then the two lists swapped, so that the stage's result is c->a. */
int tk_stage(const dp_tokenizer *t, tk_ctx *c, tk_piece_fn fn, const void *arg);

/* Each normalizer of t over piece text s (n bytes) into the list out (one piece, or none when it
 * becomes empty). DP_EOOM, DP_EINVAL on a regex failure. */
int tk_normalize(const dp_tokenizer *t, tk_ctx *c, const char *s, size_t n, int origin, tk_pieces *out);
/* Runs every pre-tokenizer of t over the non-added pieces of c->a (result in c->a). */
int tk_pretokenize(const dp_tokenizer *t, tk_ctx *c);
/* The BPE model over one pre-tokenized word (raw bytes): its ids appended to out. */
int tk_bpe_word(const dp_tokenizer *t, const char *w, size_t n, dp_ids *out);
/* The merge of (left, right): 1 with its rank and merged id, or 0 when there is none. */
int tk_mergemap_get(const tk_mergemap *m, int32_t left, int32_t right, int32_t *rank, int32_t *merged);
/* Adds merge (left, right) -> merged at rank. DP_EOOM. */
int tk_mergemap_put(tk_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
/* Frees m. */
void tk_mergemap_free(tk_mergemap *m);

/* Compiles a pattern (UTF, UCP; literal when is_literal) for tokenizer.json's `what`, JIT where
 * available. NULL with DP_EINVAL set naming the offset of the error. */
pcre2_code *tk_regex_compile(const char *pattern, size_t n, int is_literal, const char *what);
/* The next match of re in s[0..n) at or after start: 1 with [*ms, *me), 0 when none, < 0 on a
 * failure (DP_EINVAL set). Empty matches are skipped. */
int tk_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t start, size_t *ms,
                  size_t *me);

/* ---- UTF-8 ------------------------------------------------------------------------------------ */

/* The length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one (RFC 3629: no
 * overlong forms, no surrogates, at most U+10FFFF); *cp its code point. */
size_t tk_utf8_valid(const unsigned char *s, size_t n, uint32_t *cp);
/* s with each maximal invalid subpart replaced by U+FFFD, in *out (malloc'ed, *out_n bytes);
 * *out = NULL and returns 0 when s is valid already. DP_EOOM. */
int tk_utf8_repair(const char *s, size_t n, char **out, size_t *out_n);
/* The UTF-8 of code point cp in buf (4 bytes at least); returns its length. */
size_t tk_utf8_put(uint32_t cp, char *buf);

/* GPT-2's byte -> character map (bytes_to_unicode): the code point byte b is spelled as. */
uint32_t tk_byte_char(unsigned char b);
/* Its inverse: the byte code point cp spells, or -1. */
int tk_char_byte(uint32_t cp);

#endif
