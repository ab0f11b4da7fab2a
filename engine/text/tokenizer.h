/* tokenizer.h: Hugging Face tokenizers in C (issue 41). dp_tokenizer_load reads a `tokenizer.json`
 * (the file, or a checkpoint folder holding one) and encodes text to the ids the `tokenizers`
 * library gives for it, byte for byte, for the BPE tokenizers language models use:
 *
 *   byte-level BPE (GPT-2, Llama-3): pre-tokenizer ByteLevel (GPT-2's regex or none), Split with
 *     the file's regex (run by PCRE2, UTF and UCP, JIT where available) and any Sequence of them;
 *     BPE merges by rank, `ignore_merges`;
 *   the Unicode normalizers NFC, NFD, NFKC and NFKD (utf8proc; Qwen2's files have NFC);
 *   SentencePiece-style BPE (Llama-2, Mistral): normalizers Prepend and Replace, pre-tokenizer
 *     Metaspace (prepend_scheme always, first or never; split), `byte_fallback` to <0xXX>
 *     tokens, `unk_token` and `fuse_unk`;
 *   added tokens (special or not) matched in the raw text before anything else, leftmost-longest,
 *     with their lstrip and rstrip; normalized ones matched in each piece's normalized text;
 *   post-processors TemplateProcessing (the single-sequence template: BOS/EOS as the file says),
 *     ByteLevel (nothing to the ids), Bert and Roberta, and a Sequence of them;
 *   decoders ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence.
 *
 * Text is bytes: invalid UTF-8 is replaced first, U+FFFD for each maximal invalid subpart, which
 * is what a Python user who read the file with errors="replace" hands HF. Any component, option
 * or value the file names that is not implemented (a normalizer such as Lowercase, BPE dropout, a
 * word-piece model, single_word added tokens, ...) is refused at load with DP_ENOTSUP naming it
 * and what is implemented: never a silent approximation.
 *
 * A loaded tokenizer is read-only: encode and decode may run on it from several threads at once. */
#ifndef DP_TOKENIZER_H
#define DP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct dp_tokenizer dp_tokenizer;

/* A growable array of token ids (free with dp_ids_free). */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} dp_ids;

/* Loads path (a tokenizer.json, or a folder holding one) into *out. DP_EIO when it cannot be
 * read, DP_EINVAL when it is not a tokenizer (naming the key), DP_ENOTSUP for a component that is
 * not implemented (naming it and the implemented ones), DP_EOOM. */
int dp_tokenizer_load(const char *path, dp_tokenizer **out);
/* Parses a tokenizer.json held in memory (json, len bytes; `what` names it in messages). */
int dp_tokenizer_parse(const char *json, size_t len, const char *what, dp_tokenizer **out);
/* Frees t (NULL is fine). */
void dp_tokenizer_free(dp_tokenizer *t);

/* The number of ids: one more than the largest id of the model's vocabulary and added tokens. */
int64_t dp_tokenizer_vocab_size(const dp_tokenizer *t);
/* A one-line description: "byte-level BPE, 128256 ids, pre-tokenizer Sequence[Split, ByteLevel]". */
const char *dp_tokenizer_describe(const dp_tokenizer *t);

/* Appends the ids of text (len bytes, any bytes) to out: HF's encode(text,
 * add_special_tokens=add_special).ids. DP_EOOM; DP_EINVAL when a character has no token and the
 * model has neither byte fallback nor an unk token (naming it), or on a regex failure. */
int dp_tokenizer_encode(const dp_tokenizer *t, const char *text, size_t len, int add_special, dp_ids *out);
/* The number of ids of each of n texts (texts[i], lens[i] bytes; special[i] as add_special, NULL:
 * all 1) into counts[i], encoded on `threads` threads (at least 1; the calling thread is one).
 * The first failure's status and message (as dp_tokenizer_encode's) when one fails. */
int dp_tokenizer_count_many(const dp_tokenizer *t, const char *const *texts, const size_t *lens,
                            const unsigned char *special, size_t n, int threads, int64_t *counts);
/* The text of ids (n of them) in *text (malloc'ed, NUL-terminated, *len bytes without the NUL):
 * HF's decode(ids, skip_special_tokens=skip_special). DP_EINVAL for an id out of range. */
int dp_tokenizer_decode(const dp_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                        size_t *len);
/* The token string of id as the file spells it ("Ġhello", "▁the", "<|eot_id|>"), or NULL. */
const char *dp_tokenizer_token(const dp_tokenizer *t, int32_t id);
/* The id of a token string as the file spells it (vocabulary or added token), or -1. */
int32_t dp_tokenizer_token_id(const dp_tokenizer *t, const char *token);
/* Whether id is a special added token (what skip_special drops). */
int dp_tokenizer_is_special(const dp_tokenizer *t, int32_t id);

/* Appends n ids to out. DP_EOOM. */
int dp_ids_push(dp_ids *out, const int32_t *ids, size_t n);
/* Frees out's array and zeroes it. */
void dp_ids_free(dp_ids *out);

#endif
