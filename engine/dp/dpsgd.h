/* dpsgd.h: DP-SGD around a model: per-sample norms, clipping, noise, sampling, accounting.
 *
 * Two orthogonal choices make a method:
 * - norms, how each sample's gradient norm ||g_i|| is obtained:
 *   `materialize` forms per-sample gradients (Opacus's hooks mode); `ghost` takes
 *   <a a^T, g g^T> from T x T Gram matrices; `mixed` picks per layer whichever of the two the
 *   cost model (dpsgd_method.c) rates cheaper; `flash` runs fused tiled kernels that never hold a
 *   T x T matrix nor a p x d per-sample gradient, per layer the cheaper of the Gram-tile
 *   (~T^2 (p+d) flops) and gradient-tile (~2 T p d flops) formulation, and with a physical
 *   batch of 1 takes the norm from the layer's ordinary gradient;
 *   with bk and B > 1, flash materializes (and keeps) a narrow-input linear's per-sample
 *   gradients when they are at most an eighth of the output gradient bk would keep
 *   (dpsgd_flash_bk_materializes: LoRA B matrices, or very long sequences);
 * - clip, how the clipped sum sum_i c_i g_i is formed: `twopass` runs a second backward whose
 *   loss is scaled per sample by c_i (Opacus); `bk` (book-keeping) runs one backward and keeps,
 *   per parameter, what the clipped gradient is then formed from: a linear's output gradient
 *   G (`output_grads`; its input is the retained activation), giving (c (.) G)^T A in one GEMM,
 *   or the per-sample gradients the norm pass produced anyway (`per_sample_grads`: materialized
 *   weights, biases, norm gains), giving c^T g. With `materialize` norms, bk is exactly Opacus's
 *   hooks mode: per-sample gradients kept until the clip factors are known, then summed.
 * Presets (named pairs; the list is dpsgd_method.c's): vanilla (no DP), flat (materialize + bk),
 * ghost (ghost + twopass), mixed_ghost (mixed + twopass), bk (mixed + bk), flash_clip (flash + bk).
 *
 * The step (NOTES.md): per-sample gradient g_i = grad L_i (L_i the mean loss over the sample's
 * tokens); c_i = min(1, C / (||g_i|| + 1e-6)) with ||g_i|| over every trainable tensor (flat
 * clipping); the clipped sums of the physical batches of one logical batch accumulate in the
 * parameters' gradients; then, once per logical step, Gaussian noise N(0, sigma^2 C^2) from the
 * counter-based generator (same bits on every device) is added in place and everything divided
 * by the expected logical batch size. Vanilla goes through the same phases: its backward scales
 * each sample by 1 / (logical batch), its clip and noise do nothing.
 *
 * Memory: per-sample gradients under `per_sample_grads`, per-sample squared norms (B floats per
 * parameter) under `norm_samples`, Gram matrices and sort keys under `temp`, kept output
 * gradients under `output_grads`, each with the module path of its layer and freed as soon as
 * the algorithm allows.
 *
 * Activation checkpointing (the model's cfg.checkpoint) composes with every method: the hooks
 * take a linear's input and output gradient from the block the backward recomputed; twopass's
 * second backward recomputes again; bk keeps its output gradients as always and, in the clip,
 * has each checkpointed block's inputs recomputed one block at a time (docs/architecture.md). */
#ifndef DPSGD_H
#define DPSGD_H

#include "accountant.h"
#include "comm.h"
#include "dpsgd_strategy.h"
#include "model.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DPSGD_NORMS_NONE = 0, /* vanilla */
    DPSGD_NORMS_MATERIALIZE,
    DPSGD_NORMS_GHOST,
    DPSGD_NORMS_MIXED,
    DPSGD_NORMS_FLASH
} dpsgd_norms_method;

typedef enum { DPSGD_CLIP_NONE = 0, DPSGD_CLIP_TWOPASS, DPSGD_CLIP_BK } dpsgd_clip_method;

