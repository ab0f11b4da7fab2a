/* model.h: the transformer LM (GPT-style and Llama-style), forward and backward written by hand.
 *
 * Every saved activation is an explicit allocation under `activations` with the module path of
 * the layer that saved it (docs/results.md lists the paths); whatever backward does not need is
 * freed as soon as possible. Parameters live under `parameters`: f32 in an f32 model. In a bf16
 * model, as PEFT and PyTorch users run it, a frozen parameter (LoRA's base weights) is bf16 only
 * (no f32 master, no gradient, no state); a trainable one keeps an f32 master plus, for the
 * matrices the GEMMs read, a bf16 copy (refreshed by dp_model_sync_compute_weights after an
 * optimizer step), unless master_weights = 0: then it is bf16 only too and the optimizer updates
 * it in bf16 (an update below half a bf16 ulp of the weight, ~0.2% of it, is lost: long runs
 * with small learning rates stall). Gradients are f32 under `gradients`, allocated by the first
 * backward that needs them and freed by dp_model_zero_grad(set_to_none). Kernels that take f32
 * gains and biases read a bf16 one through a transient f32 copy (`temp`, d floats).
 *
 * Loss convention (as Hugging Face and Opacus): sample i's loss L_i is the mean cross-entropy
 * over its T positions; the batch loss is the mean of the L_i. The backward takes a per-sample
 * scale s_i and computes the gradient of sum_i s_i L_i: s_i = 1/B gives the ordinary gradient of
 * the batch loss, s_i = 1 makes each sample's share its per-sample gradient grad L_i (what DP
 * hooks see), s_i = c_i gives the clipped sum of a second backward. */
#ifndef DP_MODEL_H
#define DP_MODEL_H

#include "tensor.h"

#include <stdint.h>

typedef enum { DP_ARCH_GPT = 0, DP_ARCH_LLAMA = 1 } dp_arch;

/* LoRA targets, as bits: which linears get adapters, one bit per linear of a llama block (PEFT's
 * names); gpt's fused c_attn is q, k and v together, its c_fc gate and up together. */
enum {
    DP_LORA_Q = 1u << 0,                             /* llama: self_attn.q_proj */
    DP_LORA_K = 1u << 1,                             /* llama: self_attn.k_proj */
    DP_LORA_V = 1u << 2,                             /* llama: self_attn.v_proj */
    DP_LORA_O = 1u << 3,                             /* llama: self_attn.o_proj; gpt: attn.c_proj */
    DP_LORA_GATE = 1u << 4,                          /* llama: mlp.gate_proj */
    DP_LORA_UP = 1u << 5,                            /* llama: mlp.up_proj */
    DP_LORA_DOWN = 1u << 6,                          /* llama: mlp.down_proj; gpt: mlp.c_proj */
    DP_LORA_QKV = DP_LORA_Q | DP_LORA_K | DP_LORA_V, /* "qkv"; gpt: attn.c_attn */
    DP_LORA_PROJ = DP_LORA_O,                        /* "proj" */
    DP_LORA_FC = DP_LORA_GATE | DP_LORA_UP,          /* "fc"; gpt: mlp.c_fc */
    DP_LORA_ALL = DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_FC | DP_LORA_DOWN
};

/* Rotary-embedding scaling, as transformers computes the inverse frequencies (its
 * modeling_rope_utils.py: default, linear, llama3, yarn). */
typedef enum { DP_ROPE_DEFAULT = 0, DP_ROPE_LINEAR, DP_ROPE_LLAMA3, DP_ROPE_YARN } dp_rope_type;

typedef struct dp_rope_scaling {
    dp_rope_type type;
    double factor;                            /* linear, llama3, yarn (> 0) */
    double low_freq_factor, high_freq_factor; /* llama3 (1, 4 in Llama-3.1) */
    int64_t original_max_positions;           /* llama3, yarn: original_max_position_embeddings */
    double beta_fast, beta_slow;              /* yarn (32, 1) */
    double mscale, mscale_all_dim;            /* yarn (0: not given) */
    double attention_factor;                  /* yarn: the scale of cos and sin (0: from factor and mscale) */
    int truncate;                             /* yarn: floor/ceil the correction range (1) */
} dp_rope_scaling;

