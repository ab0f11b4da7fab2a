/* tok_batch.c: many texts encoded at once on several threads (POSIX threads; the tokenizer is
 * read-only and each encode owns its state, so threads share it as they are). Each thread takes
 * the next unclaimed text off a shared counter, so long and short texts even out. */
#include "tok_internal.h"

#include "error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const dp_tokenizer *t;
    const char *const *texts;
    const size_t *lens;
    const unsigned char *special;
    size_t n;
    int64_t *counts;
    atomic_size_t next;
    atomic_int rc; /* the first failure's status (DP_OK while none) */
    char msg[400];
    pthread_mutex_t lock;
} batch;

static void *worker(void *arg) {
    batch *b = arg;
    dp_ids ids = {0};
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n || atomic_load(&b->rc) != DP_OK) break;
        ids.n = 0;
        int rc = dp_tokenizer_encode(b->t, b->texts[i], b->lens[i], b->special ? b->special[i] : 1, &ids);
        if (rc != DP_OK) {
            pthread_mutex_lock(&b->lock);
            if (atomic_load(&b->rc) == DP_OK) {
                snprintf(b->msg, sizeof b->msg, "%s", dp_error_message()); /* the thread's own error */
                atomic_store(&b->rc, rc);
            }
            pthread_mutex_unlock(&b->lock);
            break;
        }
        b->counts[i] = (int64_t)ids.n;
    }
    dp_ids_free(&ids);
    return NULL;
}

int dp_tokenizer_count_many(const dp_tokenizer *t, const char *const *texts, const size_t *lens,
                            const unsigned char *special, size_t n, int threads, int64_t *counts) {
    if (!t || (n && (!texts || !lens || !counts)))
        return dp_error_set(DP_EINVAL, "tokenizer: count_many needs a tokenizer, texts, lengths and counts");
    if (threads < 1) threads = 1;
    if ((size_t)threads > n) threads = n ? (int)n : 1;
    if (threads > 256) threads = 256;
    batch b = {.t = t, .texts = texts, .lens = lens, .special = special, .n = n, .counts = counts};
    atomic_init(&b.next, 0);
    atomic_init(&b.rc, DP_OK);
    pthread_mutex_init(&b.lock, NULL);
    pthread_t tid[256];
    int started = 0;
    for (int k = 1; k < threads; k++) /* the calling thread is the first worker */
        if (pthread_create(&tid[started], NULL, worker, &b) == 0) started++;
    worker(&b);
    for (int k = 0; k < started; k++) pthread_join(tid[k], NULL);
    pthread_mutex_destroy(&b.lock);
    int rc = atomic_load(&b.rc);
    if (rc != DP_OK) return dp_error_set(rc, "%s", b.msg);
    return DP_OK;
}
