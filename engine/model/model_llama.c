/* model_llama.c: a Llama block (RMSNorm, rotary q and k, SwiGLU MLP, no biases), forward and
 * backward side by side. */
#include "model_internal.h"

#include "error.h"
#include "layers.h"
#include "ops.h"

#include <math.h>

#define ACT DP_CAT_ACTIVATIONS

int dp_llama_block_forward(dp_model *m, int layer, const dp_tensor *x, int recompute) {
    const llama_block *b = &m->llama[layer];
    llama_block_acts *a = &m->llama_acts[layer];
    const int64_t d = m->d, F = m->F, T = m->T, dq = m->H * m->hd, dkv = m->Hkv * m->hd;
    const float scale = 1.0f / sqrtf((float)m->hd);

    /* attention: res_mid = x + o(attn(rope(q(xn)), rope(k(xn)), v(xn))), xn = input_norm(x) */
    DP_TRY(dp_model_act(m, &a->xn, d, ACT, b->input_norm.module));
    DP_TRY(dp_model_stat(m, &a->xn_rstd, 0, ACT, b->input_norm.module));
    DP_TRY(dp_norm_forward(m, &b->input_norm, x, &a->xn, NULL, &a->xn_rstd));
    DP_TRY(dp_model_act(m, &a->q, dq, ACT, b->q.module));
    DP_TRY(dp_linear_forward(m, &b->q, &a->xn, &a->q, &a->q_lora));
    DP_TRY(dp_layer_rope(&a->q, T, m->H, m->rope_inv_freq, m->rope_scale, 0));
    DP_TRY(dp_model_act(m, &a->k, dkv, ACT, b->k.module));
    DP_TRY(dp_linear_forward(m, &b->k, &a->xn, &a->k, &a->k_lora));
    DP_TRY(dp_layer_rope(&a->k, T, m->Hkv, m->rope_inv_freq, m->rope_scale, 0));
    DP_TRY(dp_model_act(m, &a->v, dkv, ACT, b->v.module));
    DP_TRY(dp_linear_forward(m, &b->v, &a->xn, &a->v, &a->v_lora));
    DP_TRY(dp_model_act(m, &a->att, dq, ACT, b->core_module));
    DP_TRY(dp_model_stat(m, &a->att_lse, 1, ACT, b->core_module));
    DP_TRY(dp_layer_attention_forward(&a->att, &a->att_lse, &a->q, &a->k, &a->v, m->B, T, m->H, m->Hkv, scale));
    DP_TRY(dp_model_act(m, &a->res_mid, d, ACT, b->o.module));
    DP_TRY(dp_linear_forward(m, &b->o, &a->att, &a->res_mid, &a->o_lora));
    DP_TRY(dp_add(&a->res_mid, &a->res_mid, x));

    /* MLP: res_out = res_mid + down(silu(gate(xn2)) * up(xn2)), xn2 = post_norm(res_mid) */
    DP_TRY(dp_model_act(m, &a->xn2, d, ACT, b->post_norm.module));
    DP_TRY(dp_model_stat(m, &a->xn2_rstd, 0, ACT, b->post_norm.module));
    DP_TRY(dp_norm_forward(m, &b->post_norm, &a->res_mid, &a->xn2, NULL, &a->xn2_rstd));
    DP_TRY(dp_model_act(m, &a->gate, F, ACT, b->gate.module));
    DP_TRY(dp_linear_forward(m, &b->gate, &a->xn2, &a->gate, &a->gate_lora));
    DP_TRY(dp_model_act(m, &a->up, F, ACT, b->up.module));
    DP_TRY(dp_linear_forward(m, &b->up, &a->xn2, &a->up, &a->up_lora));
    DP_TRY(dp_model_act(m, &a->h, F, ACT, b->up.module));
    DP_TRY(dp_layer_swiglu_forward(&a->h, &a->gate, &a->up));
    if (recompute) return dp_linear_forward(m, &b->down, &a->h, NULL, &a->down_lora);
    DP_TRY(dp_model_act(m, &a->res_out, d, ACT, dp_model_block_output_module(m, layer, b->down.module)));
    DP_TRY(dp_linear_forward(m, &b->down, &a->h, &a->res_out, &a->down_lora));
    return dp_add(&a->res_out, &a->res_out, &a->res_mid);
}

