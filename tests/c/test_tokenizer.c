/* test_tokenizer.c: the C tokenizer (engine/text) against Hugging Face's tokenizers on the
 * fixtures of tests/fixtures/tokenizer (gen_tokenizer.py): for every tokenizer there (GPT-2 style
 * with and without add_prefix_space and with the NFC and NFKC normalizers, Llama-3 style with
 * ignore_merges and its template, Llama-2
 * SentencePiece style with and without the high byte tokens, Mistral/Metaspace style) and every
 * item of the corpus (CJK, emoji and ZWJ sequences, combining marks, RTL, runs of spaces and
 * newlines, digits, contractions, special tokens inside text, invalid UTF-8): the ids with and
 * without the template's special tokens, and decode with and without skip_special, equal HF's
 * byte for byte; then the decode-only cases; then the refusals of what is not implemented. */
#include "check.h"
#include "error.h"
#include "test_util.h"
#include "tok_internal.h" /* the pre-tokenizers alone */
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* hex -> bytes (malloc'ed) */
static char *unhex(const char *hex, size_t *n) {
    size_t len = strlen(hex) / 2;
    char *b = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        b[i] = (char)v;
    }
    b[len] = 0;
    *n = len;
    return b;
}

static int ids_equal(const dp_ids *got, const cJSON *want, const char *what, const char *tok, const char *name) {
    int n = cJSON_GetArraySize(want), same = (size_t)n == got->n;
    for (int i = 0; same && i < n; i++) same = got->ids[i] == (int32_t)cJSON_GetArrayItem(want, i)->valuedouble;
    if (!same) {
        fprintf(stderr, "%s/%s: %s differ: got", tok, name, what);
        for (size_t i = 0; i < got->n && i < 40; i++) fprintf(stderr, " %d", (int)got->ids[i]);
        fprintf(stderr, "\n  %*s want", (int)(strlen(tok) + strlen(name) + 1), "");
        for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", (int)cJSON_GetArrayItem(want, i)->valuedouble);
        fprintf(stderr, "\n");
        check_failures++;
    }
    return same;
}

static int32_t *ids_of(const cJSON *a, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(a);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(a, (int)i)->valuedouble;
    return v;
}

static void check_decode(const dp_tokenizer *t, const cJSON *ids, int skip, const char *want_hex, const char *tok,
                         const char *name) {
    size_t n, wn, len = 0;
    int32_t *v = ids_of(ids, &n);
    char *want = unhex(want_hex, &wn), *got = NULL;
    int rc = dp_tokenizer_decode(t, v, n, skip, &got, &len);
    if (rc != DP_OK || len != wn || memcmp(got, want, wn) != 0) {
        fprintf(stderr, "%s/%s: decode(skip_special=%d) = '%s' (%s), want '%s'\n", tok, name, skip,
                got ? got : "(null)", rc ? dp_error_message() : "ok", want);
        check_failures++;
    }
    free(got);
    free(want);
    free(v);
}

/* The pre-tokenizers alone over the whole text (its normalized form as one piece, added tokens not
 * split out): the pieces equal HF's pre_tokenize_str, the regexes' own check. */
static void check_pieces(const dp_tokenizer *t, const char *text, size_t n, const cJSON *want, const char *tok,
                         const char *name) {
    char *fixed = NULL;
    size_t fn = n;
    CHECK_OK(tk_utf8_repair(text, n, &fixed, &fn));
    tk_ctx c = {0};
    c.md = pcre2_match_data_create(1, NULL);
    CHECK_OK(tk_normalize(t, &c, fixed ? fixed : text, fn, 1, &c.a));
    CHECK_OK(tk_pretokenize(t, &c));
    int same = (size_t)cJSON_GetArraySize(want) == c.a.n;
    for (size_t i = 0; same && i < c.a.n; i++) {
        size_t wn;
        char *w = unhex(cJSON_GetArrayItem(want, (int)i)->valuestring, &wn);
        same = wn == c.a.p[i].n && memcmp(w, c.a.buf + c.a.p[i].off, wn) == 0;
        free(w);
    }
    if (!same) {
        fprintf(stderr, "%s/%s: pre-tokenized into %zu pieces:", tok, name, c.a.n);
        for (size_t i = 0; i < c.a.n && i < 12; i++)
            fprintf(stderr, " [%.*s]", (int)c.a.p[i].n, c.a.buf + c.a.p[i].off);
        fprintf(stderr, "; HF: %d\n", cJSON_GetArraySize(want));
        check_failures++;
    }
    pcre2_match_data_free(c.md);
    tk_pieces_free(&c.a);
    tk_pieces_free(&c.b);
    free(fixed);
}

