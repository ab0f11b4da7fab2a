/* model_internal.h: the model's private structures, shared by model_*.c.
 *
 * Sizes: B samples of T tokens, N = B*T rows; d = hidden, H query heads and Hkv key/value heads
 * of width hd (d / H unless the config gives head_dim), F = MLP width, V = vocab, r = LoRA rank.
 * Llama's q and attention output are H*hd wide, k and v Hkv*hd (grouped-query attention). Activations are B x T x c
 * tensors of the compute dtype (f32 or bf16); statistics (mean, rstd, log-sum-exp) are f32.
 *
 * Module paths (docs/results.md): every parameter and every saved activation is tagged with the
 * module that produced it. An activation function's output belongs to the linear before it
 * (GELU: mlp.fc; SwiGLU: mlp.up); a residual sum to the linear whose branch it adds (attn.proj,
 * mlp.proj; attn.o, mlp.down); the embedding output to wte (embed); attention's output and
 * log-sum-exp to attn.core; the logits to lm_head; the loss statistics to loss. Gradients of
 * activations during the backward are `temp`, tagged with the layer whose backward made them. */
#ifndef DP_MODEL_INTERNAL_H
#define DP_MODEL_INTERNAL_H

#include "model.h"

/* y = x W^T (+ b) (+ (alpha/r) (x A^T) B^T) */
typedef struct dp_linear {
    dp_param *w;      /* out x in */
    dp_param *b;      /* out, or NULL (llama) */
    dp_param *lora_a; /* r x in, or NULL without an adapter */
    dp_param *lora_b; /* out x r */
    int64_t in, out;
    uint32_t module;      /* "layers.0.attn.qkv" */
    uint32_t lora_module; /* "layers.0.attn.qkv.lora_a": the adapter's saved x A^T */
} dp_linear;

/* LayerNorm (b != NULL) or RMSNorm (b == NULL) */
typedef struct dp_norm {
    dp_param *w, *b; /* d */
    uint32_t module;
} dp_norm;

/* A GPT-2 block: x += proj(attn(ln_1(x))); x += mlp.proj(gelu(mlp.fc(ln_2(x)))). */
typedef struct gpt_block {
    dp_norm ln_1;
    dp_linear qkv;  /* attn.c_attn: 3d x d, rows q, k, v */
    dp_linear proj; /* attn.c_proj: d x d */
    dp_norm ln_2;
    dp_linear fc;      /* mlp.c_fc: F x d */
    dp_linear fc_proj; /* mlp.c_proj: d x F */
    uint32_t core_module;
    uint32_t module; /* "layers.i": the block (a checkpointed block's kept input) */
} gpt_block;

/* What one GPT block's backward needs, saved by its forward. The block's input is the previous
 * block's res_out (the embedding output for block 0). */
typedef struct gpt_block_acts {
    dp_tensor ln_1, ln_1_mean, ln_1_rstd; /* B x T x d, N, N: ln_1 output (qkv's input) */
    dp_tensor qkv, qkv_lora;              /* B x T x 3d; B x T x r */
    dp_tensor att, att_lse;               /* B x T x d (proj's input); B x H x T */
    dp_tensor proj_lora;                  /* B x T x r */
    dp_tensor res_mid;                    /* B x T x d: x + attention branch (ln_2's input) */
    dp_tensor ln_2, ln_2_mean, ln_2_rstd; /* B x T x d, N, N */
    dp_tensor fc, fc_lora;                /* B x T x F (GELU's input); B x T x r */
    dp_tensor gelu;                       /* B x T x F (mlp.proj's input) */
    dp_tensor fc_proj_lora;               /* B x T x r */
    dp_tensor res_out;                    /* B x T x d: the block's output */
} gpt_block_acts;

/* A Llama block: x += o(attn(rope(q, k), v)) of input_norm(x); x += down(silu(gate) * up) of
 * post_norm(x). */
typedef struct llama_block {
    dp_norm input_norm;
    dp_linear q, k, v; /* H*hd x d, Hkv*hd x d, Hkv*hd x d */
    dp_linear o;       /* d x H*hd */
    dp_norm post_norm;
    dp_linear gate, up; /* F x d */
    dp_linear down;     /* d x F */
    uint32_t core_module;
    uint32_t module; /* "layers.i" */
} llama_block;

