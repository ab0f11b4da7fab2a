/* fuzz_documents: token files with document boundaries (data = { file = F, eos = ID }) through
 * the engine's reader, dp_docs_scan / dp_docs_open, and the padded batches read from them
 * (dp_data_file_padded). Each iteration makes a token file: uint16 or uint32, empty, a few bytes,
 * or up to 200000 tokens (past the reader's 64 KiB chunks, so tokens split across reads), ids from
 * a small vocabulary with eos dense or rare, runs of eos, ids at and past the vocabulary's edge,
 * a trailing partial token, an eos outside the vocabulary. Every scan must return OK, EINVAL or EIO
 * with a one-line message and nothing kept on failure; on OK its documents must be a reference
 * scan's (written here the plain way: token by token), and a padded batch of a few of them must
 * hold each document's tokens, then 0 inputs and -100 targets. Under AddressSanitizer (the
 * build-asan run) a crash, leak or overflow fails it too. Seeded: a failure names its seed and
 * iteration, and its file is kept as <out>/fail_<iteration>.tok.
 *
 *   fuzz_documents OUT_DIR [ITERATIONS [SEED]]    (default 2000, seed 1) */
#include "data.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "fuzz_mutate.h"
#include "layer_ops.h"
#include "tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures;
static long n_ok, n_padded, n_refused; /* what the iterations exercised */

static void fail(const char *path, long it, const char *what) {
    fprintf(stderr, "fuzz_documents: iteration %ld: %s (file kept as %s)\n", it, what, path);
    failures++;
}

/* the reference scan: documents as (start, length), the empty count, or -1 for a bad id, -2 for a
 * partial token, -3 when no document is kept */
static int reference(const unsigned char *b, size_t len, int w, int64_t eos, int64_t vocab, int64_t *start,
                     int64_t *length, int64_t *n, int64_t *empty) {
    if (len % (size_t)w) return -2;
    int64_t T = (int64_t)(len / (size_t)w), s = 0;
    *n = *empty = 0;
    for (int64_t i = 0; i < T; i++) {
        const unsigned char *p = b + i * w;
        uint32_t id = w == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                             : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if ((int64_t)id >= vocab) return -1;
        if ((int64_t)id == eos || i == T - 1) {
            int64_t toks = i + 1 - s;
            if (toks >= 2)
                start[*n] = s, length[*n] = toks - 1, (*n)++;
            else if (toks == 1)
                (*empty)++;
            s = i + 1;
        }
    }
    return *n > 0 ? 0 : -3;
}

