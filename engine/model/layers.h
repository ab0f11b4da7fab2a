/* layers.h: the transformer layer ops (layer_ops.h) on tensors, as ops.h is for the basic ops.
 * Each checks that its operands agree, records its flops and bytes (read + written) in the
 * ledger under the name given below, then dispatches to the device (nothing runs on plan).
 *
 * Shapes: an activation x is any tensor of N*d elements read as N rows of d (the model keeps
 * them B x T x d); its dtype t (f32 or bf16) is the compute dtype. Parameters, their gradients
 * and saved statistics are f32. Token ids and targets are i32 with N elements.
 *
 * Flop convention: one flop per add, multiply, divide or transcendental (exp, log, tanh, sin,
 * cos, pow); the counts are of the work a row-by-row implementation does, the same on every
 * device. Byte convention: each operand counted once per read and once per write. */
#ifndef DP_LAYERS_H
#define DP_LAYERS_H

#include "tensor.h"

/* out = wte[ids] (+ wpe[n % T]); "embedding_fwd". wpe may be NULL (llama). */
int dp_layer_embedding_forward(dp_tensor *out, const dp_tensor *ids, const dp_tensor *wte, const dp_tensor *wpe,
                               int64_t T);
/* dwte[ids[n]] += dout[n] (dwte may be NULL), dwpe[t] += sum_b dout[b, t] (may be NULL);
 * "embedding_bwd". A no-op when both are NULL. */
int dp_layer_embedding_backward(const dp_tensor *dout, const dp_tensor *ids, dp_tensor *dwte, dp_tensor *dwpe,
                                int64_t T);

/* LayerNorm (b != NULL) or RMSNorm (b == NULL, mean == NULL) of rows of x; saves mean and rstd
 * (N f32). "layernorm_fwd" / "rmsnorm_fwd". */
int dp_layer_norm_forward(dp_tensor *out, dp_tensor *mean, dp_tensor *rstd, const dp_tensor *x, const dp_tensor *w,
                          const dp_tensor *b, float eps);
/* dx (+)= the norm's input gradient; dw += ..., db += ... (either may be NULL: frozen or not
 * wanted; db NULL for RMSNorm). mean NULL selects RMSNorm. "layernorm_bwd" / "rmsnorm_bwd". */
int dp_layer_norm_backward(dp_tensor *dx, dp_tensor *dw, dp_tensor *db, const dp_tensor *dout, const dp_tensor *x,
                           const dp_tensor *w, const dp_tensor *mean, const dp_tensor *rstd, int accumulate);

/* out[r, :] += bias for rows of out; "bias_add". */
int dp_layer_bias_add(dp_tensor *out, const dp_tensor *bias);
/* db += column sums of g; "bias_bwd". */
int dp_layer_bias_backward(dp_tensor *db, const dp_tensor *g);

/* out = gelu(x) (tanh form); "gelu_fwd". */
int dp_layer_gelu_forward(dp_tensor *out, const dp_tensor *x);
/* dx (+)= dout * gelu'(x); dx may be dout itself; "gelu_bwd". */
int dp_layer_gelu_backward(dp_tensor *dx, const dp_tensor *dout, const dp_tensor *x, int accumulate);
/* out = silu(gate) * up; "swiglu_fwd". */
int dp_layer_swiglu_forward(dp_tensor *out, const dp_tensor *gate, const dp_tensor *up);
/* dgate, dup from dout (dgate may be dout itself); "swiglu_bwd". */
int dp_layer_swiglu_backward(dp_tensor *dgate, dp_tensor *dup, const dp_tensor *dout, const dp_tensor *gate,
                             const dp_tensor *up);

/* Rotary embedding in place on x (N x H*hd, contiguous), positions n % T, at the hd/2 inverse
 * frequencies inv_freq (host f32) with cos and sin times scale; inverse = 1 for the backward.
 * "rope_fwd" / "rope_bwd". */
int dp_layer_rope(dp_tensor *x, int64_t T, int64_t H, const float *inv_freq, float scale, int inverse);

/* Causal attention, grouped-query: q N x H*hd, k and v N x Hkv*hd (H a multiple of Hkv; query
 * head h reads kv head h / (H / Hkv)), or, with k and v NULL, q is one N x 3*H*hd tensor whose
 * rows hold q, k and v (GPT-2's c_attn output; Hkv == H). out N x H*hd, lse B*H*T f32.
 * "attention_fwd". */
int dp_layer_attention_forward(dp_tensor *out, dp_tensor *lse, const dp_tensor *q, const dp_tensor *k,
                               const dp_tensor *v, int64_t B, int64_t T, int64_t H, int64_t Hkv, float scale);
/* Its backward: dq, dk, dv laid out like q, k, v (one N x 3*H*hd tensor when k is NULL); delta
 * is f32 scratch of B*H*T. "attention_bwd". */
int dp_layer_attention_backward(dp_tensor *dq, dp_tensor *dk, dp_tensor *dv, const dp_tensor *dout,
                                const dp_tensor *out, const dp_tensor *lse, const dp_tensor *q, const dp_tensor *k,
                                const dp_tensor *v, dp_tensor *delta, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                float scale);

/* losses[n], lse[n] of the rows of logits (N x V) against targets; "cross_entropy_fwd". */
int dp_layer_cross_entropy_forward(dp_tensor *losses, dp_tensor *lse, const dp_tensor *logits,
                                   const dp_tensor *targets);
/* logits becomes its gradient in place, row n scaled by sample_scale[n / T] (B f32 on the
 * device); "cross_entropy_bwd". */
int dp_layer_cross_entropy_backward(dp_tensor *logits, const dp_tensor *lse, const dp_tensor *targets,
                                    const dp_tensor *sample_scale, int64_t T);

#endif
