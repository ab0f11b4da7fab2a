/* model_gpt.c: a GPT-2 block (pre-LayerNorm, fused qkv, GELU MLP, biases), forward and
 * backward side by side. */
#include "model_internal.h"

#include "error.h"
#include "layers.h"
#include "ops.h"

#include <math.h>

#define ACT DP_CAT_ACTIVATIONS

int dp_gpt_block_forward(dp_model *m, int layer, const dp_tensor *x, int recompute) {
    const gpt_block *b = &m->gpt[layer];
    gpt_block_acts *a = &m->gpt_acts[layer];
    const int64_t d = m->d, F = m->F, T = m->T;
    const float scale = 1.0f / sqrtf((float)m->hd);

    /* attention: res_mid = x + proj(attn(qkv(ln_1(x)))) */
    DP_TRY(dp_model_act(m, &a->ln_1, d, ACT, b->ln_1.module));
    DP_TRY(dp_model_stat(m, &a->ln_1_mean, 0, ACT, b->ln_1.module));
    DP_TRY(dp_model_stat(m, &a->ln_1_rstd, 0, ACT, b->ln_1.module));
    DP_TRY(dp_norm_forward(m, &b->ln_1, x, &a->ln_1, &a->ln_1_mean, &a->ln_1_rstd));
    DP_TRY(dp_model_act(m, &a->qkv, 3 * d, ACT, b->qkv.module));
    DP_TRY(dp_linear_forward(m, &b->qkv, &a->ln_1, &a->qkv, &a->qkv_lora));
    DP_TRY(dp_model_act(m, &a->att, d, ACT, b->core_module));
    DP_TRY(dp_model_stat(m, &a->att_lse, 1, ACT, b->core_module));
    DP_TRY(dp_layer_attention_forward(&a->att, &a->att_lse, &a->qkv, NULL, NULL, m->B, T, m->H, m->H, scale));
    DP_TRY(dp_model_act(m, &a->res_mid, d, ACT, b->proj.module));
    DP_TRY(dp_linear_forward(m, &b->proj, &a->att, &a->res_mid, &a->proj_lora));
    DP_TRY(dp_add(&a->res_mid, &a->res_mid, x));

    /* MLP: res_out = res_mid + fc_proj(gelu(fc(ln_2(res_mid)))) */
    DP_TRY(dp_model_act(m, &a->ln_2, d, ACT, b->ln_2.module));
    DP_TRY(dp_model_stat(m, &a->ln_2_mean, 0, ACT, b->ln_2.module));
    DP_TRY(dp_model_stat(m, &a->ln_2_rstd, 0, ACT, b->ln_2.module));
    DP_TRY(dp_norm_forward(m, &b->ln_2, &a->res_mid, &a->ln_2, &a->ln_2_mean, &a->ln_2_rstd));
    DP_TRY(dp_model_act(m, &a->fc, F, ACT, b->fc.module));
    DP_TRY(dp_linear_forward(m, &b->fc, &a->ln_2, &a->fc, &a->fc_lora));
    DP_TRY(dp_model_act(m, &a->gelu, F, ACT, b->fc.module));
    DP_TRY(dp_layer_gelu_forward(&a->gelu, &a->fc));
    if (recompute) return dp_linear_forward(m, &b->fc_proj, &a->gelu, NULL, &a->fc_proj_lora);
    DP_TRY(dp_model_act(m, &a->res_out, d, ACT, dp_model_block_output_module(m, layer, b->fc_proj.module)));
    DP_TRY(dp_linear_forward(m, &b->fc_proj, &a->gelu, &a->res_out, &a->fc_proj_lora));
    return dp_add(&a->res_out, &a->res_out, &a->res_mid);
}