typedef struct dp_model_config {
    dp_arch arch;
    int64_t vocab, hidden, layers, heads, seq_len, batch;
    int64_t kv_heads;      /* llama: key/value heads (grouped-query attention: heads a multiple of it; 1 =
                            * multi-query); 0 = heads */
    int64_t head_dim;      /* llama: the attention heads' width (q is heads x head_dim, k and v kv_heads x
                            * head_dim); 0 = hidden / heads */
    double mlp_ratio;      /* MLP width / hidden: gpt default 4; llama default 8/3 (rounded up to a multiple of 64 as
                            * intermediate_size is in Llama configs) */
    int64_t ffn;           /* MLP width; 0 = from mlp_ratio */
    int64_t max_positions; /* gpt: rows of wpe (0 = seq_len) */
    int tie_head;          /* the LM head shares the token embedding (gpt default 1, llama default 0: Llama-3.2-1B/3B
                            * tie it, tie_word_embeddings) */
    dp_dtype dtype;        /* compute dtype: f32 or bf16 (CUDA; the CPU's bf16 is a slow exact reference) */
    int master_weights;    /* bf16: trainable parameters keep an f32 master (1, default) or train in bf16 (0) */
    float norm_eps;        /* 1e-5 (both archs, as GPT-2 and Llama-2 configs) */
    float rope_theta;      /* llama: 10000 */
    dp_rope_scaling rope;  /* llama: the rotary scaling (type default: none) */
    float init_std;        /* 0.02 */
    uint64_t seed;         /* initialisation seed */
    int lora_rank;         /* 0 = no LoRA */
    float lora_alpha;
    unsigned lora_targets; /* DP_LORA_* bits */
    int checkpoint;        /* activation checkpointing: 0 off; N >= 1 checkpoints blocks 0, N, 2N, ... (1: every
                            * block, "blocks"): see dp_model_forward */
    int64_t parts_world;   /* build in parts (fsdp): every tensor held as rank parts_rank's part of a world of
                            * parts_world ranks (dp_param_cut); 0 or 1 = whole */
    int64_t parts_rank;    /* 0 <= parts_rank < parts_world */
} dp_model_config;

/* Fills cfg with defaults for arch (sizes zero: the caller sets them). */
void dp_model_config_default(dp_model_config *cfg, dp_arch arch);
/* The arch's name ("gpt", "llama"; "?" when out of range). */
const char *dp_arch_name(dp_arch arch);
/* Parses an arch name; returns 0 and sets *out, or -1 when unknown (valid: gpt, llama). */
int dp_arch_parse(const char *name, dp_arch *out);
/* Parses a LoRA target name into its DP_LORA_* bits: dpprof's groups "qkv", "proj", "fc",
 * "down", PEFT's llama names "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
 * "down_proj", or PEFT's gpt2 names "c_attn", "c_fc"; returns 0, or -1 when unknown. */
int dp_lora_target_parse(const char *name, unsigned *bits);
/* The names of LoRA targets, for messages (DP_LORA_TARGET_NAMES). */
#define DP_LORA_TARGET_NAMES                                                                                           \
    "qkv, proj, fc, down, or PEFT's q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (llama), "           \
    "c_attn, c_fc (gpt)"
/* The name of one single-linear bit for arch: PEFT's llama names ("q_proj", ...), or for gpt
 * the group names of dpprof ("qkv", "proj", "fc", "down" for DP_LORA_Q, O, GATE, DOWN); NULL
 * for a bit gpt has no name of its own for (k, v, up: part of a group). */
const char *dp_lora_target_name(dp_arch arch, unsigned bit);
/* The MLP width a configuration gets: ffn, else gpt round(mlp_ratio * hidden), llama
 * mlp_ratio * hidden rounded up to a multiple of 64. */
int64_t dp_model_config_ffn(const dp_model_config *cfg);
/* The most blocks a model may have: every loop over a model's blocks is in its layers (the plan
 * device has no memory to bound them), and the largest models have a few hundred. */
#define DP_MODEL_MAX_LAYERS 100000

/* Checks a configuration; DP_EINVAL with a message naming the key and the valid values. */
int dp_model_config_check(const dp_model_config *cfg);
/* Checks an activation checkpointing setting (dp_model_config.checkpoint: 0 off, N >= 1 every N-th
 * block) against a model of `layers` blocks: DP_EINVAL naming the setting and the valid ones when
 * negative or past the last block. The one range check of the setting; dp_model_config_check's. */
int dp_model_checkpoint_check(int checkpoint, int64_t layers);