/* How one layer's per-sample norm was obtained (recorded per layer; docs/results.md `layers`). */
typedef enum {
    DPSGD_FORM_DIRECT = 0, /* biases, norm gains, positions: per-sample gradients of d floats */
    DPSGD_FORM_MATERIALIZE,
    DPSGD_FORM_GHOST, /* Gram matrices (embeddings: g g^T with the token-equality mask) */
    DPSGD_FORM_GRAM_TILE,
    DPSGD_FORM_GRAD_TILE,
    DPSGD_FORM_BATCH1,     /* physical batch of 1: the layer's ordinary gradient */
    DPSGD_FORM_GROUPED,    /* embeddings: equal token ids grouped per sample */
    DPSGD_FORM_GRAM_STRIP, /* flash_impl = strips: the Gram triangle in strips of backend GEMMs */
    DPSGD_FORM_GRAD_STRIP  /* flash_impl = strips: the per-sample gradient in blocks of rows */
} dpsgd_formulation;

/* How flash norms evaluate the formulation they choose: the fused tile kernels (default), or
 * strips through the backend's batched GEMM and a dot, in a workspace of at most 32 MiB
 * (dpsgd_strips.c). Either way no T x T matrix and no whole p x d per-sample gradient. */
typedef enum { DPSGD_FLASH_TILES = 0, DPSGD_FLASH_STRIPS } dpsgd_flash_impl;

/* Which tensors share a clipping bound (dpsgd_groups.c): `flat` one group of every trainable
 * tensor (Opacus's default); `per_layer` every trainable tensor its own (Opacus's per_layer,
 * fastDP's param-wise); `per_block` each transformer block's tensors together, the embeddings
 * (token, positions) and the head (final norm, lm_head) each a group (fastDP's block-wise);
 * `groups` named groups of tensors by Hugging Face name patterns (dpsgd_set_clip_groups). Each
 * group g clips sample i's gradient over its tensors by its factor c_gi; the noise's std is
 * sigma ||C||_2 over the groups' bounds (dpsgd_noise_norm), the sensitivity of the clipped sum. */
typedef enum {
    DPSGD_STYLE_FLAT = 0,
    DPSGD_STYLE_PER_LAYER,
    DPSGD_STYLE_PER_BLOCK,
    DPSGD_STYLE_GROUPS
} dpsgd_clip_style;

/* How a group's factor comes from its sample norm n = ||g_gi||: `abadi` c = min(1, C / (n + 1e-6))
 * (Opacus); `automatic` c = C / (n + gamma) (Bu et al.: every sample scaled, none to tune). */
typedef enum { DPSGD_CLIP_FN_ABADI = 0, DPSGD_CLIP_FN_AUTOMATIC } dpsgd_clip_fn;
#define DPSGD_AUTOMATIC_GAMMA 0.01 /* automatic's gamma unless given (Bu et al.'s, fastDP's default) */

/* How many values each enum has ("none" included for norms and clip). */
#define DPSGD_N_NORMS (DPSGD_NORMS_FLASH + 1)
#define DPSGD_N_CLIPS (DPSGD_CLIP_BK + 1)
#define DPSGD_N_FORMULATIONS (DPSGD_FORM_GRAD_STRIP + 1)
#define DPSGD_N_FLASH_IMPLS (DPSGD_FLASH_STRIPS + 1)
#define DPSGD_N_STYLES (DPSGD_STYLE_GROUPS + 1)
#define DPSGD_N_CLIP_FNS (DPSGD_CLIP_FN_AUTOMATIC + 1)

/* The lists of names a user chooses from (dpsgd_method.c holds each once; the Lua module's
 * dpprof.dpsgd.METHODS, PRESETS, NORMS, CLIPS, FORMULATIONS and FLASH_IMPLS are made from them). */
typedef enum {
    DPSGD_LIST_PRESETS,      /* the methods by name, vanilla first: "vanilla", "flat", "ghost", ... */
    DPSGD_LIST_NORMS,        /* norms choices: "materialize", "ghost", "mixed", "flash" */
    DPSGD_LIST_CLIPS,        /* clip choices: "twopass", "bk" */
    DPSGD_LIST_FORMULATIONS, /* per-layer formulations, by dpsgd_formulation value */
    DPSGD_LIST_FLASH_IMPLS,  /* flash_impl choices, by dpsgd_flash_impl value */
    DPSGD_LIST_STYLES,       /* clipping styles, by dpsgd_clip_style value: "flat", "per_layer", ... */
    DPSGD_LIST_CLIP_FNS      /* clip functions, by dpsgd_clip_fn value: "abadi", "automatic" */
} dpsgd_list;

