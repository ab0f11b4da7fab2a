/* fuzz_tokenizer: Hugging Face tokenizer.json files from outside, through the C tokenizer's loader
 * and its encode and decode (engine/text). Each iteration takes one of the fixture tokenizers
 * (tests/fixtures/tokenizer: byte-level GPT-2 and Llama-3 styles, SentencePiece-style with and
 * without byte tokens, Metaspace) and mutates it: the parsed tree (a node replaced by a hostile
 * value or by a pattern, type or token meaningful to the loader, removed, renamed, copied, an
 * array grown) or the text itself (bytes flipped, inserted, cut). The load must succeed or fail
 * with DP_EINVAL, DP_ENOTSUP, DP_EOOM and a one-line message, leaving no tokenizer; a loaded one
 * must encode hostile text (invalid UTF-8, specials inside text, long runs, NULs) into ids inside
 * its vocabulary, and decode them back without error. Under AddressSanitizer (the build-asan run)
 * a crash, leak or overflow fails it too. Seeded: a failure names its seed and iteration, and its
 * file is kept as <out>/fail_<iteration>.json.
 *
 *   fuzz_tokenizer FIXTURES_DIR OUT_DIR [ITERATIONS [SEED]]    (default 2000, seed 1) */
#include "error.h"
#include "fuzz_mutate.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures;
static long n_loaded, n_refused;

static const char *const NAMES[] = {"gpt2", "gpt2_prefix", "gpt2_nfc",  "gpt2_nfkc", "llama3",
                                    "spm",  "spm_nobytes", "metaspace", "mistral"};
#define N_NAMES (sizeof NAMES / sizeof *NAMES)

static const char *const KEYS[] = {"type",
                                   "vocab",
                                   "merges",
                                   "added_tokens",
                                   "pattern",
                                   "Regex",
                                   "String",
                                   "behavior",
                                   "invert",
                                   "content",
                                   "special",
                                   "normalized",
                                   "lstrip",
                                   "rstrip",
                                   "single_word",
                                   "id",
                                   "ids",
                                   "single",
                                   "pair",
                                   "special_tokens",
                                   "decoders",
                                   "pretokenizers",
                                   "normalizers",
                                   "processors",
                                   "replacement",
                                   "prepend",
                                   "prepend_scheme",
                                   "split",
                                   "byte_fallback",
                                   "fuse_unk",
                                   "unk_token",
                                   "ignore_merges",
                                   "use_regex",
                                   "add_prefix_space",
                                   "start",
                                   "stop",
                                   "dropout",
                                   "model",
                                   "pre_tokenizer",
                                   "decoder",
                                   "normalizer",
                                   "post_processor",
                                   "truncation",
                                   "padding"};
static const char *const EXTRA[] = {"\"BPE\"",
                                    "\"ByteLevel\"",
                                    "\"Split\"",
                                    "\"Metaspace\"",
                                    "\"Sequence\"",
                                    "\"Replace\"",
                                    "\"Prepend\"",
                                    "\"TemplateProcessing\"",
                                    "\"ByteFallback\"",
                                    "\"Fuse\"",
                                    "\"Strip\"",
                                    "\"Digits\"",
                                    "\"NFC\"",
                                    "\"WordPiece\"",
                                    "{\"Regex\": \"(\"}",
                                    "{\"Regex\": \"\\\\s*\"}",
                                    "{\"Regex\": \"(a|b)*c\"}",
                                    "{\"Regex\": \"\"}",
                                    "{\"String\": \"\"}",
                                    "{\"String\": \"\\u2581\"}",
                                    "\"Isolated\"",
                                    "\"Removed\"",
                                    "\"MergedWithPrevious\"",
                                    "\"MergedWithNext\"",
                                    "\"Contiguous\"",
                                    "\"first\"",
                                    "\"never\"",
                                    "\"always\"",
                                    "\"<0xFF>\"",
                                    "\"<unk>\"",
                                    "\"a b\"",
                                    "[\"a\", \"b\"]",
                                    "\"\\u0000\"",
                                    "{\"A\": {\"id\": \"A\", \"ids\": [999999999]}}",
                                    "[{\"Sequence\": {\"id\": \"A\"}}, {\"Sequence\": {\"id\": \"A\"}}]",
                                    "1e9",
                                    "-1",
                                    "2147483647"};

static const char *const TEXTS[] = {"Hello world, it's 12345 and 'LL they'll go!",
                                    "  spaces   and\n\n\nnewlines \r\n\t end  ",
                                    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 "
                                    "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
                                    "bad \xff\xfe utf8 \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 end",
                                    "<|endoftext|>x<|begin_of_text|><s></s><unk>",
                                    "a<|eot_id|> <|eot_id|>b",
                                    "",
                                    " ",
                                    "0123456789012345678901234567890123456789"};

