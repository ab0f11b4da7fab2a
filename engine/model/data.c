/* data.c: synthetic and file-backed token batches (see data.h). */
#include "data.h"

#include "device.h"
#include "error.h"
#include "layer_ops.h"
#include "ledger.h"
#include "philox.h"
#include "safe_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int dp_token_dtype_parse(const char *name, dp_token_dtype *out) {
    if (strcmp(name, "uint16") == 0)
        *out = DP_TOKENS_U16;
    else if (strcmp(name, "uint32") == 0)
        *out = DP_TOKENS_U32;
    else
        return -1;
    return 0;
}

const char *dp_token_dtype_name(dp_token_dtype t) { return t == DP_TOKENS_U32 ? "uint32" : "uint16"; }

static int check_pair(const dp_tensor *inputs, const dp_tensor *targets, int64_t vocab, const char *fn) {
    if (inputs->dtype != DP_I32 || targets->dtype != DP_I32 || inputs->ndim != 2 || targets->ndim != 2 ||
        inputs->shape[0] != targets->shape[0] || inputs->shape[1] != targets->shape[1] || inputs->shape[1] < 1)
        return dp_error_set(DP_EINVAL, "%s: inputs and targets must be i32 B x T tensors of one shape", fn);
    if (vocab < 1 || vocab > INT32_MAX)
        return dp_error_set(DP_EINVAL, "%s: vocabulary size %lld is out of range", fn, (long long)vocab);
    return DP_OK;
}

/* tokens (B x (T+1), host) -> inputs and targets on their device */
static int upload(dp_tensor *inputs, dp_tensor *targets, const int32_t *tokens, int32_t *stage) {
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    uint64_t bytes = (uint64_t)(B * T) * sizeof(int32_t);
    for (int64_t b = 0; b < B; b++) memcpy(stage + b * T, tokens + b * (T + 1), (size_t)T * sizeof *stage);
    dp_ledger_add("copy_h2d", 0, (double)bytes);
    DP_TRY(dp_tensor_from_host(inputs, stage, bytes));
    for (int64_t b = 0; b < B; b++) memcpy(stage + b * T, tokens + b * (T + 1) + 1, (size_t)T * sizeof *stage);
    dp_ledger_add("copy_h2d", 0, (double)bytes);
    return dp_tensor_from_host(targets, stage, bytes);
}

/* On the plan device there are no values to make or move: the two uploads' ledger entries alone,
 * so that a plan of a large batch neither builds gigabytes of host tokens nor differs in its
 * ledger from the device run it models. */
static int plan_upload(const dp_tensor *inputs) {
    double bytes = (double)(inputs->shape[0] * inputs->shape[1]) * (double)sizeof(int32_t);
    dp_ledger_add("copy_h2d", 0, bytes);
    dp_ledger_add("copy_h2d", 0, bytes);
    return DP_OK;
}

/* host buffers for B x (T+1) tokens and a B x T staging area */
static int host_buffers(int64_t B, int64_t T, int32_t **tokens, int32_t **stage, const char *fn) {
    *tokens = malloc((size_t)(B * (T + 1)) * sizeof **tokens);
    *stage = malloc((size_t)(B * T) * sizeof **stage);
    if (*tokens && *stage) return DP_OK;
    free(*tokens);
    free(*stage);
    *tokens = *stage = NULL;
    return dp_error_set(DP_EOOM, "%s: out of host memory for %lld tokens", fn, (long long)(B * (T + 1)));
}

int dp_data_synthetic(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, uint64_t seed, uint64_t step) {
    return dp_data_synthetic_at(inputs, targets, vocab, seed, step, 0);
}

int dp_data_synthetic_at(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, uint64_t seed, uint64_t step,
                         int64_t first) {
    const char *fn = "batch";
    DP_TRY(check_pair(inputs, targets, vocab, fn));
    if (inputs->dev->kind == DP_DEV_PLAN) return plan_upload(inputs);
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    int32_t *tokens, *stage;
    DP_TRY(host_buffers(B, T, &tokens, &stage, fn));
    const uint64_t e0 = (uint64_t)first * (uint64_t)(T + 1); /* sample `first`'s first word */
    for (int64_t e = 0; e < B * (T + 1); e++) {
        uint64_t g = e0 + (uint64_t)e;
        uint32_t w = dp_philox4x32(seed, step, g >> 2).v[g & 3];
        tokens[e] = (int32_t)(((uint64_t)w * (uint64_t)vocab) >> 32);
    }
    int rc = upload(inputs, targets, tokens, stage);
    free(tokens);
    free(stage);
    return rc;
}

