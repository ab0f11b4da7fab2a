/* test_safetensors.c: the safetensors reader and writer: an F32 round trip is bit-exact, BF16
 * and F16 widen exactly, and every kind of malformed file is refused with a message naming the
 * file and the tensor at fault. */
#include "check.h"

#include "error.h"
#include "safetensors.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* Writes an 8-byte length, the header text as given, then data. */
static void write_raw(const char *path, const char *header, const void *data, size_t data_bytes) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    uint64_t n = strlen(header);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(n >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(header, 1, (size_t)n, fp);
    if (data_bytes) fwrite(data, 1, data_bytes, fp);
    fclose(fp);
}

static void test_round_trip(void) {
    char path[128];
    path_in(path, sizeof path, "rt.safetensors");
    float a[6] = {1.0f, -2.5f, 3.25f, 1e-30f, -0.0f, 65504.0f};
    float s[1] = {0.125f};
    float big[1000];
    for (int i = 0; i < 1000; i++) big[i] = (float)i * 0.001f - 0.3f;
    dp_st_entry e[4] = {
        {.name = "a.weight", .ndim = 2, .shape = {2, 3}, .get = dp_st_get_host_f32, .ctx = a},
        {.name = "scalar", .ndim = 0, .get = dp_st_get_host_f32, .ctx = s},
        {.name = "empty", .ndim = 2, .shape = {0, 4}, .get = dp_st_get_host_f32, .ctx = s},
        {.name = "q\"uote", .ndim = 3, .shape = {10, 10, 10}, .get = dp_st_get_host_f32, .ctx = big},
    };
    const char *meta[] = {"format", "pt", "note", "round trip", NULL};
    CHECK_OK(dp_st_write_f32(path, e, 4, meta));

    FILE *fp = fopen(path, "rb");
    uint8_t le[8] = {0};
    CHECK(fp && fread(le, 1, 8, fp) == 8);
    if (fp) fclose(fp);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | le[i];
    CHECK_EQ_U64(hlen % 8, 0); /* data starts 8-byte aligned */

    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    if (!f) return;
    CHECK_EQ_U64(dp_st_count(f), 4);
    CHECK(strcmp(dp_st_metadata(f, "format"), "pt") == 0);
    CHECK(strcmp(dp_st_metadata(f, "note"), "round trip") == 0);
    CHECK(dp_st_metadata(f, "absent") == NULL);
    /* entries come back in data order, which is the order written */
    CHECK(strcmp(dp_st_at(f, 0)->name, "a.weight") == 0);
    CHECK(dp_st_at(f, 4) == NULL);

    const dp_st_tensor *t = dp_st_find(f, "a.weight");
    CHECK(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && strcmp(t->dtype, "F32") == 0);
    float back[1000];
    if (t) {
        CHECK_OK(dp_st_read_f32(f, t, back, 6));
        CHECK(memcmp(back, a, sizeof a) == 0);
        CHECK(dp_st_read_f32(f, t, back, 5) == DP_EINVAL);
    }
    t = dp_st_find(f, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1);
    if (t) {
        CHECK_OK(dp_st_read_f32(f, t, back, 1));
        CHECK(back[0] == 0.125f);
    }
    t = dp_st_find(f, "empty");
    CHECK(t && t->numel == 0 && t->begin == t->end);
    t = dp_st_find(f, "q\"uote");
    CHECK(t && t->numel == 1000);
    if (t) {
        CHECK_OK(dp_st_read_f32(f, t, back, 1000));
        CHECK(memcmp(back, big, sizeof big) == 0);
    }
    CHECK(dp_st_find(f, "missing") == NULL);
    dp_st_close(f);

    /* bad entries are refused before anything is written */
    dp_st_entry dup[2] = {e[0], e[0]};
    CHECK(dp_st_write_f32(path, dup, 2, NULL) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "written twice") != NULL);
    dp_st_entry noname = e[0];
    noname.name = "__metadata__";
    CHECK(dp_st_write_f32(path, &noname, 1, NULL) == DP_EINVAL);
    char nodir[160];
    path_in(nodir, sizeof nodir, "no/such/dir.safetensors");
    CHECK(dp_st_write_f32(nodir, e, 1, NULL) == DP_EIO);
    CHECK(strstr(dp_error_message(), "no/such/dir") != NULL);
    unlink(path);
}

static void test_widening(void) {
    char path[128];
    path_in(path, sizeof path, "half.safetensors");
    /* F16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), 3*2^-16 (subnormal), -inf, -0;
     * BF16: 1, -3.5, 1e-38-ish (0x0080 = 2^-126 * 1), +inf */
    uint16_t f16[7] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0030, 0xfc00, 0x8000};
    uint16_t bf16[4] = {0x3f80, 0xc060, 0x0080, 0x7f80};
    uint8_t data[22];
    memcpy(data, f16, 14);
    memcpy(data + 14, bf16, 8);
    write_raw(path,
              "{\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[0,14]},"
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[14,22]}}",
              data, sizeof data);
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    if (!f) return;
    float h[7], b[4];
    CHECK_OK(dp_st_read_f32(f, dp_st_find(f, "h"), h, 7));
    CHECK(h[0] == 1.0f && h[1] == -2.0f && h[2] == 65504.0f);
    CHECK(h[3] == ldexpf(1.0f, -24) && h[4] == 3.0f * ldexpf(1.0f, -20));
    CHECK(isinf(h[5]) && h[5] < 0 && h[6] == 0.0f && signbit(h[6]));
    CHECK_OK(dp_st_read_f32(f, dp_st_find(f, "b"), b, 4));
    CHECK(b[0] == 1.0f && b[1] == -3.5f && b[2] == ldexpf(1.0f, -126) && isinf(b[3]));
    dp_st_close(f);
    unlink(path);
}

