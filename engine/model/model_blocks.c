/* model_blocks.c: a block's calls whatever the architecture: its input and output tensors, its
 * forward, backward and release, dispatched to model_gpt.c or model_llama.c. The passes
 * (model.c) and checkpointing (model_checkpoint.c) call these; the architectures call nothing
 * here. */
#include "model_internal.h"

dp_tensor *dp_model_block_input(dp_model *m, int64_t layer) {
    return layer ? dp_model_block_output(m, layer - 1) : &m->embedded;
}

dp_tensor *dp_model_block_output(dp_model *m, int64_t layer) {
    return m->gpt ? &m->gpt_acts[layer].res_out : &m->llama_acts[layer].res_out;
}

int dp_model_block_forward(dp_model *m, int64_t layer, int recompute) {
    const dp_tensor *x = dp_model_block_input(m, layer);
    if (m->gpt) return dp_gpt_block_forward(m, (int)layer, x, recompute);
    return dp_llama_block_forward(m, (int)layer, x, recompute);
}

int dp_model_block_backward(const dp_bw *bw, int64_t layer, dp_tensor *dres) {
    dp_tensor *x = dp_model_block_input(bw->m, layer);
    if (bw->m->gpt) return dp_gpt_block_backward(bw, (int)layer, x, dres);
    return dp_llama_block_backward(bw, (int)layer, x, dres);
}

void dp_model_block_release(dp_model *m, int64_t layer, int output) {
    if (m->gpt_acts) dp_gpt_block_release(m, (int)layer, output);
    if (m->llama_acts) dp_llama_block_release(m, (int)layer, output);
}