/* Fills r with no scaling (type default) and yarn's defaults (beta 32 / 1, truncate). */
void dp_rope_scaling_default(dp_rope_scaling *r);
/* The rope type's name ("default", "linear", "llama3", "yarn"; "?" when out of range). */
const char *dp_rope_type_name(dp_rope_type t);
/* Parses a rope type; returns 0 and sets *out, or -1 when unknown (valid: default, linear,
 * llama3, yarn). */
int dp_rope_type_parse(const char *name, dp_rope_type *out);
/* Checks cfg's rope scaling; DP_EINVAL naming the key ('rope_scaling.factor', ...). */
int dp_rope_scaling_check(const dp_model_config *cfg);
/* The hd / 2 inverse frequencies of cfg's rotary embedding over heads of width hd, computed in
 * double and rounded to f32 once, and the scale of cos and sin (yarn's attention factor, else
 * 1), as transformers' _compute_*_parameters. DP_EINVAL for a bad scaling. */
int dp_rope_inv_freq(const dp_model_config *cfg, int64_t hd, float *inv_freq, float *cos_sin_scale);

typedef enum {
    DP_PARAM_EMBEDDING, /* token embedding V x d */
    DP_PARAM_POSITION,  /* learned positions P x d (gpt) */
    DP_PARAM_LINEAR_W,  /* p x d (out x in, nn.Linear layout in memory) */
    DP_PARAM_LINEAR_B,  /* p */
    DP_PARAM_NORM_W,    /* d */
    DP_PARAM_NORM_B,    /* d */
    DP_PARAM_LORA_A,    /* r x d */
    DP_PARAM_LORA_B,    /* p x r */
    DP_PARAM_HEAD       /* untied LM head V x d */
} dp_param_kind;

typedef struct dp_param {
    char name[128]; /* Hugging Face name, e.g. "transformer.h.0.attn.c_attn.weight" */
    dp_param_kind kind;
    dp_tensor value;   /* `parameters`: f32, or bf16 when the model keeps it in bf16 only (see above) */
    dp_tensor compute; /* bf16 copy of an f32 weight matrix in bf16 mode (else empty) */
    dp_tensor grad;    /* f32 `gradients`; empty until a backward allocates it */
    int trainable;     /* 0 for LoRA-frozen base weights: no gradient, no optimizer state */
    int hf_transposed; /* stored in x out in the HF file (GPT-2 Conv1D) */
    uint32_t module;   /* module id of the layer that owns it */
    /* zero2 (engine/comm): this rank's slice [shard_lo, shard_lo + shard_n) of the tensor, whose
     * gradient (after the step's reduce-scatter) and optimizer state alone this rank holds and
     * updates; sharded 0 when the rank holds the whole (one process, ddp) */
    int sharded;
    int64_t shard_lo, shard_n;
    /* fsdp: this rank's part of a block's tensor, trainable or frozen (ceil(n / N) elements in
     * value's dtype, zeros after this rank's own) under `parameters`, which the optimizer steps, while
     * value (and a bf16 compute copy) keeps its shape without storage outside the passes over its
     * block (in a pass, a compute copy's master value has none either); empty otherwise */
    dp_tensor part;
    int compute_copy; /* a bf16 model's GEMM weight with an f32 master: reads a bf16 compute copy (made whole
                       * only for a model built whole; fsdp gathers it per pass for one built in parts) */
} dp_param;

/* ---- a parameter's part (fsdp): rank r of a world of N holds elements [r s, min(n, (r+1) s)) of
 * its n, s = ceil(n / N), zero-padded to s in value's dtype under `parameters` with the tensor's
 * module, in dp_param.part; value (and compute) keep shape and dtype without storage. The one
 * cutting, shared by a model built in parts (dp_model_config.parts_world) and fsdp's distribute. */

/* The length of the part of a tensor of n elements in a world of N ranks: ceil(n / N). */
int64_t dp_part_len(int64_t n, int64_t world);
/* Rank's own elements of a tensor of n: [*lo, *lo + *own), *own < the part's length at the end. */
void dp_part_range(int64_t n, int64_t world, int64_t rank, int64_t *lo, int64_t *own);
/* Fills `part` (the part's length, whole's dtype) with rank's elements of `whole`, zeros after them
 * (zero2's slice of an updated parameter, as fsdp's part). */
int dp_part_fill(dp_tensor *part, const dp_tensor *whole, int64_t world, int64_t rank);
/* Fills p's part (allocating it when it has none) with rank's elements of `whole` (p's shape and
 * dtype, e.g. a temporary a checkpoint was read into), zeros after them. */