int dp_gpt_block_backward(const dp_bw *bw, int layer, dp_tensor *x, dp_tensor *dres) {
    dp_model *m = bw->m;
    const gpt_block *b = &m->gpt[layer];
    gpt_block_acts *a = &m->gpt_acts[layer];
    const int64_t d = m->d, F = m->F, T = m->T;
    const float scale = 1.0f / sqrtf((float)m->hd);
    dp_tensor dfc = {0}, dln = {0}, datt = {0}, dqkv = {0}, delta = {0};
    int rc;
#define TRY(expr)                                                                                                      \
    if ((rc = (expr)) != DP_OK) goto done

    /* MLP; dres is the gradient of res_out, and becomes that of res_mid */
    TRY(dp_bw_out_grad(bw, &b->fc, &dfc, F, b->fc_proj.module)); /* fc_proj's dx, then fc's G */
    TRY(dp_linear_backward(bw, &b->fc_proj, &a->gelu, dres, &dfc, 0, &a->fc_proj_lora));
    dp_bw_done(bw, &a->gelu);
    TRY(dp_layer_gelu_backward(&dfc, &dfc, &a->fc, 0)); /* in place: the gradient of fc's output */
    dp_bw_done(bw, &a->fc);
    TRY(dp_model_act(m, &dln, d, DP_CAT_TEMP, b->fc.module));
    TRY(dp_linear_backward(bw, &b->fc, &a->ln_2, &dfc, &dln, 0, &a->fc_lora));
    TRY(dp_bw_out_grad_done(bw, &b->fc, &dfc));
    dp_bw_done(bw, &a->ln_2);
    TRY(dp_norm_backward(bw, &b->ln_2, &a->res_mid, &a->ln_2_mean, &a->ln_2_rstd, &dln, dres, 1));
    dp_tensor_release(&dln);
    dp_bw_done(bw, &a->ln_2_mean);
    dp_bw_done(bw, &a->ln_2_rstd);
    dp_bw_done(bw, &a->res_mid);

    /* attention; dres becomes the gradient of the block's input x */
    TRY(dp_model_act(m, &datt, d, DP_CAT_TEMP, b->proj.module));
    TRY(dp_linear_backward(bw, &b->proj, &a->att, dres, &datt, 0, &a->proj_lora));
    TRY(dp_bw_out_grad(bw, &b->qkv, &dqkv, 3 * d, b->core_module));
    TRY(dp_model_stat(m, &delta, 1, DP_CAT_TEMP, b->core_module));
    TRY(dp_layer_attention_backward(&dqkv, NULL, NULL, &datt, &a->att, &a->att_lse, &a->qkv, NULL, NULL, &delta, m->B,
                                    T, m->H, m->H, scale));
    dp_tensor_release(&datt);
    dp_tensor_release(&delta);
    dp_bw_done(bw, &a->att);
    dp_bw_done(bw, &a->att_lse);
    dp_bw_done(bw, &a->qkv);
    TRY(dp_model_act(m, &dln, d, DP_CAT_TEMP, b->qkv.module));
    TRY(dp_linear_backward(bw, &b->qkv, &a->ln_1, &dqkv, &dln, 0, &a->qkv_lora));
    TRY(dp_bw_out_grad_done(bw, &b->qkv, &dqkv));
    dp_bw_done(bw, &a->ln_1);
    TRY(dp_norm_backward(bw, &b->ln_1, x, &a->ln_1_mean, &a->ln_1_rstd, &dln, dres, 1));
    dp_bw_done(bw, &a->ln_1_mean);
    dp_bw_done(bw, &a->ln_1_rstd);
    dp_bw_done_input(bw, x);
#undef TRY
done:
    dp_tensor_release(&dfc);
    dp_tensor_release(&dln);
    dp_tensor_release(&datt);
    dp_tensor_release(&dqkv);
    dp_tensor_release(&delta);
    return rc;
}

void dp_gpt_block_release(dp_model *m, int layer, int output) {
    gpt_block_acts *a = &m->gpt_acts[layer];
    dp_tensor *all[] = {&a->ln_1,    &a->ln_1_mean, &a->ln_1_rstd, &a->qkv,         &a->qkv_lora,  &a->att,
                        &a->att_lse, &a->proj_lora, &a->res_mid,   &a->ln_2,        &a->ln_2_mean, &a->ln_2_rstd,
                        &a->fc,      &a->fc_lora,   &a->gelu,      &a->fc_proj_lora};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dp_tensor_release(all[i]);
    if (output) dp_tensor_release(&a->res_out);
}