typedef struct llama_block_acts {
    dp_tensor xn, xn_rstd;            /* B x T x d, N: input_norm output (q, k, v's input) */
    dp_tensor q, k, v;                /* B x T x H*hd, Hkv*hd, Hkv*hd; q and k rotated */
    dp_tensor q_lora, k_lora, v_lora; /* B x T x r */
    dp_tensor att, att_lse;           /* B x T x H*hd (o's input); B x H x T */
    dp_tensor o_lora;
    dp_tensor res_mid;                      /* B x T x d (post_norm's input) */
    dp_tensor xn2, xn2_rstd;                /* B x T x d, N: post_norm output */
    dp_tensor gate, up, gate_lora, up_lora; /* B x T x F each; B x T x r */
    dp_tensor h;                            /* B x T x F: silu(gate) * up (down's input) */
    dp_tensor down_lora;
    dp_tensor res_out; /* B x T x d */
} llama_block_acts;

struct dp_model {
    dp_device *dev;
    dp_model_config cfg; /* defaults resolved: ffn, max_positions set */
    int64_t d, H, Hkv, hd, F, V;
    dp_dtype t;           /* compute dtype */
    float lora_scale;     /* alpha / r */
    float *rope_inv_freq; /* llama: hd / 2 host f32, from the config's rope scaling */
    float rope_scale;     /* llama: the scale of cos and sin (yarn's attention factor, else 1) */

    int n_params;
    dp_param *params;   /* in Hugging Face order */
    dp_param *wte;      /* V x d (also the head when tied) */
    dp_param *wpe;      /* P x d (gpt) */
    dp_norm final_norm; /* ln_f / norm */
    dp_param *head;     /* V x d untied head, or NULL */
    gpt_block *gpt;     /* L blocks (gpt) */
    llama_block *llama; /* L blocks (llama) */
    uint32_t embed_module, wpe_module, head_module, loss_module;

    /* the last forward: views of its batch and everything its backward needs */
    int have_forward;
    uint64_t forward_id;    /* the saved forward's id (dp_model_forward_id), 0 when none */
    uint64_t forwards_run;  /* forwards started: the source of ids */
    int64_t B, T;           /* the batch's samples and (padded) length, T <= cfg.seq_len */
    int64_t *target_count;  /* cfg.batch: targets of each sample that are not DP_IGNORE_INDEX */
    dp_tensor ids, targets; /* views, B x T i32 */
    dp_tensor embedded;     /* B x T x d: the first block's input */
    gpt_block_acts *gpt_acts;
    llama_block_acts *llama_acts;
    dp_tensor final_out, final_mean, final_rstd; /* B x T x d (the head's input), N, N */
    dp_tensor logits;                            /* B x T x V; the logits' gradient after the loss backward */
    dp_tensor loss_lse;                          /* N */

    /* recomputations of checkpointed blocks (dp_model_recompute_log) */
    dp_model_span *spans;
    size_t n_spans;
    int64_t recompute_ns;

    dp_block_weights block_weights; /* fsdp: a block's weights on demand (acquire == NULL: always whole) */
    dp_model_origin origin;         /* the checkpoint it was loaded from (model_io), or all NULL */
};

/* What a backward pass carries through every layer. */
typedef struct dp_bw {
    dp_model *m;
    const dp_layer_hooks *hooks;
    int weight_grads;
    int retain;     /* keep what the forward saved for another pass */
    int recomputed; /* the block's activations were recomputed: free them once used, retained or not */
    int hold;       /* keep the block's activations until its block_end hook (dp_layer_hooks.block_end) */
} dp_bw;

/* A B x T x cols activation of the compute dtype (category cat). */
int dp_model_act(dp_model *m, dp_tensor *t, int64_t cols, dp_category cat, uint32_t module);
/* A B*T (or B*H*T when heads) f32 vector of statistics. */
int dp_model_stat(dp_model *m, dp_tensor *t, int heads, dp_category cat, uint32_t module);
/* Releases a block's activation once the backward has used it, unless the pass retains them (a
 * recomputed one is released in any case). */
void dp_bw_done(const dp_bw *bw, dp_tensor *t);
/* Releases a block's input once the backward has used it, unless the pass retains them. */
void dp_bw_done_input(const dp_bw *bw, dp_tensor *t);
/* The parameter's gradient, allocated (zeroed, `gradients`) on first use; NULL when the pass
 * computes no weight gradients or the parameter is frozen. *rc gets the allocation's status. */