int dp_llama_block_backward(const dp_bw *bw, int layer, dp_tensor *x, dp_tensor *dres) {
    dp_model *m = bw->m;
    const llama_block *b = &m->llama[layer];
    llama_block_acts *a = &m->llama_acts[layer];
    const int64_t d = m->d, F = m->F, T = m->T, dq_w = m->H * m->hd, dkv = m->Hkv * m->hd;
    const float scale = 1.0f / sqrtf((float)m->hd);
    dp_tensor dh = {0}, dup = {0}, dxn = {0}, datt = {0}, dq = {0}, dk = {0}, dv = {0}, delta = {0};
    int rc;
#define TRY(expr)                                                                                                      \
    if ((rc = (expr)) != DP_OK) goto done

    /* MLP; dres is the gradient of res_out, and becomes that of res_mid */
    TRY(dp_bw_out_grad(bw, &b->gate, &dh, F, b->down.module)); /* down's dx, then gate's G */
    TRY(dp_linear_backward(bw, &b->down, &a->h, dres, &dh, 0, &a->down_lora));
    dp_bw_done(bw, &a->h);
    TRY(dp_bw_out_grad(bw, &b->up, &dup, F, b->up.module));
    TRY(dp_layer_swiglu_backward(&dh, &dup, &dh, &a->gate, &a->up)); /* dh becomes d gate */
    dp_bw_done(bw, &a->gate);
    dp_bw_done(bw, &a->up);
    TRY(dp_model_act(m, &dxn, d, DP_CAT_TEMP, b->gate.module));
    TRY(dp_bw_shared_input(bw, &a->xn2)); /* gate and up read xn2 */
    TRY(dp_linear_backward(bw, &b->gate, &a->xn2, &dh, &dxn, 0, &a->gate_lora));
    TRY(dp_bw_out_grad_done(bw, &b->gate, &dh));
    TRY(dp_linear_backward(bw, &b->up, &a->xn2, &dup, &dxn, 1, &a->up_lora));
    TRY(dp_bw_out_grad_done(bw, &b->up, &dup));
    TRY(dp_bw_shared_input(bw, NULL));
    dp_bw_done(bw, &a->xn2);
    TRY(dp_norm_backward(bw, &b->post_norm, &a->res_mid, NULL, &a->xn2_rstd, &dxn, dres, 1));
    dp_tensor_release(&dxn);
    dp_bw_done(bw, &a->xn2_rstd);
    dp_bw_done(bw, &a->res_mid);

    /* attention; dres becomes the gradient of the block's input x */
    TRY(dp_model_act(m, &datt, dq_w, DP_CAT_TEMP, b->o.module));
    TRY(dp_linear_backward(bw, &b->o, &a->att, dres, &datt, 0, &a->o_lora));
    TRY(dp_bw_out_grad(bw, &b->q, &dq, dq_w, b->core_module));
    TRY(dp_bw_out_grad(bw, &b->k, &dk, dkv, b->core_module));
    TRY(dp_bw_out_grad(bw, &b->v, &dv, dkv, b->core_module));
    TRY(dp_model_stat(m, &delta, 1, DP_CAT_TEMP, b->core_module));
    TRY(dp_layer_attention_backward(&dq, &dk, &dv, &datt, &a->att, &a->att_lse, &a->q, &a->k, &a->v, &delta, m->B, T,
                                    m->H, m->Hkv, scale));
    dp_tensor_release(&datt);
    dp_tensor_release(&delta);
    dp_bw_done(bw, &a->att);
    dp_bw_done(bw, &a->att_lse);
    dp_bw_done(bw, &a->q);
    dp_bw_done(bw, &a->k);
    dp_bw_done(bw, &a->v);
    TRY(dp_layer_rope(&dq, T, m->H, m->rope_inv_freq, m->rope_scale,
                      1)); /* back to the gradients of q's and k's outputs */
    TRY(dp_layer_rope(&dk, T, m->Hkv, m->rope_inv_freq, m->rope_scale, 1));
    TRY(dp_model_act(m, &dxn, d, DP_CAT_TEMP, b->q.module));
    TRY(dp_bw_shared_input(bw, &a->xn)); /* q, k and v read xn */
    TRY(dp_linear_backward(bw, &b->q, &a->xn, &dq, &dxn, 0, &a->q_lora));
    TRY(dp_bw_out_grad_done(bw, &b->q, &dq));
    TRY(dp_linear_backward(bw, &b->k, &a->xn, &dk, &dxn, 1, &a->k_lora));
    TRY(dp_bw_out_grad_done(bw, &b->k, &dk));
    TRY(dp_linear_backward(bw, &b->v, &a->xn, &dv, &dxn, 1, &a->v_lora));
    TRY(dp_bw_out_grad_done(bw, &b->v, &dv));
    TRY(dp_bw_shared_input(bw, NULL));
    dp_bw_done(bw, &a->xn);
    TRY(dp_norm_backward(bw, &b->input_norm, x, NULL, &a->xn_rstd, &dxn, dres, 1));
    dp_bw_done(bw, &a->xn_rstd);
    dp_bw_done_input(bw, x);
#undef TRY
done:
    if (rc != DP_OK) (void)dp_bw_shared_input(bw, NULL); /* the bracket closed on error too */
    dp_tensor_release(&dh);
    dp_tensor_release(&dup);
    dp_tensor_release(&dxn);
    dp_tensor_release(&datt);
    dp_tensor_release(&dq);
    dp_tensor_release(&dk);
    dp_tensor_release(&dv);
    dp_tensor_release(&delta);
    return rc;
}

void dp_llama_block_release(dp_model *m, int layer, int output) {
    llama_block_acts *a = &m->llama_acts[layer];
    dp_tensor *all[] = {&a->xn,     &a->xn_rstd, &a->q,         &a->k,       &a->v,       &a->q_lora,   &a->k_lora,
                        &a->v_lora, &a->att,     &a->att_lse,   &a->o_lora,  &a->res_mid, &a->xn2,      &a->xn2_rstd,
                        &a->gate,   &a->up,      &a->gate_lora, &a->up_lora, &a->h,       &a->down_lora};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dp_tensor_release(all[i]);
    if (output) dp_tensor_release(&a->res_out);
}