static void fail(const char *keep, long it, const char *what) {
    fprintf(stderr, "fuzz_tokenizer: iteration %ld: %s (file kept as %s)\n", it, what, keep);
    failures++;
}

/* A long hostile text: runs of one character, a NUL, every byte. */
static char *long_text(size_t *n) {
    size_t k = 0, cap = 20000;
    char *s = malloc(cap);
    for (size_t i = 0; i < 3000; i++) s[k++] = ' ';
    for (size_t i = 0; i < 3000; i++) s[k++] = 'a';
    for (int b = 0; b < 256; b++) s[k++] = (char)b;
    for (size_t i = 0; i < 2000; i++) s[k++] = (char)("\xf0\x9f\x98\x80"[i % 4]);
    *n = k;
    return s;
}

static void exercise(dp_tokenizer *t, long it, const char *keep) {
    size_t ln;
    char *big = long_text(&ln);
    for (size_t i = 0; i <= sizeof TEXTS / sizeof *TEXTS; i++) {
        const char *s = i < sizeof TEXTS / sizeof *TEXTS ? TEXTS[i] : big;
        size_t n = i < sizeof TEXTS / sizeof *TEXTS ? strlen(s) : ln;
        for (int special = 0; special < 2; special++) {
            dp_ids ids = {0};
            int rc = dp_tokenizer_encode(t, s, n, special, &ids);
            if (rc != DP_OK && rc != DP_EINVAL && rc != DP_EOOM) fail(keep, it, "encode: an unexpected status");
            for (size_t k = 0; rc == DP_OK && k < ids.n; k++)
                if (ids.ids[k] < 0 || ids.ids[k] >= dp_tokenizer_vocab_size(t)) {
                    fail(keep, it, "encode: an id outside the vocabulary");
                    break;
                }
            char *text = NULL;
            size_t len = 0;
            if (rc == DP_OK && dp_tokenizer_decode(t, ids.ids, ids.n, special, &text, &len) != DP_OK)
                fail(keep, it, "decode of encode's ids failed");
            if (text && strlen(text) > len) fail(keep, it, "decode: length disagrees");
            free(text);
            dp_ids_free(&ids);
        }
    }
    free(big);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fuzz_tokenizer FIXTURES_DIR OUT_DIR [ITERATIONS [SEED]]\n");
        return 2;
    }
    const char *fix = argv[1], *out = argv[2];
    long iters = argc > 3 ? atol(argv[3]) : 2000;
    uint64_t seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
    mkdir(out, 0755);
    char *seeds[N_NAMES];
    for (size_t i = 0; i < N_NAMES; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s/tokenizer.json", fix, NAMES[i]);
        seeds[i] = fuzz_read_file(path, NULL);
        if (!seeds[i]) {
            fprintf(stderr, "fuzz_tokenizer: cannot read %s\n", path);
            return 1;
        }
    }
    fuzz_seed(seed);
    for (long it = 0; it < iters; it++) {
        const char *base = seeds[fuzz_below(N_NAMES)];
        char *text = NULL;
        if (fuzz_below(4) == 0) {
            text = fuzz_mutate_text(base);
        } else {
            cJSON *root = cJSON_Parse(base);
            int m = 1 + (int)fuzz_below(3);
            for (int k = 0; k < m; k++)
                fuzz_mutate_tree(root, KEYS, sizeof KEYS / sizeof *KEYS, EXTRA, sizeof EXTRA / sizeof *EXTRA);
            text = cJSON_PrintUnformatted(root);
            cJSON_Delete(root);
        }
        if (!text) continue;
        char keep[1300];
        snprintf(keep, sizeof keep, "%s/fail_%ld.json", out, it);
        dp_tokenizer *t = NULL;
        int rc = dp_tokenizer_parse(text, strlen(text), "fuzzed.json", &t);
        int before = failures;
        if (rc == DP_OK) {
            n_loaded++;
            if (!t)
                fail(keep, it, "OK without a tokenizer");
            else
                exercise(t, it, keep);
        } else {
            n_refused++;
            if (t) fail(keep, it, "a refusal left a tokenizer");
            if (rc != DP_EINVAL && rc != DP_ENOTSUP && rc != DP_EOOM) fail(keep, it, "an unexpected status");
            const char *msg = dp_error_message();
            if (!msg[0] || strchr(msg, '\n')) fail(keep, it, "the refusal is not one line");
        }
        if (failures != before) fuzz_write_file(keep, text, strlen(text));
        dp_tokenizer_free(t);
        free(text);
    }
    for (size_t i = 0; i < N_NAMES; i++) free(seeds[i]);
    printf("fuzz_tokenizer: %ld iterations (seed %llu): %ld loaded and exercised, %ld refused, %d failures\n", iters,
           (unsigned long long)seed, n_loaded, n_refused, failures);
    return failures ? 1 : 0;
}