/* Reads n tokens of width w bytes at token offset `at` of f into out (as i32), checking ids. */
static int read_window(FILE *f, const char *path, int w, int64_t at, int64_t n, int64_t vocab, int32_t *out) {
    unsigned char buf[4096];
    if (fseeko(f, (off_t)(at * w), SEEK_SET) != 0)
        return dp_error_set(DP_EIO, "batch: cannot seek in '%s': %s", path, strerror(errno));
    for (int64_t done = 0; done < n;) {
        int64_t chunk = n - done < (int64_t)(sizeof buf) / w ? n - done : (int64_t)(sizeof buf) / w;
        if (fread(buf, (size_t)w, (size_t)chunk, f) != (size_t)chunk)
            return dp_error_set(DP_EIO, "batch: short read from '%s' at token %lld", path, (long long)(at + done));
        for (int64_t i = 0; i < chunk; i++) {
            const unsigned char *p = buf + i * w;
            uint32_t id = w == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                                 : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            if ((int64_t)id >= vocab)
                return dp_error_set(DP_EINVAL,
                                    "batch: token %u at position %lld of '%s' is outside the vocabulary [0, %lld)", id,
                                    (long long)(at + done + i), path, (long long)vocab);
            out[done + i] = (int32_t)id;
        }
        done += chunk;
    }
    return DP_OK;
}

int dp_data_from_file(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                      uint64_t seed, uint64_t step) {
    return dp_data_from_file_at(inputs, targets, path, dt, vocab, seed, step, 0);
}

/* Windows of T + 1 tokens of the token file at path: sample b's at the token offset start(b, n)
 * gives for the file's n tokens (random or in order). On the plan device the file is checked, not
 * read. */
typedef int64_t (*window_start_fn)(int64_t b, int64_t n, int64_t T, const void *how);

static int file_windows(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                        window_start_fn start_of, const void *how) {
    const char *fn = "batch";
    DP_TRY(check_pair(inputs, targets, vocab, fn));
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    const int w = dt == DP_TOKENS_U32 ? 4 : 2;
    char why[1024];
    FILE *f = dpfile_open_read(path, why, sizeof why); /* a regular file: a FIFO would hang the read */
    if (!f) return dp_error_set(DP_EIO, "batch: cannot open token file %s", why);
    struct stat st;
    memset(&st, 0, sizeof st);
    int rc = DP_OK;
    if (fstat(fileno(f), &st) != 0)
        rc = dp_error_set(DP_EIO, "batch: cannot stat '%s': %s", path, strerror(errno));
    else if (st.st_size % w)
        rc = dp_error_set(DP_EIO, "batch: '%s' has %lld bytes, not a whole number of %s tokens", path,
                          (long long)st.st_size, dp_token_dtype_name(dt));
    const int64_t n = (int64_t)st.st_size / w;
    if (rc == DP_OK && n < T + 1)
        rc = dp_error_set(DP_EINVAL, "batch: '%s' holds %lld %s tokens; a window of seq_len + 1 = %lld needs more",
                          path, (long long)n, dp_token_dtype_name(dt), (long long)(T + 1));
    if (rc == DP_OK && inputs->dev->kind == DP_DEV_PLAN) { /* the file is checked, not read */
        fclose(f);
        return plan_upload(inputs);
    }
    int32_t *tokens = NULL, *stage = NULL;
    if (rc == DP_OK) rc = host_buffers(B, T, &tokens, &stage, fn);
    for (int64_t b = 0; b < B && rc == DP_OK; b++)
        rc = read_window(f, path, w, start_of(b, n, T, how), T + 1, vocab, tokens + b * (T + 1));
    fclose(f);
    if (rc == DP_OK) rc = upload(inputs, targets, tokens, stage);
    free(tokens);
    free(stage);
    return rc;
}

typedef struct random_windows {
    uint64_t seed, step;
    int64_t first;
} random_windows;

