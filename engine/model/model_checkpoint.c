/* model_checkpoint.c: activation checkpointing. A checkpointed block keeps only its input after
 * the forward; the backward (and DP book-keeping's clip, through dp_model_recompute_block)
 * recomputes the rest from it, one block at a time (through model_blocks.c), and logs the time
 * it took. Which blocks are checkpointed is a query of the configuration (model_params.c). */
#include "model_internal.h"

#include "clock.h"
#include "device.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void log_span(dp_model *m, int64_t start, int64_t end) {
    m->recompute_ns += end - start;
    if (!m->spans) m->spans = malloc(DP_MODEL_SPAN_LOG * sizeof *m->spans);
    if (m->spans && m->n_spans < DP_MODEL_SPAN_LOG) m->spans[m->n_spans++] = (dp_model_span){start, end};
}

int dp_model_recompute(dp_model *m, int64_t layer) {
    int rc = dp_device_sync(m->dev); /* what ran before is not the recomputation's time */
    int64_t start = dp_clock_ns();
    const char *section = dp_ledger_section("recompute");
    if (rc == DP_OK) rc = dp_model_block_forward(m, layer, 1);
    dp_ledger_section(section);
    if (rc == DP_OK) rc = dp_device_sync(m->dev);
    log_span(m, start, dp_clock_ns());
    if (rc != DP_OK) dp_model_block_release(m, layer, 0);
    return rc;
}

int dp_model_recompute_block(dp_model *m, int64_t layer) {
    if (!dp_model_checkpointed(m, layer))
        return dp_error_set(DP_EINVAL, "model: block %lld is not checkpointed (checkpoint = %d)", (long long)layer,
                            m->cfg.checkpoint);
    if (!m->have_forward || !dp_model_block_input(m, layer)->alloc.live)
        return dp_error_set(DP_EINVAL,
                            "model: block %lld's input is gone (recompute needs the forward's state, kept "
                            "by a retained backward)",
                            (long long)layer);
    dp_model_block_release(m, layer, 0); /* a second call recomputes, it does not leak the first */
    DP_TRY(dp_model_acquire_block(m, layer));
    int rc = dp_model_recompute(m, layer);
    dp_model_unacquire_block(m, layer); /* the clip reads the recomputed activations, not the weights */
    return rc;
}

void dp_model_release_block(dp_model *m, int64_t layer) {
    if (layer >= 0 && layer < m->cfg.layers) dp_model_block_release(m, layer, 0);
}

/* t inside the activations of block l (its output excepted): l, else -1 */
static int64_t block_of(const dp_model *m, const dp_tensor *t) {
    const uintptr_t p = (uintptr_t)t;
    const size_t size = m->gpt_acts ? sizeof *m->gpt_acts : sizeof *m->llama_acts;
    const uintptr_t base = m->gpt_acts ? (uintptr_t)m->gpt_acts : (uintptr_t)m->llama_acts;
    if (!base || p < base || p >= base + (uintptr_t)m->cfg.layers * size) return -1;
    const int64_t l = (int64_t)((p - base) / size);
    return t == dp_model_block_output((dp_model *)m, l) ? -1 : l;
}

int dp_model_recomputed_block(const dp_model *m, const dp_tensor *t) {
    if (!m || !t || m->cfg.checkpoint <= 0) return -1;
    const int64_t l = block_of(m, t);
    return l >= 0 && dp_model_checkpointed(m, l) ? (int)l : -1;
}

const dp_model_span *dp_model_recompute_log(const dp_model *m, size_t *n, int64_t *total_ns) {
    *n = m->n_spans;
    *total_ns = m->recompute_ns;
    return m->spans;
}

void dp_model_clear_recompute_log(dp_model *m) {
    m->n_spans = 0;
    m->recompute_ns = 0;
}

void dp_model_set_block_weights(dp_model *m, const dp_block_weights *w) {
    if (w && w->acquire)
        m->block_weights = *w;
    else
        memset(&m->block_weights, 0, sizeof m->block_weights);
}

int dp_model_acquire_block(dp_model *m, int64_t layer) {
    const dp_block_weights *w = &m->block_weights;
    return w->acquire ? w->acquire(w->ctx, m, layer) : DP_OK;
}

void dp_model_unacquire_block(dp_model *m, int64_t layer) {
    const dp_block_weights *w = &m->block_weights;
    if (w->acquire && w->release) w->release(w->ctx, m, layer);
}