/* The i-th name of a list (0-based), or NULL past its end. */
const char *dpsgd_list_name(dpsgd_list list, size_t i);
/* The names of a list joined by ", " into buf (at most n bytes, NUL included); returns buf. */
const char *dpsgd_list_join(dpsgd_list list, char *buf, size_t n);
/* "norms: materialize, ghost, mixed, flash; clip: twopass, bk" into buf; returns buf. */
const char *dpsgd_choices_text(char *buf, size_t n);

/* Parses a preset name (one of DPSGD_LIST_PRESETS) into its two choices ("vanilla": none and
 * none); DP_EINVAL naming the valid presets. */
int dpsgd_method_preset(const char *name, dpsgd_norms_method *norms, dpsgd_clip_method *clip);
/* Parses a norms choice ("materialize", "ghost", "mixed", "flash"); DP_EINVAL naming them. */
int dpsgd_norms_parse(const char *name, dpsgd_norms_method *out);
/* Parses a clip choice ("twopass", "bk"); DP_EINVAL naming them. */
int dpsgd_clip_parse(const char *name, dpsgd_clip_method *out);
/* The choice's name ("materialize", ...; "none" for DPSGD_NORMS_NONE). */
const char *dpsgd_norms_name(dpsgd_norms_method n);
/* The choice's name ("twopass", "bk"; "none" for DPSGD_CLIP_NONE). */
const char *dpsgd_clip_name(dpsgd_clip_method c);
/* The preset naming this pair, or NULL when none does (then results say "norms+clip"). */
const char *dpsgd_method_preset_name(dpsgd_norms_method n, dpsgd_clip_method c);
/* Parses a flash Gram choice ("tiles", "strips"); DP_EINVAL naming them. */
int dpsgd_flash_impl_parse(const char *name, dpsgd_flash_impl *out);
/* The choice's name ("tiles", "strips"). */
const char *dpsgd_flash_impl_name(dpsgd_flash_impl g);
/* Parses a clipping style ("flat", "per_layer", "per_block", "groups"); DP_EINVAL naming them. */
int dpsgd_style_parse(const char *name, dpsgd_clip_style *out);
/* The style's name. */
const char *dpsgd_style_name(dpsgd_clip_style s);
/* Parses a clip function ("abadi", "automatic"); DP_EINVAL naming them. */
int dpsgd_clip_fn_parse(const char *name, dpsgd_clip_fn *out);
/* The clip function's name. */
const char *dpsgd_clip_fn_name(dpsgd_clip_fn f);
/* The formulation's name ("direct", "materialize", "ghost", "gram_tile", "grad_tile", "batch1",
 * "grouped", "gram_strip", "grad_strip"). */
const char *dpsgd_formulation_name(dpsgd_formulation f);

/* The formulation `norms` uses for a linear's weight with B samples of T tokens, input width d,
 * output width p, compute dtype t: mixed compares the estimated time (a roofline of flops and
 * bytes, the same constants on every device so that CPU, CUDA and plan allocate alike) of
 * ghost and materialize; flash compares the flops of its two tile formulations (batch1 when
 * B == 1). Writes the estimated flops and bytes of the choice when non-NULL. */
dpsgd_formulation dpsgd_choose_linear(dpsgd_norms_method norms, int64_t B, int64_t T, int64_t d, int64_t p, dp_dtype t,
                                      double *flops, double *bytes);
/* flash + bk on B > 1 materializes a linear's per-sample gradients (and keeps them as its book)
 * when they are at most 1/DPSGD_FLASH_BK_PSG_FRACTION of the output gradient book-keeping would
 * otherwise keep: B p d f32 against B T p in dtype t, i.e. narrow inputs (a LoRA B, d = rank) or
 * long sequences. The norm is the same; the memory is the smaller book (Llama-3 8B + LoRA r=16
 * bf16 at T=1024 B=4: 10.3 GB of LoRA-B output gradients become 0.4 GB of per-sample gradients). */