int dp_param_part_from(dp_param *p, const dp_tensor *whole, int64_t world, int64_t rank);
/* Cuts p's value into rank's part of a world of N and releases the storage of value and compute. */
int dp_param_cut(dp_param *p, int64_t world, int64_t rank);
/* Releases t's storage; t keeps its dtype and shape. */
void dp_tensor_drop_storage(dp_tensor *t);
/* Whether cfg builds in parts (parts_world > 1). */
int dp_model_config_parted(const dp_model_config *cfg);

typedef struct dp_model dp_model;

/* Records how the parameters are held (fsdp): as rank's parts of a world (its cut of a model built
 * whole), or whole again (world 0, rank 0: its unshard); the configuration's parts_world, parts_rank. */
void dp_model_set_parts(dp_model *m, int64_t world, int64_t rank);
/* Whether any parameter is held as a part (dp_param.part live): its whole value has no storage. */
int dp_model_held_in_parts(dp_model *m);

/* Hooks that DP methods give the backward. Each is called as soon as the quantities it needs are
 * known, with tensors valid only during the call (copy what must outlive it). All may be NULL.
 * One exception, which DP book-keeping relies on: with opts->retain = 1, the A given to `linear`
 * is a saved activation and stays valid until dp_model_release_activations or the next forward
 * (bk forms (c (.) G)^T A from it after the backward, without copying A). */
typedef struct dp_layer_hooks {
    void *ctx;
    /* A linear y = x W^T (+ b): A is its input (B x T x d), G its output gradient (B x T x p),
     * both in the compute dtype; scale multiplies W's gradient (LoRA's alpha/r, else 1). For a
     * tied GPT head, w is wte's parameter (also passed to `embedding`). When the backward retains
     * the activations (opts.retain), A stays valid after the hook returns, and the hooks' owner
     * may overwrite it (DP book-keeping scales its rows in place at the clip, the last use). */
    int (*linear)(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *A, const dp_tensor *G,
                  float scale);
    /* A LayerNorm (mean != NULL) or RMSNorm (mean == NULL, b == NULL): x its input (B x T x d),
     * mean/rstd its saved statistics (B*T f32), G its output gradient. */
    int (*norm)(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *x, const dp_tensor *mean,
                const dp_tensor *rstd, const dp_tensor *G);
    /* The token embedding: ids (B x T i32), G the gradient of its output (B x T x d). */
    int (*embedding)(void *ctx, dp_model *m, dp_param *wte, const dp_tensor *ids, const dp_tensor *G);
    /* Learned positions (gpt): G the gradient of the embedding output (B x T x d); sample i uses
     * row t of wpe at position t. */
    int (*position)(void *ctx, dp_model *m, dp_param *wpe, const dp_tensor *G);
    /* Optional, both or neither: keeps_out_grad says whether the linear hook of weight w will
     * keep the output gradient (B x T x p, dtype t; input width d) it is given. Where it will and
     * the backward frees that gradient right after the linear (gpt's fc and qkv, llama's gate,
     * up, q, k, v), the backward allocates it under `output_grads` with w's module and, once done
     * with it, calls adopt, which may move it out of *G (leaving it empty) so that the hook need
     * not copy it; what adopt leaves, the backward releases. */
    int (*keeps_out_grad)(void *ctx, const dp_param *w, int64_t B, int64_t T, int64_t d, int64_t p, dp_dtype t);
    int (*adopt)(void *ctx, dp_param *w, dp_tensor *G);
    /* Optional: brackets the linears whose hooks are given the same input A (llama's q, k and v,
     * their LoRA A factors too; gate and up): called with A before the first of them and with
     * NULL once the last is done (on error too), so that a hook may form what depends on A alone
     * once (DP ghost norms: the Gram a_i a_i^T) and free it at the bracket's end. */
    int (*shared_input)(void *ctx, const dp_tensor *A);
    /* Optional: called once block `layer`'s backward is done, while everything its hooks were
     * given (its saved or recomputed activations, its input) is still valid: with block_end the
     * backward keeps a block's activations until the call returns, then frees them (unless it
     * retains them), so a hook may read the A it was given up to then (DP clipping forms a block's
     * clipped gradient there as soon as the block's norms are known). Also called with layer =
     * DP_MODEL_HEAD once the head's and the final norm's backward is done (their activations are
     * not kept for it). */
    int (*block_end)(void *ctx, dp_model *m, int64_t layer);
} dp_layer_hooks;

