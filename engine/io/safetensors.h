/* safetensors.h: reading and writing the safetensors format (Hugging Face's weight files).
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows the
 * header) plus an optional "__metadata__" object of string values, then the raw little-endian
 * tensor data. Opening validates everything the header claims before anything is read: the
 * header fits in the file, every entry is complete and well-typed, each tensor's byte range lies
 * in the data section and matches its shape and dtype, ranges neither overlap nor leave holes
 * (as the reference implementation requires), names are unique. Errors are DP_EIO (the file
 * cannot be read) or DP_EINVAL (it is malformed), with a message naming the file and the tensor.
 *
 * Reading widens F32, BF16 and F16 to f32; other dtypes are listed but not readable. Writing
 * produces F32 tensors, header padded with spaces to a multiple of 8 bytes so data is aligned. */
#ifndef DP_SAFETENSORS_H
#define DP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define DP_ST_MAX_DIMS 8

/* One tensor entry of an opened file. */
typedef struct dp_st_tensor {
    const char *name;
    char dtype[12]; /* as written: "F32", "BF16", "F16", "I64", ... */
    int ndim;
    int64_t shape[DP_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte range within the data section */
} dp_st_tensor;

typedef struct dp_st_file dp_st_file;

/* Opens and validates path (mapped read-only): a regular file only (links followed; a FIFO,
 * device or directory is refused without blocking, common/safe_file). Returns DP_OK and *out, or
 * DP_EIO / DP_EINVAL / DP_EOOM with a message naming the file (and the tensor at fault). Close
 * with dp_st_close. */
int dp_st_open(const char *path, dp_st_file **out);
/* Unmaps and frees an opened file. NULL is a no-op. */
void dp_st_close(dp_st_file *f);
/* The path the file was opened with. */
const char *dp_st_path(const dp_st_file *f);
/* Number of tensors in the file. */
int dp_st_count(const dp_st_file *f);
/* Tensor i (0-based, in order of data offset), NULL when out of range. */
const dp_st_tensor *dp_st_at(const dp_st_file *f, int i);
/* The tensor named name, or NULL (a binary search: O(log n)). */
const dp_st_tensor *dp_st_find(const dp_st_file *f, const char *name);
/* The value of key in __metadata__, or NULL (valid until dp_st_close). */
const char *dp_st_metadata(const dp_st_file *f, const char *key);
/* The tensor's raw bytes (end - begin of them) inside the mapping. */
const void *dp_st_data(const dp_st_file *f, const dp_st_tensor *t);
/* Writes t's elements widened to f32 into out (n must equal t->numel). DP_ENOTSUP naming the file,
 * tensor and dtype when it is not F32, BF16 or F16; DP_EINVAL when n differs. */
int dp_st_read_f32(const dp_st_file *f, const dp_st_tensor *t, float *out, int64_t n);

/* One tensor to write: its name, shape, and a callback that writes its numel f32 values into dst
 * (a buffer of numel floats owned by the writer). get returns DP_OK or a status (with
 * dp_error_set) that aborts the write. */
typedef struct dp_st_entry {
    const char *name;
    int ndim;
    int64_t shape[DP_ST_MAX_DIMS];
    int (*get)(void *ctx, int index, float *dst, int64_t numel);
    void *ctx;
} dp_st_entry;

/* Writes n F32 tensors to path (atomically: a temporary file renamed over path), in the given
 * order, with __metadata__ from the NULL-terminated key/value list metadata (may be NULL).
 * Names must be unique, non-empty and not "__metadata__". Host memory: one tensor's buffer at a
 * time. Returns DP_OK, DP_EINVAL (bad entry) or DP_EIO naming the file. */
int dp_st_write_f32(const char *path, const dp_st_entry *entries, int n, const char *const *metadata);

/* dp_st_entry.get for a host array of floats passed as ctx (copies numel of them). */
int dp_st_get_host_f32(void *ctx, int index, float *dst, int64_t numel);

#endif