#define DPSGD_FLASH_BK_PSG_FRACTION 8
int dpsgd_flash_bk_materializes(dpsgd_norms_method norms, dpsgd_clip_method clip, int64_t B, int64_t T, int64_t d,
                                dp_dtype t);
/* The formulation `norms` uses for a token embedding: ghost for ghost, grouped otherwise. */
dpsgd_formulation dpsgd_choose_embedding(dpsgd_norms_method norms);

/* Adaptive clipping (Andrew et al. 2021, Opacus's AdaClipDPOptimizer), with flat abadi clipping:
 * after each logical step's noise the bound C moves geometrically toward the
 * target_unclipped_quantile of the samples' norms, C <- clamp(C exp(-clipbound_learning_rate (u -
 * target_unclipped_quantile)), min_clipbound, max_clipbound), u the step's unclipped fraction
 * (#{i : ||g_i|| + 1e-6 <= C} plus N(0, unclipped_num_std^2) noise, over the step's samples; the
 * bound stays after a step of none). The gradient's noise multiplier is raised to
 * (sigma^-2 - (2 unclipped_num_std)^-2)^(-1/2) so that the two releases together spend what sigma
 * alone would: the accountant takes sigma (dpsgd_adaptive_noise_multiplier). */
typedef struct dpsgd_adaptive {
    int enabled;
    double target_unclipped_quantile;    /* in [0, 1] */
    double clipbound_learning_rate;      /* >= 0 */
    double max_clipbound, min_clipbound; /* 0 < min <= max */
    double unclipped_num_std;            /* the count's noise; > noise_multiplier / 2 when sigma > 0 */
} dpsgd_adaptive;

typedef struct dpsgd_config {
    dpsgd_norms_method norms; /* DPSGD_NORMS_NONE with DPSGD_CLIP_NONE: vanilla */
    dpsgd_clip_method clip;
    double max_grad_norm;            /* C, > 0 (default 1) */
    double noise_multiplier;         /* sigma, >= 0 (default 1) */
    double sample_rate;              /* q in (0, 1]; 0 = expected_batch_size / dataset_size */
    int64_t dataset_size;            /* N; 0 = unknown (then sample_rate must be given to account) */
    int64_t expected_batch_size;     /* 0 = int(q N) with Poisson (Opacus), else the model's batch */
    int64_t max_physical_batch_size; /* 0 = the model's batch */
    int poisson;                     /* 1: logical batch sizes ~ Binomial(N, q) */
    uint64_t seed;                   /* noise and sampling */
    double delta;                    /* for dpsgd_epsilon's default (1e-5) */
    dpsgd_flash_impl flash_impl;     /* flash's kernels: tiles (default) or strips */
    dpsgd_clip_style clipping;       /* which tensors share a bound (default flat) */
    dpsgd_clip_fn clip_fn;           /* abadi (default) or automatic */
    double gamma;                    /* automatic's gamma, > 0 (default DPSGD_AUTOMATIC_GAMMA) */
    dpsgd_adaptive adaptive;         /* adaptive clipping (off by default) */
} dpsgd_config;

/* One logical step of adaptive clipping: the bound it clipped with, its samples and how many were
 * unclipped, the noisy unclipped fraction and the bound the next step clips with. */
typedef struct dpsgd_bound_step {
    double bound;
    int64_t samples, unclipped;
    double fraction; /* (unclipped + the count's noise) / samples; 0 with no samples */
    double next;
} dpsgd_bound_step;

/* One logical step: logical_size samples in n_physical = ceil(logical_size / max_physical_batch_size)
 * physical batches split as Opacus's BatchMemoryManager splits them (numpy.array_split: the first
 * logical_size mod n_physical batches one sample larger); physical_size is the largest. */