/* A block's weights on demand, for a strategy whose ranks each hold a part of every tensor (fsdp):
 * acquire(l) runs before every pass that reads block l's weights (its forward; in the backward, the
 * recompute of a checkpointed block and the block's backward under one acquire; a clip's
 * dp_model_recompute_block) and release(l) right after it, on error too; at most one block is
 * acquired at a time. The tensors outside the blocks are asked for the same way, as two pseudo-blocks
 * (below): DP_MODEL_EMBEDDINGS around the forward's embedding lookup, DP_MODEL_HEAD around the
 * forward's final norm and head (the logits) and around the backward's head (its logits recomputed
 * after a retained backward) and final norm. Nothing else reads their values: the backward's
 * embedding gradient is a scatter of the residual stream's, and the DP hooks and bk's clip read
 * activations and output gradients, not weights. */
#define DP_MODEL_EMBEDDINGS (-1) /* the token embedding and gpt's positions */
#define DP_MODEL_HEAD (-2)       /* the final norm and the head: lm_head, or the token embedding when tied */
typedef struct dp_block_weights {
    void *ctx;
    int (*acquire)(void *ctx, dp_model *m, int64_t layer);
    void (*release)(void *ctx, dp_model *m, int64_t layer);
} dp_block_weights;

typedef struct dp_backward_opts {
    const float *sample_scale; /* B host floats s_i (see above); NULL means 1/B each */
    int weight_grads;          /* 1: accumulate parameter gradients (allocating them if needed) */
    int retain;                /* 1: keep the activations for another backward (DP two-pass) */
    const dp_layer_hooks *hooks;
} dp_backward_opts;

/* Builds a model on dev with initialised parameters (normal(0, init_std) for weights and
 * embeddings, ones for norm gains, zeros for biases and LoRA B, LoRA A uniform in
 * +-1/sqrt(in) as PEFT's kaiming_uniform(a=sqrt(5)); GPT-2's 1/sqrt(2L) scaling of residual
 * projections). Each parameter draws from its own Philox stream (cfg.seed, a hash of its name),
 * so adding adapters leaves the base weights unchanged. With LoRA, as in PEFT, every base
 * parameter is frozen (trainable = 0) and only the adapters train. Allocates under `parameters`
 * with module paths. bf16 runs on CUDA and plan, and on the CPU as a slow exact reference (bf16
 * storage, f32 arithmetic, rounded where the CUDA kernels round: cpu_layers.c) that tests hold
 * CUDA's bf16 to. DP_EINVAL for a bad configuration, DP_EOOM. */
int dp_model_new(dp_device *dev, const dp_model_config *cfg, dp_model **out);
/* Frees everything the model allocated (parameters, gradients, activations). NULL is a no-op. */
void dp_model_free(dp_model *m);
/* The model's configuration (with defaults filled in). */
const dp_model_config *dp_model_config_of(const dp_model *m);
/* The device the model lives on. */
dp_device *dp_model_device(const dp_model *m);

/* Where a model came from, for the files a save writes beside the weights (model_io.c): what a
 * Hugging Face checkpoint said that dpprof does not model but others need (the token ids generation
 * stops at). All NULL for a model made from a shape; dp_model_load fills them. Malloc'd strings the
 * model owns (dp_model_free frees them). */
typedef struct dp_model_origin {
    char *dir;        /* the checkpoint directory the base was loaded from, absolute */
    char *tokens;     /* a JSON object: config.json's bos_token_id, eos_token_id and pad_token_id,
                       * those the file gives, as it gives them */
    char *generation; /* generation_config.json's text, when the checkpoint has one */
} dp_model_origin;

/* The model's origin (dp_model_origin), to read or fill; never NULL. */
dp_model_origin *dp_model_origin_of(dp_model *m);

/* Whether block `layer` is checkpointed (cfg.checkpoint N > 0 and layer a multiple of N). */
int dp_model_checkpointed(const dp_model *m, int64_t layer);

