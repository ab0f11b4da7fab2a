/* safetensors.c: the safetensors reader (mmap + cJSON header, validated before use) and an F32
 * writer. See safetensors.h for the format and what is checked. */
#include "safetensors.h"

#include "error.h"
#include "safe_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers over 100 MB; so do we (a corrupt length must not
 * make us parse gigabytes). */
#define ST_MAX_HEADER_BYTES 100000000ull

struct dp_st_file {
    char *path;
    const uint8_t *map; /* the whole file, read-only */
    size_t map_bytes;
    const uint8_t *data; /* the data section: map + 8 + header length */
    uint64_t data_bytes;
    cJSON *header; /* owns the names and metadata strings */
    int n;
    dp_st_tensor *tensors;        /* sorted by data offset */
    const dp_st_tensor **by_name; /* the same, sorted by name (dp_st_find's binary search) */
};

typedef struct st_dtype {
    const char *name;
    unsigned size;
} st_dtype;

/* Every dtype of the format, so files holding ones we cannot read still validate. */
static const st_dtype st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},
};
#define ST_DTYPES_LIST "BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64"

static unsigned dtype_size(const char *name) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return st_dtypes[i].size;
    return 0;
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || floor(v) != v) return 0;
    *out = (uint64_t)v;
    return 1;
}

static int fail_tensor(const char *path, const char *name, const char *what) {
    return dp_error_set(DP_EINVAL, "%s: tensor '%s': %s", path, name, what);
}

/* Parses one tensor entry of the header into t (name borrowed from the cJSON tree). */
static int parse_entry(const char *path, const cJSON *e, dp_st_tensor *t) {
    const char *name = e->string;
    memset(t, 0, sizeof *t);
    t->name = name;
    if (!*name) return dp_error_set(DP_EINVAL, "%s: a tensor has an empty name", path);
    if (!cJSON_IsObject(e)) return fail_tensor(path, name, "entry is not a JSON object");

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt)) return fail_tensor(path, name, "missing string 'dtype'");
    unsigned esize = dtype_size(dt->valuestring);
    if (!esize)
        return dp_error_set(DP_EINVAL, "%s: tensor '%s': unknown dtype '%.16s' (valid: %s)", path, name,
                            dt->valuestring, ST_DTYPES_LIST);
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(shape)) return fail_tensor(path, name, "missing array 'shape'");
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > DP_ST_MAX_DIMS)
        return dp_error_set(DP_EINVAL, "%s: tensor '%s': %d dimensions (at most %d)", path, name, ndim, DP_ST_MAX_DIMS);
    uint64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < ndim; i++) {
        uint64_t d;
        if (!json_uint(cJSON_GetArrayItem(shape, i), &d))
            return dp_error_set(DP_EINVAL, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
        t->shape[i] = (int64_t)d;
        if (d && numel > (UINT64_MAX / 16) / d) overflow = 1;
        numel *= d;
    }
    t->ndim = ndim;
    if (overflow) return fail_tensor(path, name, "shape is too large");
    t->numel = (int64_t)numel;

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return fail_tensor(path, name, "missing 'data_offsets' [begin, end]");
    if (!json_uint(cJSON_GetArrayItem(offs, 0), &t->begin) || !json_uint(cJSON_GetArrayItem(offs, 1), &t->end))
        return fail_tensor(path, name, "data_offsets are not non-negative integers");
    if (t->end < t->begin)
        return dp_error_set(DP_EINVAL, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                            path, name, t->begin, t->end);
    if (t->end - t->begin != numel * esize)
        return dp_error_set(DP_EINVAL,
                            "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                            " bytes but shape and dtype %s need %" PRIu64,
                            path, name, t->begin, t->end, t->end - t->begin, t->dtype, numel * esize);
    return DP_OK;
}