typedef struct dpsgd_step_plan {
    int64_t logical_size, physical_size, n_physical;
    /* distributed (dpsgd_set_distributed): this rank's slice of the logical batch, samples
     * [first, first + local_size) in the order one process holds them; one process: 0 and n */
    int64_t first, local_size;
    /* fsdp: padding physical batches this rank runs after its own (dpsgd_forward_padding), so
     * that every rank runs as many physical batches as the rank with the most (each gathers every
     * block); 0 otherwise */
    int64_t n_padding;
} dpsgd_step_plan;

/* The plan of a logical batch of n samples with at most max_physical a physical batch (n >= 0,
 * max_physical >= 1; no batch when n is 0). */
void dpsgd_split(int64_t n, int64_t max_physical, dpsgd_step_plan *out);
/* The samples Poisson sampling draws at logical step `step` (from 0) with seed, rate q and a data set
 * of N: each sample i of [0, N) whose uniform is below q, increasing (the draw dpsgd_next_step
 * makes). Writes at most cap of them to out (NULL when cap is 0) and returns how many there are. */
int64_t dpsgd_poisson_members(uint64_t seed, int64_t step, double q, int64_t N, int64_t *out, int64_t cap);
/* Size of physical batch k (0-based) of the plan (0 when out of range). */
int64_t dpsgd_step_plan_batch(const dpsgd_step_plan *plan, int64_t k);

/* One DP layer as the last backward saw it. */
typedef struct dpsgd_layer_info {
    uint32_t module;  /* module id (scope.h) of the layer */
    const char *kind; /* "linear", "head", "tied_head", "lora_a", "lora_b", "embedding",
                       * "position", "layernorm", "rmsnorm" */
    dpsgd_formulation norms;
} dpsgd_layer_info;

typedef struct dpsgd dpsgd;

/* Fills cfg with defaults (vanilla, C = 1, sigma = 1, delta = 1e-5, fixed batches). */
void dpsgd_config_default(dpsgd_config *cfg);
/* Wraps model m (not owned; must outlive the wrapper). Checks cfg: DP_EINVAL naming the key and
 * its valid range (a norms choice without a clip choice, C <= 0, q outside (0, 1], a physical
 * batch above the model's, Poisson without a dataset size...). */
int dpsgd_new(dp_model *m, const dpsgd_config *cfg, dpsgd **out);
/* The checks dpsgd_new makes of cfg for a model of batch model_batch, without a model:
 * DP_OK or DP_EINVAL with the message dpsgd_new would give. */
int dpsgd_config_check(const dpsgd_config *cfg, int64_t model_batch);
/* Frees the wrapper and whatever it still holds. NULL is a no-op. */
void dpsgd_free(dpsgd *dp);
/* The configuration with defaults filled in (expected batch size, sample rate). */
const dpsgd_config *dpsgd_config_of(const dpsgd *dp);

/* One group of a clipping style's groups (dpsgd_set_clip_groups): the trainable tensors whose
 * Hugging Face names match one of its patterns (globs: '*' stands for any run of characters,
 * dots included; every other character for itself), and their bound. */
typedef struct dpsgd_group_spec {
    const char *name;            /* groups: the group's name (results, messages); per_layer: unused */
    const char *const *patterns; /* n_patterns globs over the tensors' names */
    size_t n_patterns;
    double max_grad_norm; /* the group's bound C_g, > 0 */
} dpsgd_group_spec;

/* The groups of cfg.clipping over the wrapper's trainable tensors: flat and per_block take no
 * specs (every group's bound cfg.max_grad_norm); per_layer's specs give some tensors their own
 * bound (a matching spec's; two that match with other bounds are refused; the others
 * cfg.max_grad_norm); groups' specs are
 * the groups, each trainable tensor in exactly one (DP_EINVAL naming a tensor in none or two, a
 * spec that matches no trainable tensor, a bound that is not positive). dpsgd_new sets the
 * groups with no specs (groups style: DP_EINVAL until they are given); set them again before
 * the first step only. */
int dpsgd_set_clip_groups(dpsgd *dp, const dpsgd_group_spec *specs, size_t n_specs);
/* How many clipping groups there are (1 for flat). */
size_t dpsgd_clip_group_count(const dpsgd *dp);
/* Group g's name: "all" (flat), the tensor's name (per_layer), "embeddings", the block's prefix
 * ("model.layers.3", "transformer.h.3") or "head" (per_block), the spec's name (groups); NULL
 * past the end. */