/* sample b of (seed, step): 64 random bits of Philox block first + b, mod (n - T) */
static int64_t random_start(int64_t b, int64_t n, int64_t T, const void *how) {
    const random_windows *r = how;
    dp_philox_out o = dp_philox4x32(r->seed, r->step, (uint64_t)(r->first + b));
    uint64_t bits = (uint64_t)o.v[0] | (uint64_t)o.v[1] << 32;
    return (int64_t)(bits % (uint64_t)(n - T));
}

/* window first + b of the file in order: (w mod floor((n - 1) / T)) * T */
static int64_t sequential_start(int64_t b, int64_t n, int64_t T, const void *how) {
    uint64_t w = (uint64_t) * (const int64_t *)how + (uint64_t)b, whole = (uint64_t)((n - 1) / T);
    return (int64_t)(w % whole) * T;
}

int dp_data_from_file_at(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                         uint64_t seed, uint64_t step, int64_t first) {
    random_windows how = {seed, step, first};
    return file_windows(inputs, targets, path, dt, vocab, random_start, &how);
}

int dp_data_from_file_seq(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                          int64_t first) {
    if (first < 0) return dp_error_set(DP_EINVAL, "batch: the first window %lld must be >= 0", (long long)first);
    return file_windows(inputs, targets, path, dt, vocab, sequential_start, &first);
}

/* ---- padded batches ------------------------------------------------------------------------- */

/* The lengths of a padded batch: each in [1, T]. */
static int check_lengths(const dp_tensor *inputs, const int64_t *lengths, const char *fn) {
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    for (int64_t b = 0; b < B; b++)
        if (lengths[b] < 1 || lengths[b] > T)
            return dp_error_set(DP_EINVAL, "%s: sample %lld has length %lld, outside [1, %lld] (the padded length)", fn,
                                (long long)b, (long long)lengths[b], (long long)T);
    return DP_OK;
}

/* tokens (B x (T+1), sample b's first lengths[b] + 1 real) -> right-padded inputs and targets */
/* noloss (NULL: none): B x (T + 1) flags, token j of sample b carrying no loss as a target */
static int upload_padded(dp_tensor *inputs, dp_tensor *targets, const int32_t *tokens, int32_t *stage,
                         const int64_t *lengths, const unsigned char *noloss) {
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    uint64_t bytes = (uint64_t)(B * T) * sizeof(int32_t);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < T; j++) stage[b * T + j] = j < lengths[b] ? tokens[b * (T + 1) + j] : 0;
    dp_ledger_add("copy_h2d", 0, (double)bytes);
    DP_TRY(dp_tensor_from_host(inputs, stage, bytes));
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < T; j++)
            stage[b * T + j] = j < lengths[b] && !(noloss && noloss[b * (T + 1) + j + 1])
                                   ? tokens[b * (T + 1) + j + 1]
                                   : DP_IGNORE_INDEX;
    dp_ledger_add("copy_h2d", 0, (double)bytes);
    return dp_tensor_from_host(targets, stage, bytes);
}

int dp_data_synthetic_padded(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, uint64_t seed,
                             const int64_t *samples, const int64_t *lengths) {
    const char *fn = "batch";
    DP_TRY(check_pair(inputs, targets, vocab, fn));
    DP_TRY(check_lengths(inputs, lengths, fn));
    if (inputs->dev->kind == DP_DEV_PLAN) return plan_upload(inputs);
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    int32_t *tokens, *stage;
    DP_TRY(host_buffers(B, T, &tokens, &stage, fn));
    for (int64_t b = 0; b < B; b++) {
        uint64_t stream = DP_DATA_SAMPLE_STREAM | ((uint64_t)samples[b] & 0xffffffffffffull);
        for (int64_t j = 0; j <= lengths[b]; j++) {
            uint32_t w = dp_philox4x32(seed, stream, (uint64_t)j >> 2).v[j & 3];
            tokens[b * (T + 1) + j] = (int32_t)(((uint64_t)w * (uint64_t)vocab) >> 32);
        }
    }
    int rc = upload_padded(inputs, targets, tokens, stage, lengths, NULL);
    free(tokens);
    free(stage);
    return rc;
}