/* Every corpus item and decode case of fixture `name`; returns the number of items compared. */
static int check_fixture(const char *dir, const char *name, const cJSON *corpus) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    dp_tokenizer *t = NULL;
    int rc = dp_tokenizer_load(path, &t);
    if (rc != DP_OK) {
        fprintf(stderr, "%s: load failed: %s\n", name, dp_error_message());
        check_failures++;
        return 0;
    }
    printf("%s: %s\n", name, dp_tokenizer_describe(t));
    snprintf(path, sizeof path, "%s/%s/expected.json", dir, name);
    cJSON *exp = test_json_file(path);
    const cJSON *encs = cJSON_GetObjectItem(exp, "encodings"), *dec = cJSON_GetObjectItem(exp, "decodes"), *e;
    CHECK(cJSON_GetArraySize(encs) == cJSON_GetArraySize(corpus));
    int k = 0, npieces = 0, fails0 = check_failures;
    cJSON_ArrayForEach(e, encs) {
        const cJSON *item = cJSON_GetArrayItem(corpus, k++);
        const char *iname = cJSON_GetObjectItem(e, "name")->valuestring;
        CHECK(strcmp(iname, cJSON_GetObjectItem(item, "name")->valuestring) == 0);
        size_t n;
        char *text = unhex(cJSON_GetObjectItem(item, "hex")->valuestring, &n);
        dp_ids with = {0}, plain = {0};
        CHECK_OK(dp_tokenizer_encode(t, text, n, 1, &with));
        CHECK_OK(dp_tokenizer_encode(t, text, n, 0, &plain));
        ids_equal(&with, cJSON_GetObjectItem(e, "ids"), "ids", name, iname);
        ids_equal(&plain, cJSON_GetObjectItem(e, "ids_plain"), "ids_plain", name, iname);
        const cJSON *pieces = cJSON_GetObjectItem(e, "pieces_hex");
        if (pieces) check_pieces(t, text, n, pieces, name, iname);
        npieces += pieces != NULL;
        const cJSON *tokens = cJSON_GetObjectItem(e, "tokens");
        for (size_t i = 0; i < plain.n && i < (size_t)cJSON_GetArraySize(tokens); i++) {
            const char *s = dp_tokenizer_token(t, plain.ids[i]), *w = cJSON_GetArrayItem(tokens, (int)i)->valuestring;
            if (!s || strcmp(s, w) != 0) {
                fprintf(stderr, "%s/%s: token(%d) = '%s', want '%s'\n", name, iname, (int)plain.ids[i], s ? s : "", w);
                check_failures++;
            }
            CHECK(dp_tokenizer_token_id(t, w) == plain.ids[i]);
        }
        check_decode(t, cJSON_GetObjectItem(e, "ids"), 1, cJSON_GetObjectItem(e, "decoded_hex")->valuestring, name,
                     iname);
        check_decode(t, cJSON_GetObjectItem(e, "ids"), 0, cJSON_GetObjectItem(e, "decoded_all_hex")->valuestring, name,
                     iname);
        dp_ids_free(&with);
        dp_ids_free(&plain);
        free(text);
    }
    int d = 0;
    cJSON_ArrayForEach(e, dec) {
        char label[32];
        snprintf(label, sizeof label, "decodes[%d]", d++);
        check_decode(t, cJSON_GetObjectItem(e, "ids"), 1, cJSON_GetObjectItem(e, "decoded_hex")->valuestring, name,
                     label);
        check_decode(t, cJSON_GetObjectItem(e, "ids"), 0, cJSON_GetObjectItem(e, "decoded_all_hex")->valuestring, name,
                     label);
    }
    printf("%s: %d corpus items (%d pre-tokenized), %d decode cases, %s\n", name, k, npieces, d,
           check_failures == fails0 ? "all equal HF" : "FAILED");
    cJSON_Delete(exp);
    dp_tokenizer_free(t);
    return k;
}

/* gpt2's tokenizer.json with `from` replaced by `to` (the first occurrence) must be refused with
 * code, its message holding `names`. */
static void check_refused(const char *dir, const char *from, const char *to, int code, const char *names) {
    char path[1400];
    snprintf(path, sizeof path, "%s/gpt2/tokenizer.json", dir);
    size_t n;
    char *text = test_read_file(path, &n);
    char *at = text ? strstr(text, from) : NULL;
    CHECK(at != NULL);
    if (!at) {
        free(text);
        return;
    }
    size_t fn = strlen(from), tn = strlen(to), m = n - fn + tn;
    char *edited = malloc(m + 1);
    memcpy(edited, text, (size_t)(at - text));
    memcpy(edited + (at - text), to, tn);
    memcpy(edited + (at - text) + tn, at + fn, n - (size_t)(at - text) - fn);
    edited[m] = 0;
    dp_tokenizer *t = NULL;
    int rc = dp_tokenizer_parse(edited, m, "edited.json", &t);
    if (rc != code || !strstr(dp_error_message(), names)) {
        fprintf(stderr, "refusal of '%s': rc %d (want %d), message '%s' (want '%s' in it)\n", to, rc, code,
                dp_error_message(), names);
        check_failures++;
    }
    CHECK(t == NULL);
    dp_tokenizer_free(t);
    free(edited);
    free(text);
}