static uint32_t token_at(const unsigned char *b, int w, int64_t i) {
    const unsigned char *p = b + i * w;
    return w == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                  : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_documents OUT_DIR [ITERATIONS [SEED]]\n");
        return 2;
    }
    const char *out = argv[1];
    long iters = argc > 2 ? atol(argv[2]) : 2000;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    mkdir(out, 0755);
    if (dp_engine_init() != DP_OK) return 1;
    dp_device *cpu = NULL;
    if (dp_device_get(DP_DEV_CPU, &cpu) != DP_OK) return 1;
    fuzz_seed(seed);
    char path[1024];
    snprintf(path, sizeof path, "%s/current.tok", out);
    for (long it = 0; it < iters; it++) {
        const int w = fuzz_below(2) ? 4 : 2;
        const dp_token_dtype dt = w == 4 ? DP_TOKENS_U32 : DP_TOKENS_U16;
        const int64_t vocab = 2 + (int64_t)fuzz_below(fuzz_below(4) ? 50 : 70000);
        int64_t eos = (int64_t)fuzz_below((size_t)vocab);
        if (fuzz_below(20) == 0) eos = vocab + (int64_t)fuzz_below(3); /* outside */
        size_t ntok;
        switch (fuzz_below(5)) {
        case 0: ntok = fuzz_below(4); break;
        case 1: ntok = fuzz_below(64); break;
        case 2: ntok = 20000 + fuzz_below(180000); break;
        default: ntok = fuzz_below(5000); break;
        }
        size_t len = ntok * (size_t)w + (fuzz_below(10) == 0 ? 1 + fuzz_below((size_t)w - 1) : 0);
        unsigned char *b = malloc(len ? len : 1);
        const size_t density = 1 + fuzz_below(fuzz_below(2) ? 8 : 4000); /* one eos in about density */
        for (size_t i = 0; i < ntok; i++) {
            uint64_t id = fuzz_below(density) == 0 ? (uint64_t)eos : fuzz_below((size_t)vocab);
            if (fuzz_below(3000) == 0) id = (uint64_t)vocab + fuzz_below(5); /* past the edge */
            if (fuzz_below(5000) == 0) id = w == 2 ? 0xffff : 0xffffffffu;
            for (int k = 0; k < w; k++) b[i * (size_t)w + (size_t)k] = (unsigned char)(id >> (8 * k));
        }
        for (size_t i = ntok * (size_t)w; i < len; i++) b[i] = (unsigned char)fuzz_below(256);
        if (fuzz_write_file(path, b, len) != 0) {
            fprintf(stderr, "fuzz_documents: cannot write %s\n", path);
            return 1;
        }
        /* the stream reader on memory (fmemopen refuses size 0: the file then), or the file */
        dp_docs d;
        int rc;
        FILE *f = len > 0 && fuzz_below(2) ? fmemopen(b, len, "rb") : NULL;
        if (f) {
            rc = dp_docs_scan(f, "memory", dt, eos, vocab, &d);
            fclose(f);
        } else {
            rc = dp_docs_open(path, dt, eos, vocab, &d);
        }
        int64_t *rs = malloc((ntok + 1) * sizeof *rs), *rl = malloc((ntok + 1) * sizeof *rl), rn = 0, re = 0;
        int ref = eos >= vocab ? -4 : reference(b, len, w, eos, vocab, rs, rl, &rn, &re);
        char keep[1100];
        snprintf(keep, sizeof keep, "%s/fail_%ld.tok", out, it);
        int bad = 0;
        if (rc != DP_OK && rc != DP_EINVAL && rc != DP_EIO) bad = 1, fail(keep, it, "a status the API does not name");
        if (rc != DP_OK && strchr(dp_error_message(), '\n')) bad = 1, fail(keep, it, "a message of more than one line");
        if ((rc == DP_OK) != (ref == 0)) {
            char why[256];
            snprintf(why, sizeof why, "scan %d (%s), reference %d", rc, rc ? dp_error_message() : "ok", ref);
            bad = 1, fail(keep, it, why);
        }
        if (rc != DP_OK && (d.n != 0 || d.start || d.length)) bad = 1, fail(keep, it, "a failed scan kept documents");
        if (rc == DP_OK)
            n_ok++;
        else
            n_refused++;
        if (rc == DP_OK && ref == 0) {
            if (d.n != rn || d.empty != re || d.tokens != (int64_t)ntok) bad = 1, fail(keep, it, "counts differ");
            for (int64_t i = 0; i < d.n && i < rn && !bad; i++)
                if (d.start[i] != rs[i] || d.length[i] != rl[i]) bad = 1, fail(keep, it, "a document differs");
            /* a padded batch of up to 3 documents, cut at T */
            if (!bad && fuzz_below(4) == 0) {
                int64_t B = d.n < 3 ? d.n : 3, T = 1 + (int64_t)fuzz_below(40), starts[3], lens[3], longest = 0;
                for (int64_t k = 0; k < B; k++) {
                    int64_t doc = (int64_t)fuzz_below((size_t)d.n);
                    starts[k] = d.start[doc];
                    lens[k] = d.length[doc] < T ? d.length[doc] : T;
                    if (lens[k] > longest) longest = lens[k];
                }
                int64_t shape[2] = {B, longest};
                dp_tensor *in = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
                dp_tensor *tg = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
                if (!in || !tg || dp_data_file_padded(in, tg, path, dt, vocab, starts, lens) != DP_OK) {
                    bad = 1, fail(keep, it, "a padded batch of its documents failed");
                } else {
                    n_padded++;
                    const int32_t *x = in->data, *y = tg->data;
                    for (int64_t k = 0; k < B && !bad; k++)
                        for (int64_t j = 0; j < longest && !bad; j++) {
                            int32_t wx = j < lens[k] ? (int32_t)token_at(b, w, starts[k] + j) : 0;
                            int32_t wy = j < lens[k] ? (int32_t)token_at(b, w, starts[k] + j + 1) : DP_IGNORE_INDEX;
                            if (x[k * longest + j] != wx || y[k * longest + j] != wy)
                                bad = 1, fail(keep, it, "a padded batch's tokens differ from the file's");
                        }
                }
                dp_tensor_free(in);
                dp_tensor_free(tg);
            }
        }
        if (bad) fuzz_write_file(keep, b, len);
        dp_docs_free(&d);
        free(rs);
        free(rl);
        free(b);
    }
    remove(path);
    if (failures) {
        fprintf(stderr, "fuzz_documents: %d failure(s) in %ld iterations (seed %llu)\n", failures, iters,
                (unsigned long long)seed);
        return 1;
    }
    printf("fuzz_documents: %ld token files, seed %llu: %ld scanned, %ld padded batches, %ld refused: ok\n", iters,
           (unsigned long long)seed, n_ok, n_padded, n_refused);
    /* both outcomes must have been met, or the generator has drifted from what it is for */
    return n_ok > iters / 10 && n_refused > iters / 20 && n_padded > 0 ? 0 : 1;
}