int dp_data_file_padded(dp_tensor *inputs, dp_tensor *targets, const char *path, dp_token_dtype dt, int64_t vocab,
                        const int64_t *starts, const int64_t *lengths) {
    const char *fn = "batch";
    DP_TRY(check_pair(inputs, targets, vocab, fn));
    DP_TRY(check_lengths(inputs, lengths, fn));
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    const int w = dt == DP_TOKENS_U32 ? 4 : 2;
    char why[1024];
    FILE *f = dpfile_open_read(path, why, sizeof why);
    if (!f) return dp_error_set(DP_EIO, "batch: cannot open token file %s", why);
    struct stat st;
    memset(&st, 0, sizeof st);
    int rc = DP_OK;
    if (fstat(fileno(f), &st) != 0) rc = dp_error_set(DP_EIO, "batch: cannot stat '%s': %s", path, strerror(errno));
    const int64_t n = (int64_t)st.st_size / w;
    for (int64_t b = 0; b < B && rc == DP_OK; b++)
        if (starts[b] < 0 || starts[b] + lengths[b] + 1 > n)
            rc = dp_error_set(DP_EINVAL,
                              "batch: sample %lld's window of %lld tokens at %lld lies outside '%s' (%lld tokens)",
                              (long long)b, (long long)(lengths[b] + 1), (long long)starts[b], path, (long long)n);
    if (rc == DP_OK && inputs->dev->kind == DP_DEV_PLAN) {
        fclose(f);
        return plan_upload(inputs);
    }
    int32_t *tokens = NULL, *stage = NULL;
    if (rc == DP_OK) rc = host_buffers(B, T, &tokens, &stage, fn);
    for (int64_t b = 0; b < B && rc == DP_OK; b++)
        rc = read_window(f, path, w, starts[b], lengths[b] + 1, vocab, tokens + b * (T + 1));
    fclose(f);
    if (rc == DP_OK) rc = upload_padded(inputs, targets, tokens, stage, lengths, NULL);
    free(tokens);
    free(stage);
    return rc;
}

int dp_data_tokens_padded(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, const int64_t *ids,
                          const int64_t *offsets, const int64_t *lengths) {
    return dp_data_tokens_padded_masked(inputs, targets, vocab, ids, offsets, lengths, NULL);
}

int dp_data_tokens_padded_masked(dp_tensor *inputs, dp_tensor *targets, int64_t vocab, const int64_t *ids,
                                 const int64_t *offsets, const int64_t *lengths, const unsigned char *loss) {
    const char *fn = "batch";
    DP_TRY(check_pair(inputs, targets, vocab, fn));
    DP_TRY(check_lengths(inputs, lengths, fn));
    const int64_t B = inputs->shape[0], T = inputs->shape[1];
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j <= lengths[b]; j++) {
            int64_t id = ids[offsets[b] + j];
            if (id < 0 || id >= vocab)
                return dp_error_set(DP_EINVAL,
                                    "batch: sample %lld's token %lld is %lld, outside the vocabulary [0, %lld)",
                                    (long long)b, (long long)j, (long long)id, (long long)vocab);
        }
    if (inputs->dev->kind == DP_DEV_PLAN) return plan_upload(inputs);
    int32_t *tokens, *stage;
    DP_TRY(host_buffers(B, T, &tokens, &stage, fn));
    unsigned char *noloss = loss ? calloc((size_t)(B * (T + 1)), 1) : NULL;
    if (loss && !noloss) {
        free(tokens);
        free(stage);
        return dp_error_set(DP_EOOM, "%s: out of host memory", fn);
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j <= lengths[b]; j++) {
            tokens[b * (T + 1) + j] = (int32_t)ids[offsets[b] + j];
            if (noloss) noloss[b * (T + 1) + j] = !loss[offsets[b] + j];
        }
    int rc = upload_padded(inputs, targets, tokens, stage, lengths, noloss);
    free(noloss);
    free(tokens);
    free(stage);
    return rc;
}

int dp_batch_init(dp_batch *b, dp_device *dev, int64_t B, int64_t T) {
    memset(b, 0, sizeof *b);
    int64_t shape[2] = {B, T};
    DP_TRY(dp_tensor_init(&b->inputs, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    int rc = dp_tensor_init(&b->targets, dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    if (rc != DP_OK) dp_tensor_release(&b->inputs);
    return rc;
}

void dp_batch_release(dp_batch *b) {
    dp_tensor_release(&b->inputs);
    dp_tensor_release(&b->targets);
}