const char *dpsgd_clip_group_name(const dpsgd *dp, size_t g);
/* Group g's bound C_g (0 past the end). */
double dpsgd_clip_group_bound(const dpsgd *dp, size_t g);
/* How many trainable tensors group g holds (0 past the end). */
size_t dpsgd_clip_group_size(const dpsgd *dp, size_t g);
/* The clipping group of trainable parameter p, or -1 when p is not one. */
int dpsgd_param_clip_group(const dpsgd *dp, const dp_param *p);
/* ||C||_2 = sqrt(sum_g C_g^2), what the noise's std is sigma times (C for flat; adaptive: the
 * current bound). */
double dpsgd_noise_norm(const dpsgd *dp);
/* The noise multiplier the gradient's noise is drawn with: sigma, or adaptive clipping's raised
 * (sigma^-2 - (2 unclipped_num_std)^-2)^(-1/2) (0 when sigma is 0). */
double dpsgd_adaptive_noise_multiplier(const dpsgd_config *cfg);
/* Adaptive clipping's steps so far, in order (n of them; none without it). */
const dpsgd_bound_step *dpsgd_bound_history(const dpsgd *dp, size_t *n);

/* Draws the next logical batch: Poisson (each of N samples with probability q, from the
 * generator keyed by the seed and the step) or fixed (the expected batch size), split into
 * physical batches of at most max_physical_batch_size. */
int dpsgd_next_step(dpsgd *dp, dpsgd_step_plan *out);
/* Which samples the last dpsgd_next_step drew (0 before the first): Poisson, each sample i of
 * [0, N) whose uniform is below q, in increasing order (Opacus's mask.nonzero()); fixed, the data
 * set in order, expected_batch_size at a time, wrapping round (0..B-1 without a dataset size).
 * Writes at most cap indices to out; returns how many there are (the logical size). */
int64_t dpsgd_step_members(const dpsgd *dp, int64_t *out, int64_t cap);
/* Trains as one rank of comm's world under strategy (DPSGD_STRATEGY_DDP, DPSGD_STRATEGY_ZERO2 or DPSGD_STRATEGY_FSDP):
 * each step's logical batch is drawn as one process draws it and this rank takes its slice (dpsgd_step_plan.first,
 * local_size); the clipped sums (vanilla: the gradients of the global mean loss) are summed across the ranks before the
 * noise, which every rank then adds with the same Philox offsets, so every rank holds the same noisy gradient and the
 * parameters stay replicated. DPSGD_STRATEGY_ZERO2 reduce-scatters instead: each rank keeps its slice of every
 * gradient, noises it at its elements' Philox offsets, the optimizer updates that slice with states of its size, and
 * dpsgd_gather_params all-gathers the parameters (the same bits as ddp and one process, to rounding).
 * DPSGD_STRATEGY_FSDP shards as zero2 and also keeps only the part of every parameter (dp_param.part, frozen ones too),
 * the blocks' and the embeddings', the final norm's and the head's: the model's block weights provider all-gathers a
 * block (or the embeddings, or the final norm and the head) in the dtype its pass reads before each
 * pass that reads it and frees it after; dpsgd_gather_params then gathers nothing (it releases the
 * spent gradient parts), and dpsgd_unshard the whole model at the end.
 * A fixed batch must divide among the ranks (DP_EINVAL). comm must outlive dp. */
int dpsgd_set_distributed(dpsgd *dp, dp_comm *comm, dpsgd_strategy strategy);
/* Sums the step's gradients across the ranks (ddp: an all-reduce per trainable tensor, in place,
 * in model order); once per logical step, after the last clip. dpsgd_noise calls it when the
 * caller did not. Nothing without dpsgd_set_distributed. */
int dpsgd_reduce_grads(dpsgd *dp);
/* zero2, after the optimizer stepped this rank's slices: all-gathers every rank's updated slice
 * into the full parameters (and refreshes the model's compute copies); fsdp: releases the spent
 * gradient parts (the next pass gathers); nothing otherwise. */
