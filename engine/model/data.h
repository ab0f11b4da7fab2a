/* data.h: token batches for the model. A batch is inputs and targets, B x T i32 tensors on the
 * model's device under `inputs`; sample b is a window of T+1 tokens, inputs its first T and
 * targets its last T (the next tokens).
 *
 * Synthetic tokens come from Philox keyed by (seed, step), drawn on the host and copied to the
 * device: token j of sample b is word e = b*(T+1) + j of stream `step`, mapped to [0, V) as
 * (word * V) >> 32. A sample does not depend on the batch size, and every device sees the same
 * tokens. A token file is a flat little-endian array of uint16 or uint32 ids; sample b of step s
 * is the window starting at (64 random bits of Philox block b of stream s) mod (n - T). */
#ifndef DP_DATA_H
#define DP_DATA_H

#include "tensor.h"

#include <stdint.h>

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

/* The same batches starting at global sample `first` (>= 0): sample b of the tensors is sample
 * first + b of (seed, step), so the ranks of a distributed run, each holding its slice of a
 * logical batch, hold exactly the samples one process holds at those positions. */
int dp_data_synthetic_at(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, uint64_t seed, uint64_t step,
                         int64_t first);
int dp_data_from_file_at(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                         uint64_t seed, uint64_t step, int64_t first);

/* A batch owned by C code (Lua holds its tensors in userdata instead). */
typedef struct dp_batch {
    dp_tensor inputs, targets;
} dp_batch;

/* Allocates a B x T batch on dev under `inputs` (in the current scope), contents unset. */
int dp_batch_init(dp_batch *b, dp_device *dev, int64_t B, int64_t T);
/* Releases both tensors (idempotent). */
void dp_batch_release(dp_batch *b);

#endif