/* Expects dp_st_open to refuse the file with code and a message containing each of want[]. */
static void expect_refused(const char *label, const char *header, size_t data_bytes, int code,
                           const char *const *want) {
    char path[128];
    path_in(path, sizeof path, "bad.safetensors");
    uint8_t data[64] = {0};
    write_raw(path, header, data, data_bytes);
    dp_st_file *f = NULL;
    int rc = dp_st_open(path, &f);
    if (rc != code) {
        fprintf(stderr, "%s: dp_st_open returned %d, want %d (%s)\n", label, rc, code, dp_error_message());
        check_failures++;
    }
    CHECK(f == NULL);
    dp_st_close(f);
    const char *msg = dp_error_message();
    if (!strstr(msg, path)) {
        fprintf(stderr, "%s: message '%s' does not name the file\n", label, msg);
        check_failures++;
    }
    for (; want && *want; want++)
        if (!strstr(msg, *want)) {
            fprintf(stderr, "%s: message '%s' does not mention '%s'\n", label, msg, *want);
            check_failures++;
        }
    unlink(path);
}

#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_malformed(void) {
    const char *ok = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char hdr[512];

    expect_refused("not json", "{\"a\": [", 8, DP_EINVAL, WANT("not valid JSON"));
    expect_refused("trailing", "{}xx", 0, DP_EINVAL, WANT("trailing"));
    expect_refused("array header", "[1,2]", 0, DP_EINVAL, WANT("start with '{'"));
    snprintf(hdr, sizeof hdr, "{%s}", ok);
    expect_refused("truncated data", hdr, 4, DP_EINVAL, WANT("'a'", "past the data section"));
    expect_refused("extra data", hdr, 12, DP_EINVAL, WANT("12 bytes", "cover 8"));
    expect_refused("size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, DP_EINVAL,
                   WANT("'a'", "need 12"));
    expect_refused("overlap",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                   12, DP_EINVAL, WANT("'a'", "'b'", "overlap"));
    expect_refused("hole",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
                   16, DP_EINVAL, WANT("'b'", "belong to no tensor"));
    expect_refused("unknown dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DP_EINVAL,
                   WANT("'a'", "unknown dtype 'F33'", "BF16"));
    snprintf(hdr, sizeof hdr, "{%s,%s}", ok, ok);
    expect_refused("duplicate", hdr, 8, DP_EINVAL, WANT("'a'"));
    expect_refused("negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, DP_EINVAL,
                   WANT("'a'", "shape[0]"));
    expect_refused("fractional dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, DP_EINVAL,
                   WANT("'a'", "shape[0]"));
    expect_refused("no offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, DP_EINVAL,
                   WANT("'a'", "data_offsets"));
    expect_refused("reversed offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, DP_EINVAL,
                   WANT("'a'", "end before"));
    expect_refused("no dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DP_EINVAL, WANT("'a'", "dtype"));
    expect_refused("entry not object", "{\"a\":3}", 0, DP_EINVAL, WANT("'a'", "not a JSON object"));
    expect_refused("metadata value", "{\"__metadata__\":{\"format\":1}}", 0, DP_EINVAL, WANT("__metadata__", "format"));
    /* a name holding a newline and an escape sequence: the message stays one line (found by
     * fuzz_checkpoints: control characters are shown as '?') */
    expect_refused("control characters",
                   "{\"a\\nb\\u001b[2J\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DP_EINVAL,
                   WANT("'a?b?[2J'", "unknown dtype"));
    CHECK(strchr(dp_error_message(), '\n') == NULL && strchr(dp_error_message(), 0x1b) == NULL);

    /* raw length fields the JSON never gets to */
    char path[128];
    path_in(path, sizeof path, "short.safetensors");
    FILE *fp = fopen(path, "wb");
    fwrite("\x05\x00\x00", 1, 3, fp);
    fclose(fp);
    dp_st_file *f = NULL;
    CHECK(dp_st_open(path, &f) == DP_EINVAL && strstr(dp_error_message(), "too short"));
    fp = fopen(path, "wb");
    fwrite("\xff\x00\x00\x00\x00\x00\x00\x00{}", 1, 10, fp);
    fclose(fp);
    CHECK(dp_st_open(path, &f) == DP_EINVAL && strstr(dp_error_message(), "does not fit"));
    unlink(path);
    path_in(path, sizeof path, "absent.safetensors");
    CHECK(dp_st_open(path, &f) == DP_EIO && strstr(dp_error_message(), "absent.safetensors"));

    /* a valid file with a dtype we list but cannot widen */
    path_in(path, sizeof path, "i64.safetensors");
    uint8_t data[16] = {1};
    write_raw(path, "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", data, 16);
    CHECK_OK(dp_st_open(path, &f));
    if (f) {
        float out[2];
        CHECK(dp_st_read_f32(f, dp_st_find(f, "ids"), out, 2) == DP_ENOTSUP);
        CHECK(strstr(dp_error_message(), "'ids'") && strstr(dp_error_message(), "I64"));
        dp_st_close(f);
    }
    unlink(path);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dpprof-st-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_widening();
    test_malformed();
    rmdir(dir);
    return check_report("test_safetensors");
}