int dpsgd_gather_params(dpsgd *dp);
/* fsdp, at the end of training: all-gathers every parameter whole again (one process's
 * model, for whatever reads it next) and removes the block weights provider; nothing otherwise. */
int dpsgd_unshard(dpsgd *dp);
/* Forward of one physical batch (inputs/targets B x T i32 on the model's device; they must
 * stay alive and unchanged until dpsgd_clip). Writes the batch loss and, when non-NULL, the B
 * losses. Backward and clip check that the model still holds this forward (dp_model_forward_id):
 * another forward on the model in between, or a release of its activations, makes them fail
 * with DP_EINVAL rather than go back through another batch's state. */
int dpsgd_forward(dpsgd *dp, const dp_tensor *inputs, const dp_tensor *targets, float *loss, float *sample_losses);
/* The forward of a padding physical batch (dpsgd_step_plan.n_padding): one sample of one token
 * whose target is ignored (no loss, no gradient, norm 0), held by the wrapper until its clip;
 * backward and clip follow as for any batch, and its sample is counted nowhere (norms, clip
 * factors). */
int dpsgd_forward_padding(dpsgd *dp, float *loss);
/* Backward of the last forward: vanilla accumulates the gradient of the logical batch's mean
 * loss; DP computes every trainable tensor's per-sample squared norms (and what bk keeps). */
int dpsgd_backward(dpsgd *dp);
/* Clip factors from the norms, then the clipped sum added to the parameters' gradients
 * (second backward or book-keeping). Vanilla: nothing. */
int dpsgd_clip(dpsgd *dp);
/* Once per logical step: adds N(0, sigma^2 C^2) to every trainable gradient (allocating zero
 * gradients where none exist) and divides by the expected batch size; counts the step.
 * Vanilla: only counts the step. */
int dpsgd_noise(dpsgd *dp);

/* Logical steps taken (noise calls). */
int64_t dpsgd_steps(const dpsgd *dp);
/* The Poisson rate q used for accounting (0 when unknown). */
double dpsgd_sample_rate(const dpsgd *dp);
/* The expected logical batch size the noisy sum is divided by. */
int64_t dpsgd_expected_batch_size(const dpsgd *dp);
/* Epsilon at delta (delta <= 0: the configured one) after the steps taken, from the accountant
 * (accountant.h, default options); 0 before the first step, INFINITY for vanilla or sigma = 0.
 * DP_EINVAL when q is unknown or the accountant fails. */
int dpsgd_epsilon(const dpsgd *dp, double delta, dp_acct_kind accountant, double *epsilon);

/* Per-sample norms ||g_i|| and clip factors c_i of every sample clipped in the current logical
 * step (or the last one once its noise was added), in order; n of each. With several clipping
 * groups, c_i is the scale of the sample's whole gradient, ||sum_g c_gi g_gi|| / ||g_i|| (1 when
 * nothing of it was clipped; 1 for a zero gradient). */
const float *dpsgd_norms(const dpsgd *dp, size_t *n);
/* See dpsgd_norms. */
const float *dpsgd_clip_factors(const dpsgd *dp, size_t *n);
/* Per-group sample norms ||g_gi|| of the same samples: n_samples rows of n_groups, sample-major
 * (row i is sample i's groups in dpsgd_clip_group_name's order); *n_samples as dpsgd_norms'. */
const float *dpsgd_group_norms(const dpsgd *dp, size_t *n_samples, size_t *n_groups);
/* Per-sample squared norms of one trainable parameter's gradient in the last physical batch
 * (B host floats, copied into out), from the norms pass. DP_EINVAL for an unknown or frozen
 * parameter or before any DP backward. */
int dpsgd_param_sq_norms(const dpsgd *dp, const dp_param *p, float *out, int64_t n);
/* Number of layers the last DP backward saw. */
size_t dpsgd_layer_count(const dpsgd *dp);
/* Layer i of them, in the order the backward met them (NULL when out of range). */
const dpsgd_layer_info *dpsgd_layer(const dpsgd *dp, size_t i);

#endif
