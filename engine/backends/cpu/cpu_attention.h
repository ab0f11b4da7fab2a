/* cpu_attention.h: causal self-attention on the CPU as blocked GEMMs (cpu_attention.c), the
 * attention entries of the CPU layer table (layer_ops.h has their contract). */
#ifndef DP_CPU_ATTENTION_H
#define DP_CPU_ATTENTION_H

#include "layer_ops.h"

/* layer_ops.h's attention_forward: blocks of scale Q K^T and P V through OpenBLAS, online softmax;
 * H query heads over Hkv key/value heads. */
int dp_cpu_attention_forward(dp_device *dev, dp_dtype t, void *out, float *lse, const void *q, const void *k,
                             const void *v, int64_t ld_q, int64_t ld_kv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                             int64_t hd, float scale);

/* layer_ops.h's attention_backward: one pass per (sample, kv head) over the key blocks in order. */
int dp_cpu_attention_backward(dp_device *dev, dp_dtype t, void *dq, void *dk, void *dv, int64_t ld_dq, int64_t ld_dkv,
                              const void *dout, const void *out, const float *lse, const void *q, const void *k,
                              const void *v, int64_t ld_q, int64_t ld_kv, float *delta, int64_t B, int64_t T, int64_t H,
                              int64_t Hkv, int64_t hd, float scale);

#endif
