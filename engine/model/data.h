/* data.h: token batches for the model. A batch is inputs and targets, B x T i32 tensors on the
 * model's device under `inputs`; sample b is a window of T+1 tokens, inputs its first T and
 * targets its last T (the next tokens).
 *
 * Synthetic tokens come from Philox keyed by (seed, step), drawn on the host and copied to the
 * device: token j of sample b is word e = b*(T+1) + j of stream `step`, mapped to [0, V) as
 * (word * V) >> 32. A sample does not depend on the batch size, and every device sees the same
 * tokens. A token file is a flat little-endian array of uint16 or uint32 ids; sample b of step s
 * is the window starting at (64 random bits of Philox block b of stream s) mod (n - T).
 * Samples of their own lengths, padded (data_docs.c): below. */
#ifndef DP_DATA_H
#define DP_DATA_H

#include "tensor.h"

#include <stdint.h>
#include <stdio.h>

typedef enum { DP_TOKENS_U16 = 0, DP_TOKENS_U32 = 1 } dp_token_dtype;

/* Parses "uint16" or "uint32"; returns 0 and sets *out, or -1. */
int dp_token_dtype_parse(const char *name, dp_token_dtype *out);
/* "uint16" or "uint32". */
const char *dp_token_dtype_name(dp_token_dtype t);

/* Fills inputs and targets (B x T i32, any device) with the synthetic batch (seed, step) over a
 * vocabulary of V. DP_EINVAL for bad shapes, DP_EOOM (host staging). */
int dp_data_synthetic(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, uint64_t seed, uint64_t step);
/* Fills inputs and targets with windows of the token file at path. DP_EIO when the file cannot
 * be read or its size is not a whole number of tokens; DP_EINVAL when it is shorter than T+1
 * tokens or a window holds an id outside [0, vocab) (naming its position in the file). */
int dp_data_from_file(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                      uint64_t seed, uint64_t step);

/* ---- samples of their own lengths (data_docs.c) ----------------------------------------------
 * A padded batch holds B samples of lengths[b] <= T training positions each, right-padded to T:
 * sample b's inputs are its first lengths[b] tokens then 0s, its targets the next tokens then
 * DP_IGNORE_INDEX (-100: no loss, no gradient; layer_ops.h). A sample of length L is a window of
 * L + 1 tokens. */

/* Synthetic samples: sample b is data set sample samples[b] (0-based), whose token j is word j of
 * Philox stream (DP_DATA_SAMPLE_STREAM | samples[b]) keyed by seed, mapped to [0, vocab): the same
 * sample has the same tokens in whichever batch and step it is drawn. DP_EINVAL for a length
 * outside [1, T], bad shapes. */
#define DP_DATA_SAMPLE_STREAM 0x5344000000000000ull /* "SD": apart from dp_data_synthetic's streams */
int dp_data_synthetic_padded(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, uint64_t seed,
                             const int64_t *samples, const int64_t *lengths);
/* File samples: sample b is the window of lengths[b] + 1 tokens at token offset starts[b] of the
 * token file (a document's start, dp_docs). DP_EIO when it cannot be read, DP_EINVAL for an id
 * outside [0, vocab) (naming its position) or a length outside [1, T]. */
int dp_data_file_padded(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                        const int64_t *starts, const int64_t *lengths);

/* Given samples: sample b is the lengths[b] + 1 ids ids[offsets[b]] .. ids[offsets[b] + lengths[b]]
 * (host memory), its inputs the first lengths[b] and its targets the next (data = {tokens = ...}).
 * Checked on every device, the plan's included: DP_EINVAL for an id outside [0, vocab) (naming the
 * sample and the position) or a length outside [1, T]. */
int dp_data_tokens_padded(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, const int64_t *ids,
                          const int64_t *offsets, const int64_t *lengths);
/* The same with a loss mask: loss[offsets[b] + j] is 0 when id j of sample b carries no loss as a
 * target (its target is DP_IGNORE_INDEX: a prompt's tokens in supervised fine-tuning); loss NULL:
 * every target carries loss. A sample needs at least one target with loss, as the caller checks. */
int dp_data_tokens_padded_masked(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, const int64_t *ids,
                                 const int64_t *offsets, const int64_t *lengths, const unsigned char *loss);

/* The documents of a token file: each run of tokens ended by the id eos (the eos included, so
 * the model learns to end a document) is one sample, as is a last run without one. A document of
 * n tokens is a sample of length n - 1 (its windows' inputs and targets); a document of one token
 * (an eos after an eos, or a lone last token) has no position to train on and is counted in
 * `empty`, not kept. */
typedef struct dp_docs {
    int64_t n;       /* documents kept */
    int64_t *start;  /* n: token offset of each document's first token */
    int64_t *length; /* n: each document's training length (its tokens - 1) */
    int64_t tokens;  /* tokens in the file */
    int64_t empty;   /* documents of a single token, dropped */
} dp_docs;
/* Scans the stream f (a token file of dtype dt, named `name` in messages) for documents ended by
 * eos. DP_EIO when it cannot be read or its size is not a whole number of tokens; DP_EINVAL when a
 * token lies outside [0, vocab) (naming its offset), eos does, or no document has a position to
 * train on; DP_EOOM. On failure *out is empty. */
int dp_docs_scan(FILE *f, const char *name, dp_token_dtype dt, int64_t eos, int64_t vocab, dp_docs *out);
/* dp_docs_scan of the regular file at path (links followed; a FIFO or device refused). */
int dp_docs_open(const char *path, dp_token_dtype dt, int64_t eos, int64_t vocab, dp_docs *out);
/* Frees what a scan made (idempotent). */
void dp_docs_free(dp_docs *d);
/* The same batches starting at global sample `first` (>= 0): sample b of the tensors is sample
 * first + b of (seed, step), so the ranks of a distributed run, each holding its slice of a
 * logical batch, hold exactly the samples one process holds at those positions. */
int dp_data_synthetic_at(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, uint64_t seed, uint64_t step,
                         int64_t first);
int dp_data_from_file_at(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                         uint64_t seed, uint64_t step, int64_t first);

/* A token file read in order (data = {file =, order = "sequential"}): of a file of n tokens, whose
 * M = floor((n - 1) / T) whole windows of T + 1 tokens start at 0, T, 2T, ..., sample b is window
 * w = first + b, the T + 1 tokens starting at token (w mod M) * T (inputs the first T, targets the
 * next T: consecutive windows share one token, as a reader that steps by T shares it). DP_EIO,
 * DP_EINVAL as dp_data_from_file. */
int dp_data_from_file_seq(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                          int64_t first);

/* A batch owned by C code (Lua holds its tensors in userdata instead). */
typedef struct dp_batch {
    dp_tensor inputs, targets;
} dp_batch;

/* Allocates a B x T batch on dev under `inputs` (in the current scope), contents unset. */
int dp_batch_init(dp_batch *b, dp_device *dev, int64_t B, int64_t T);
/* Releases both tensors (idempotent). */
void dp_batch_release(dp_batch *b);

#endif
