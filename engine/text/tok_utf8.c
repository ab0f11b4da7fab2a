/* tok_utf8.c: UTF-8 validation and repair (U+FFFD for each maximal invalid subpart, as Python's
 * errors="replace" and Rust's from_utf8_lossy do), and GPT-2's byte <-> character map. */
#include "tok_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

/* The range the second byte of a sequence led by b may take, and the sequence's length (0: b
 * cannot lead one). */
static int lead(unsigned char b, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b == 0xE0) *lo = 0xA0;
    if (b == 0xED) *hi = 0x9F;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b == 0xF0) *lo = 0x90;
    if (b == 0xF4) *hi = 0x8F;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* The sequence at s: its length when valid (> 0), else minus the length of its maximal invalid
 * subpart (at least 1). */
static long scan(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char lo, hi;
    int len = lead(s[0], &lo, &hi);
    if (len == 1) {
        *cp = s[0];
        return 1;
    }
    if (len == 0) return -1;
    uint32_t v = s[0] & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (int k = 1; k < len; k++) {
        unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if ((size_t)k >= n || s[k] < l || s[k] > h) return -k;
        v = v << 6 | (s[k] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t tk_utf8_valid(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint32_t v = 0;
    long r = scan(s, n, &v);
    if (cp) *cp = v;
    return r > 0 ? (size_t)r : 0;
}

int tk_utf8_repair(const char *s, size_t n, char **out, size_t *out_n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, bad = 0;
    uint32_t cp;
    while (i < n) { /* ASCII runs first: the common case costs one pass */
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        long r = scan(u + i, n - i, &cp);
        if (r < 0) bad++;
        i += (size_t)(r < 0 ? -r : r);
    }
    *out = NULL;
    *out_n = n;
    if (!bad) return DP_OK;
    char *o = malloc(n + 3 * bad + 1); /* each subpart (>= 1 byte) becomes 3 */
    if (!o) return dp_error_set(DP_EOOM, "tokenizer: out of host memory repairing %zu bytes of text", n);
    size_t k = 0;
    for (i = 0; i < n;) {
        long r = scan(u + i, n - i, &cp);
        if (r > 0) {
            memcpy(o + k, s + i, (size_t)r);
            k += (size_t)r;
            i += (size_t)r;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += (size_t)-r;
        }
    }
    o[k] = 0;
    *out = o;
    *out_n = k;
    return DP_OK;
}

size_t tk_utf8_put(uint32_t cp, char *buf) {
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | cp >> 18);
    b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
 * themselves; the other 68 take U+0100.. in byte order. */
static int printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t tk_byte_char(unsigned char b) {
    if (printable(b)) return b;
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++) k += !printable(x);
    return 256 + k;
}

int tk_char_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = 0;
    for (unsigned x = 0; x < 256; x++) {
        if (printable(x)) continue;
        if (256 + k == cp) return (int)x;
        k++;
    }
    return -1;
}