static int by_offset(const void *a, const void *b) {
    const dp_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b) {
    const dp_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Ranges in order of offset must tile the data section exactly: no overlap, no hole. */
static int check_layout(dp_st_file *f) {
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, by_offset);
    uint64_t pos = 0;
    const char *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const dp_st_tensor *t = &f->tensors[i];
        if (t->end > f->data_bytes)
            return dp_error_set(DP_EINVAL,
                                "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                "] run past the data section (%" PRIu64 " bytes; file truncated?)",
                                f->path, t->name, t->begin, t->end, f->data_bytes);
        if (t->begin < pos)
            return dp_error_set(DP_EINVAL, "%s: tensors '%s' and '%s' overlap (bytes %" PRIu64 " to %" PRIu64 ")",
                                f->path, prev, t->name, t->begin, pos);
        if (t->begin > pos)
            return dp_error_set(
                DP_EINVAL, "%s: bytes %" PRIu64 " to %" PRIu64 " of the data section belong to no tensor (before '%s')",
                f->path, pos, t->begin, t->name);
        pos = t->end;
        prev = t->name;
    }
    if (pos != f->data_bytes)
        return dp_error_set(DP_EINVAL, "%s: the data section has %" PRIu64 " bytes but the tensors cover %" PRIu64,
                            f->path, f->data_bytes, pos);

    const dp_st_tensor **names = malloc((f->n > 0 ? (size_t)f->n : 1) * sizeof *names);
    if (!names) return dp_error_set(DP_EOOM, "%s: out of host memory", f->path);
    f->by_name = names; /* freed by dp_st_close */
    for (int i = 0; i < f->n; i++) names[i] = &f->tensors[i];
    qsort(names, (size_t)f->n, sizeof *names, by_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(names[i - 1]->name, names[i]->name) == 0)
            return dp_error_set(DP_EINVAL, "%s: tensor '%s' appears twice in the header", f->path, names[i]->name);
    return DP_OK;
}

static int check_metadata(const char *path, const cJSON *meta) {
    if (!cJSON_IsObject(meta)) return dp_error_set(DP_EINVAL, "%s: __metadata__ is not a JSON object", path);
    for (const cJSON *kv = meta->child; kv; kv = kv->next)
        if (!cJSON_IsString(kv))
            return dp_error_set(DP_EINVAL, "%s: __metadata__ value of '%s' is not a string", path, kv->string);
    return DP_OK;
}