/* Files before tokenizers 0.20 spell each merge "a b" (one string) where newer ones write ["a", "b"]:
 * fixture `name` rewritten so, its ids on the corpus must not change. */
static void check_legacy_merges(const char *dir, const char *name, const cJSON *corpus) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s/tokenizer.json", dir, name);
    cJSON *root = test_json_file(path);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges"), *m;
    CHECK(cJSON_GetArraySize(merges) > 100);
    cJSON *legacy = cJSON_CreateArray();
    cJSON_ArrayForEach(m, merges) {
        char line[512];
        snprintf(line, sizeof line, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring,
                 cJSON_GetArrayItem(m, 1)->valuestring);
        cJSON_AddItemToArray(legacy, cJSON_CreateString(line));
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "merges", legacy);
    char *text = cJSON_PrintUnformatted(root);
    dp_tokenizer *t = NULL, *ref = NULL;
    CHECK_OK(dp_tokenizer_parse(text, strlen(text), "legacy.json", &t));
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_OK(dp_tokenizer_load(path, &ref));
    int same = t && ref, k = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, corpus) {
        if (!same) break;
        size_t n;
        char *raw = unhex(cJSON_GetObjectItem(item, "hex")->valuestring, &n);
        dp_ids a = {0}, b = {0};
        CHECK_OK(dp_tokenizer_encode(t, raw, n, 1, &a));
        CHECK_OK(dp_tokenizer_encode(ref, raw, n, 1, &b));
        same = a.n == b.n && (a.n == 0 || memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0);
        k++;
        dp_ids_free(&a);
        dp_ids_free(&b);
        free(raw);
    }
    if (!same) {
        fprintf(stderr, "%s: merges as \"a b\" strings encode item %d otherwise\n", name, k);
        check_failures++;
    }
    printf("%s: merges written as \"a b\" strings: %s\n", name, same ? "the same ids" : "FAILED");
    dp_tokenizer_free(t);
    dp_tokenizer_free(ref);
    free(text);
    cJSON_Delete(root);
}

int main(void) {
    char dir[1100], path[1300];
    test_fixture_dir(dir, sizeof dir, "tokenizer");
    snprintf(path, sizeof path, "%s/corpus.json", dir);
    cJSON *corpus = test_json_file(path);
    static const char *names[] = {"gpt2", "gpt2_prefix", "gpt2_nfc",  "gpt2_nfkc", "llama3",
                                  "spm",  "spm_nobytes", "metaspace", "mistral"};
    int items = 0;
    for (size_t i = 0; corpus && i < sizeof names / sizeof *names; i++) items += check_fixture(dir, names[i], corpus);
    CHECK(items >= 9 * 150);
    if (corpus) check_legacy_merges(dir, "llama3", corpus);
    if (corpus) check_legacy_merges(dir, "spm", corpus);
    cJSON_Delete(corpus);

    /* what is not implemented is refused at load, naming it */
    check_refused(dir, "\"normalizer\": null", "\"normalizer\": {\"type\": \"Lowercase\"}", DP_ENOTSUP,
                  "normalizer 'Lowercase'");
    check_refused(dir, "\"dropout\": null", "\"dropout\": 0.1", DP_ENOTSUP, "dropout");
    check_refused(dir, "\"type\": \"BPE\"", "\"type\": \"WordPiece\"", DP_ENOTSUP, "model 'WordPiece'");
    check_refused(dir, "\"single_word\": false", "\"single_word\": true", DP_ENOTSUP, "single_word");
    check_refused(dir, "\"decoder\": {\n    \"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"CTC\"", DP_ENOTSUP,
                  "decoder 'CTC'");
    check_refused(dir, "\"truncation\": null", "\"truncation\": {\"max_length\": 8}", DP_ENOTSUP, "truncation");
    check_refused(dir, "\"model\": {", "\"model\": {\"unk_token\": \"<nope>\",", DP_EINVAL, "unk_token '<nope>'");
    /* a file that is not there, a folder without tokenizer.json */
    dp_tokenizer *t = NULL;
    CHECK(dp_tokenizer_load("/nonexistent/tokenizer.json", &t) == DP_EIO && t == NULL);
    CHECK(dp_tokenizer_load(dir, &t) == DP_EIO && strstr(dp_error_message(), "tokenizer.json") != NULL);
    /* an id out of range in decode */
    snprintf(path, sizeof path, "%s/gpt2", dir);
    CHECK_OK(dp_tokenizer_load(path, &t));
    int32_t bad_ids[] = {1, 999999};
    char *s = NULL;
    CHECK(dp_tokenizer_decode(t, bad_ids, 2, 1, &s, NULL) == DP_EINVAL && strstr(dp_error_message(), "999999"));
    dp_tokenizer_free(t);
    if (check_failures) fprintf(stderr, "test_tokenizer: %d failures\n", check_failures);
    return check_failures ? 1 : 0;
}