dp_tensor *dp_bw_grad(const dp_bw *bw, dp_param *p, int *rc);
/* The tensor a GEMM reads for a weight: its bf16 compute copy, or its f32 value. */
const dp_tensor *dp_model_gemm_weight(const dp_param *p);
/* Interns a module path (printf-style); UINT32_MAX when out of host memory. */
uint32_t dp_model_module(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* y = x W^T (+ b) (+ adapter), saving the adapter's x A^T in *lora_u (activations); y NULL: only
 * the adapter's x A^T (a recomputation that does not need y). */
int dp_linear_forward(dp_model *m, const dp_linear *lin, const dp_tensor *x, dp_tensor *y, dp_tensor *lora_u);
/* Its backward for output gradient G: hooks, weight gradients, and dx written (accumulate = 0)
 * or added (1). Releases *lora_u when done (unless retained). */
int dp_linear_backward(const dp_bw *bw, const dp_linear *lin, const dp_tensor *x, const dp_tensor *G, dp_tensor *dx,
                       int accumulate, dp_tensor *lora_u);
/* out = norm(x), saving mean (LayerNorm only) and rstd. */
int dp_norm_forward(dp_model *m, const dp_norm *nm, const dp_tensor *x, dp_tensor *out, dp_tensor *mean,
                    dp_tensor *rstd);
/* dx (+)= the norm's input gradient from G; hooks and gain/bias gradients. */
int dp_norm_backward(const dp_bw *bw, const dp_norm *nm, const dp_tensor *x, const dp_tensor *mean,
                     const dp_tensor *rstd, const dp_tensor *G, dp_tensor *dx, int accumulate);

/* Allocates t, the output gradient of linear lin (B x T x cols) that the backward frees right
 * after lin's backward: under `output_grads` with lin's weight's module when the hooks will keep
 * it (keeps_out_grad; they adopt it), else under `temp` with temp_module. */
int dp_bw_out_grad(const dp_bw *bw, const dp_linear *lin, dp_tensor *t, int64_t cols, uint32_t temp_module);
/* Opens (A) or closes (NULL) the hooks' bracket of linears that share input A (shared_input);
 * a no-op without the hook. */
int dp_bw_shared_input(const dp_bw *bw, const dp_tensor *A);
/* The same for an output gradient the backward already holds (the head's: the logits' buffer,
 * their gradient in place): counted under `output_grads` with lin's weight's module from now on
 * when the hooks will keep it, else left as it is. */
int dp_bw_out_grad_held(const dp_bw *bw, const dp_linear *lin, dp_tensor *t);
/* The backward is done with t, lin's output gradient from dp_bw_out_grad or _held: the hooks may adopt it,
 * what they leave is released. */
int dp_bw_out_grad_done(const dp_bw *bw, const dp_linear *lin, dp_tensor *t);

/* The blocks, forward and backward (model_gpt.c, model_llama.c). x is the block's input;
 * dres (B x T x d) holds the gradient of the block's output on entry and of its input on
 * return. A recomputing forward (recompute = 1) makes everything the backward needs but not the
 * block's output (res_out, which the next block holds as its input). Release frees the block's
 * activations; its output too when `output`. */
int dp_gpt_block_forward(dp_model *m, int layer, const dp_tensor *x, int recompute);
int dp_gpt_block_backward(const dp_bw *bw, int layer, dp_tensor *x, dp_tensor *dres);
void dp_gpt_block_release(dp_model *m, int layer, int output);
int dp_llama_block_forward(dp_model *m, int layer, const dp_tensor *x, int recompute);
int dp_llama_block_backward(const dp_bw *bw, int layer, dp_tensor *x, dp_tensor *dres);
void dp_llama_block_release(dp_model *m, int layer, int output);
/* The module block `layer`'s output is allocated under: the next block's ("layers.<i+1>") when
 * that one is checkpointed (its kept input), else own (the linear whose branch the sum adds).
 * A pure query (model_params.c). */
uint32_t dp_model_block_output_module(const dp_model *m, int layer, uint32_t own);

/* The blocks whatever the arch (model_blocks.c): block `layer`'s input (the previous block's
 * output, or the embeddings), its output, and the calls above. */
dp_tensor *dp_model_block_input(dp_model *m, int64_t layer);
dp_tensor *dp_model_block_output(dp_model *m, int64_t layer);
int dp_model_block_forward(dp_model *m, int64_t layer, int recompute);
int dp_model_block_backward(const dp_bw *bw, int64_t layer, dp_tensor *dres);
void dp_model_block_release(dp_model *m, int64_t layer, int output);
/* Recomputes checkpointed block `layer` from its kept input (model_checkpoint.c; dp_model_recompute_block without the
 * checks): timed into the recompute log, its ops in the ledger's "recompute" section; on failure
 * what it made is freed. */
int dp_model_recompute(dp_model *m, int64_t layer);
/* Asks the block weights provider for block l's weights, or a pseudo-block's (DP_MODEL_EMBEDDINGS,
 * DP_MODEL_HEAD) (DP_OK when there is none). */
int dp_model_acquire_block(dp_model *m, int64_t layer);
/* Tells the provider that the pass over block l is done (nothing when there is none). */
void dp_model_unacquire_block(dp_model *m, int64_t layer);

/* Parameters (model_params.c): builds the parameter list and the layer structures of m (cfg
 * set); frees them. */
int dp_model_build_params(dp_model *m);
void dp_model_free_params(dp_model *m);

#endif