static int parse_header(dp_st_file *f, const char *json, uint64_t len) {
    const char *end = NULL;
    f->header = cJSON_ParseWithLengthOpts(json, (size_t)len, &end, 0);
    if (!f->header) {
        size_t at = end ? (size_t)(end - json) : 0;
        return dp_error_set(DP_EINVAL, "%s: header is not valid JSON (near byte %zu of %" PRIu64 ")", f->path, at, len);
    }
    for (const char *p = end; p < json + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return dp_error_set(DP_EINVAL, "%s: header has trailing bytes after its JSON object", f->path);
    if (!cJSON_IsObject(f->header)) return dp_error_set(DP_EINVAL, "%s: header is not a JSON object", f->path);

    int n = 0;
    for (const cJSON *e = f->header->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__") != 0) n++;
    f->tensors = calloc(n ? (size_t)n : 1, sizeof *f->tensors);
    if (!f->tensors) return dp_error_set(DP_EOOM, "%s: out of host memory", f->path);
    int nmeta = 0;
    for (const cJSON *e = f->header->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (++nmeta > 1) return dp_error_set(DP_EINVAL, "%s: __metadata__ appears twice", f->path);
            DP_TRY(check_metadata(f->path, e));
            continue;
        }
        DP_TRY(parse_entry(f->path, e, &f->tensors[f->n]));
        f->n++;
    }
    return check_layout(f);
}

int dp_st_open(const char *path, dp_st_file **out) {
    *out = NULL;
    if (!host_is_little_endian())
        return dp_error_set(DP_ENOTSUP, "%s: safetensors data is little-endian; this host is not", path);
    dp_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    }
    /* a regular file only: a FIFO, device or directory at the name is refused without blocking */
    char why[1024];
    FILE *fp = dpfile_open_read(path, why, sizeof why);
    if (!fp) {
        dp_st_close(f);
        return dp_error_set(DP_EIO, "%s", why);
    }
    int fd = fileno(fp);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        dp_st_close(f);
        return dp_error_set(DP_EIO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        fclose(fp);
        dp_st_close(f);
        return dp_error_set(DP_EINVAL,
                            "%s: %" PRIu64 " bytes, too short for a safetensors file (8-byte header length first)",
                            path, size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    fclose(fp);
    if (map == MAP_FAILED) {
        dp_st_close(f);
        return dp_error_set(DP_EIO, "%s: cannot map: %s", path, strerror(e));
    }
    f->map = map;
    f->map_bytes = (size_t)size;

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    int rc = DP_OK;
    if (hlen < 2 || hlen > size - 8)
        rc = dp_error_set(DP_EINVAL, "%s: header length %" PRIu64 " does not fit in the file's %" PRIu64 " bytes", path,
                          hlen, size);
    else if (hlen > ST_MAX_HEADER_BYTES)
        rc = dp_error_set(DP_EINVAL, "%s: header length %" PRIu64 " exceeds the format's limit of %llu bytes", path,
                          hlen, ST_MAX_HEADER_BYTES);
    else if (f->map[8] != '{')
        rc = dp_error_set(DP_EINVAL, "%s: header does not start with '{' (not a safetensors file?)", path);
    if (rc == DP_OK) {
        f->data = f->map + 8 + hlen;
        f->data_bytes = size - 8 - hlen;
        rc = parse_header(f, (const char *)f->map + 8, hlen);
    }
    if (rc != DP_OK) {
        dp_st_close(f);
        return rc;
    }
    *out = f;
    return DP_OK;
}

void dp_st_close(dp_st_file *f) {
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->map_bytes);
    cJSON_Delete(f->header);
    free(f->by_name);
    free(f->tensors);
    free(f->path);
    free(f);
}

const char *dp_st_path(const dp_st_file *f) { return f->path; }

int dp_st_count(const dp_st_file *f) { return f->n; }

const dp_st_tensor *dp_st_at(const dp_st_file *f, int i) { return i >= 0 && i < f->n ? &f->tensors[i] : NULL; }

static int name_vs_tensor(const void *key, const void *elem) {
    return strcmp(key, (*(const dp_st_tensor *const *)elem)->name);
}

const dp_st_tensor *dp_st_find(const dp_st_file *f, const char *name) {
    const dp_st_tensor *const *hit =
        f->n ? bsearch(name, f->by_name, (size_t)f->n, sizeof *f->by_name, name_vs_tensor) : NULL;
    return hit ? *hit : NULL;
}

const char *dp_st_metadata(const dp_st_file *f, const char *key) {
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    const cJSON *v = meta ? cJSON_GetObjectItemCaseSensitive(meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

const void *dp_st_data(const dp_st_file *f, const dp_st_tensor *t) { return f->data + t->begin; }

/* IEEE half -> single, exact (subnormals, infinities and NaN included). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp) {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (!mant) {
        u = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            mant <<= 1;
            e++;
        } while (!(mant & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int dp_st_read_f32(const dp_st_file *f, const dp_st_tensor *t, float *out, int64_t n) {
    if (n != t->numel)
        return dp_error_set(DP_EINVAL, "%s: tensor '%s' has %" PRId64 " elements, %" PRId64 " requested", f->path,
                            t->name, t->numel, n);
    const uint8_t *src = f->data + t->begin;
    if (strcmp(t->dtype, "F32") == 0) {
        memcpy(out, src, (size_t)n * 4);
    } else if (strcmp(t->dtype, "BF16") == 0) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&out[i], &u, 4);
        }
    } else if (strcmp(t->dtype, "F16") == 0) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = f16_to_f32(h);
        }
    } else {
        return dp_error_set(DP_ENOTSUP, "%s: tensor '%s' has dtype %s (readable: F32, BF16, F16)", f->path, t->name,
                            t->dtype);
    }
    return DP_OK;
}

int dp_st_get_host_f32(void *ctx, int index, float *dst, int64_t numel) {
    (void)index;
    memcpy(dst, ctx, (size_t)numel * sizeof *dst);
    return DP_OK;
}

/* ---- writing -------------------------------------------------------------------------------- */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string literal, escaped. */
static void sb_json_string(strbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            sb_add(b, esc, 2);
        } else if (*p < 0x20) {
            sb_printf(b, "\\u%04x", *p);
        } else {
            sb_add(b, (const char *)p, 1);
        }
    }
    sb_add(b, "\"", 1);
}

static int check_entries(const char *path, const dp_st_entry *entries, int n, int64_t *max_numel) {
    *max_numel = 0;
    for (int i = 0; i < n; i++) {
        const dp_st_entry *e = &entries[i];
        if (!e->name || !*e->name || strcmp(e->name, "__metadata__") == 0)
            return dp_error_set(DP_EINVAL, "%s: entry %d has no valid name", path, i);
        if (e->ndim < 0 || e->ndim > DP_ST_MAX_DIMS)
            return dp_error_set(DP_EINVAL, "%s: tensor '%s': %d dimensions (0 to %d)", path, e->name, e->ndim,
                                DP_ST_MAX_DIMS);
        if (!e->get) return dp_error_set(DP_EINVAL, "%s: tensor '%s' has no data callback", path, e->name);
        int64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0 || (e->shape[d] && numel > (INT64_MAX / 8) / e->shape[d]))
                return dp_error_set(DP_EINVAL, "%s: tensor '%s': bad shape", path, e->name);
            numel *= e->shape[d];
        }
        if (numel > *max_numel) *max_numel = numel;
        for (int j = 0; j < i; j++)
            if (strcmp(entries[j].name, e->name) == 0)
                return dp_error_set(DP_EINVAL, "%s: tensor '%s' is written twice", path, e->name);
    }
    return DP_OK;
}