/* Runs the forward pass on inputs/targets (B x T i32 on the model's device, B <= cfg.batch,
 * T <= cfg.seq_len, ids in [0, vocab); a target may be DP_IGNORE_INDEX, -100: a pad, with no loss
 * and no gradient, and sample i's loss is the mean over its n_i other targets, 0 when it has none),
 * saving what backward needs; activations of an earlier
 * forward are released first. The model keeps views of inputs and targets for the backward:
 * they must stay alive and unchanged until it (the ids are checked here only; the backward and
 * the DP hooks index tables with them), which the Lua bindings enforce by refusing writes to and
 * frees of a batch a pending backward reads. Writes the batch loss (mean of per-sample losses) to *loss
 * and, when sample_losses != NULL, L_i for each sample (host array of B); 0 on plan.
 * Activation checkpointing (cfg.checkpoint): a checkpointed block keeps only its input (B x T x d
 * under `activations`, module "layers.<i>", the block) once its forward is done; every backward
 * recomputes the block's forward from it (all but its output, which the next block holds) just
 * before the block's backward and frees what it recomputed as soon as it is used, even when the
 * backward retains the rest. The recomputation is logged (dp_model_recompute_log) and its ops
 * recorded in the ledger's "recompute" section. */
int dp_model_forward(dp_model *m, const dp_tensor *inputs, const dp_tensor *targets, float *loss, float *sample_losses);
/* Runs the backward pass of the last forward (see dp_backward_opts; opts NULL: scale 1/B,
 * weight gradients, no hooks). Frees each activation as soon as it has been used, unless
 * opts->retain; the logits buffer (which becomes the logits' gradient in place) is freed after
 * the head's backward in any case, and a backward after a retained one recomputes it from the
 * saved final-norm output. DP_EINVAL when there is no forward to go back through. */
int dp_model_backward(dp_model *m, const dp_backward_opts *opts);
/* Frees saved activations of the last forward (after a retained backward). */
void dp_model_release_activations(dp_model *m);

/* The checkpointed block whose recomputed activation t is (t points at the model's own tensor, as
 * the hooks receive it), or -1 when t is none (a saved activation, or no checkpointing). A hook
 * that keeps t past its call (DP book-keeping) must get it back with dp_model_recompute_block. */
int dp_model_recomputed_block(const dp_model *m, const dp_tensor *t);
/* Recomputes checkpointed block `layer`'s activations of the saved forward (after a retained
 * backward: its input is kept), as the backward does; the tensors the hooks were given are valid
 * again, with the same values, until dp_model_release_block. DP_EINVAL when the block is not
 * checkpointed or its input is gone. */
int dp_model_recompute_block(dp_model *m, int64_t layer);
/* Frees what dp_model_recompute_block recomputed for block `layer`. */
void dp_model_release_block(dp_model *m, int64_t layer);
/* Installs w (copied) as the model's block weights provider, or with w NULL (or w->acquire NULL) removes it. */
void dp_model_set_block_weights(dp_model *m, const dp_block_weights *w);

/* One recomputation of a block: dp_clock_ns() at its start and end (the device synchronised at
 * both, so it is device time). */
typedef struct dp_model_span {
    int64_t start_ns, end_ns;
} dp_model_span;
#define DP_MODEL_SPAN_LOG 4096 /* spans logged between two clears, at most (later ones are counted in the total) */
/* The recomputations since the last dp_model_clear_recompute_log: *n spans (at most
 * DP_MODEL_SPAN_LOG) and *total_ns, the time of all of them. */
const dp_model_span *dp_model_recompute_log(const dp_model *m, size_t *n, int64_t *total_ns);
/* Empties the recompute log. */
void dp_model_clear_recompute_log(dp_model *m);
/* The id of the forward whose state the model holds (what a backward goes back through), 0 when
 * it holds none. Ids are never reused: a new forward, a backward that does not retain and
 * dp_model_release_activations all change it, so a caller that remembers the id of its own
 * forward knows whether that state is still the one saved (dpsgd does, and the bindings). */
uint64_t dp_model_forward_id(const dp_model *m);
/* The logits of the last forward (B x T x V, the compute dtype), valid until the backward turns
 * them into their gradient; NULL when there are none. */
const dp_tensor *dp_model_logits(const dp_model *m);

/* Number of parameter tensors. */
int dp_model_param_count(const dp_model *m);
/* Parameter i (0-based, in Hugging Face order: embeddings, blocks, final norm, head). */
dp_param *dp_model_param(dp_model *m, int i);
/* The parameter with Hugging Face name `name`, or NULL. */
dp_param *dp_model_param_named(dp_model *m, const char *name);
/* Number of scalar parameters (all, or trainable only). */
int64_t dp_model_num_params(const dp_model *m, int trainable_only);
/* Zeroes the gradients, or frees them when set_to_none (PyTorch's default). */
int dp_model_zero_grad(dp_model *m, int set_to_none);
/* Refreshes the bf16 compute copies from the f32 masters (after an optimizer step). */
int dp_model_sync_compute_weights(dp_model *m);

#endif