static int64_t entry_numel(const dp_st_entry *e) {
    int64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) numel *= e->shape[d];
    return numel;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static int build_header(const char *path, const dp_st_entry *entries, int n, const char *const *metadata, strbuf *b) {
    sb_add(b, "{", 1);
    int first = 1;
    if (metadata && metadata[0]) {
        sb_str(b, "\"__metadata__\":{");
        for (const char *const *kv = metadata; kv[0]; kv += 2) {
            if (!kv[1]) return dp_error_set(DP_EINVAL, "%s: metadata key '%s' has no value", path, kv[0]);
            if (kv != metadata) sb_add(b, ",", 1);
            sb_json_string(b, kv[0]);
            sb_add(b, ":", 1);
            sb_json_string(b, kv[1]);
        }
        sb_add(b, "}", 1);
        first = 0;
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const dp_st_entry *e = &entries[i];
        if (!first) sb_add(b, ",", 1);
        first = 0;
        sb_json_string(b, e->name);
        sb_str(b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) sb_printf(b, "%s%" PRId64, d ? "," : "", e->shape[d]);
        uint64_t bytes = (uint64_t)entry_numel(e) * 4u;
        sb_printf(b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset, offset + bytes);
        offset += bytes;
    }
    sb_add(b, "}", 1);
    while (b->len % 8) sb_add(b, " ", 1);
    if (b->oom) return dp_error_set(DP_EOOM, "%s: out of host memory building the header", path);
    return DP_OK;
}

static int write_all(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n; }

int dp_st_write_f32(const char *path, const dp_st_entry *entries, int n, const char *const *metadata) {
    if (!host_is_little_endian())
        return dp_error_set(DP_ENOTSUP, "%s: safetensors data is little-endian; this host is not", path);
    if (n < 0) return dp_error_set(DP_EINVAL, "%s: negative tensor count", path);
    int64_t max_numel;
    DP_TRY(check_entries(path, entries, n, &max_numel));
    strbuf header = {0};
    int rc = build_header(path, entries, n, metadata, &header);
    if (rc != DP_OK) {
        free(header.s);
        return rc;
    }

    float *buf = malloc((size_t)(max_numel ? max_numel : 1) * sizeof *buf);
    if (!buf) {
        free(header.s);
        return dp_error_set(DP_EOOM, "%s: out of host memory (%" PRId64 " floats)", path, max_numel);
    }
    /* a unique temporary renamed over path: never through a link, never over a non-regular file */
    dpfile_writer w;
    char why[1024];
    if (dpfile_writer_open(&w, path, why, sizeof why) != 0) {
        rc = dp_error_set(DP_EIO, "%s", why);
        goto done;
    }
    FILE *fp = w.fp;
    const char *tmp = path;
    uint8_t len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (uint8_t)((uint64_t)header.len >> (8 * i));
    if (!write_all(fp, len_le, 8) || !write_all(fp, header.s, header.len)) {
        rc = dp_error_set(DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    }
    for (int i = 0; i < n && rc == DP_OK; i++) {
        int64_t numel = entry_numel(&entries[i]);
        rc = entries[i].get(entries[i].ctx, i, buf, numel);
        if (rc == DP_OK && !write_all(fp, buf, (size_t)numel * sizeof *buf))
            rc = dp_error_set(DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    }
    if (rc != DP_OK)
        dpfile_writer_abort(&w);
    else if (dpfile_writer_commit(&w, why, sizeof why) != 0)
        rc = dp_error_set(DP_EIO, "%s", why);
done:
    free(buf);
    free(header.s);
    return rc;
}
