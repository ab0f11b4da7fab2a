/* dp.h: DP-SGD around a model: per-sample norms, clipping, noise, sampling, accounting.
 *
 * Two orthogonal choices make a method:
 * - norms, how each sample's gradient norm ||g_i|| is obtained:
 *   `materialize` forms per-sample gradients (Opacus's hooks mode); `ghost` takes
 *   <a a^T, g g^T> from T x T Gram matrices; `mixed` picks per layer whichever of the two the
 *   cost model (dp_method.c) rates cheaper; `flash` runs fused tiled kernels that never hold a
 *   T x T matrix nor a p x d per-sample gradient, per layer the cheaper of the Gram-tile
 *   (~T^2 (p+d) flops) and gradient-tile (~2 T p d flops) formulation, and with a physical
 *   batch of 1 takes the norm from the layer's ordinary gradient;
 * - clip, how the clipped sum sum_i c_i g_i is formed: `twopass` runs a second backward whose
 *   loss is scaled per sample by c_i (Opacus); `bk` (book-keeping) runs one backward and keeps,
 *   per parameter, what the clipped gradient is then formed from: a linear's output gradient
 *   G (`output_grads`; its input is the retained activation), giving (c (.) G)^T A in one GEMM,
 *   or the per-sample gradients the norm pass produced anyway (`per_sample_grads`: materialized
 *   weights, biases, norm gains), giving c^T g. With `materialize` norms, bk is exactly Opacus's
 *   hooks mode: per-sample gradients kept until the clip factors are known, then summed.
 * Presets: vanilla (no DP), flat (materialize + bk), ghost (ghost + twopass), mixed_ghost
 * (mixed + twopass), bk (mixed + bk), flash_clip (flash + bk).
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
 * the algorithm allows. */
#ifndef DP_DP_H
#define DP_DP_H

#include "accountant.h"
#include "model.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DP_NORMS_NONE = 0, /* vanilla */
    DP_NORMS_MATERIALIZE,
    DP_NORMS_GHOST,
    DP_NORMS_MIXED,
    DP_NORMS_FLASH
} dp_norms_method;

typedef enum { DP_CLIP_NONE = 0, DP_CLIP_TWOPASS, DP_CLIP_BK } dp_clip_method;

/* How one layer's per-sample norm was obtained (recorded per layer; docs/results.md `layers`). */
typedef enum {
    DP_FORM_DIRECT = 0, /* biases, norm gains, positions: per-sample gradients of d floats */
    DP_FORM_MATERIALIZE,
    DP_FORM_GHOST,      /* Gram matrices (embeddings: g g^T with the token-equality mask) */
    DP_FORM_GRAM_TILE,
    DP_FORM_GRAD_TILE,
    DP_FORM_BATCH1,     /* physical batch of 1: the layer's ordinary gradient */
    DP_FORM_GROUPED,    /* embeddings: equal token ids grouped per sample */
    DP_FORM_GRAM_STRIP, /* flash_impl = strips: the Gram triangle in strips of backend GEMMs */
    DP_FORM_GRAD_STRIP  /* flash_impl = strips: the per-sample gradient in blocks of rows */
} dp_formulation;

/* How flash norms evaluate the formulation they choose: the fused tile kernels (default), or
 * strips through the backend's batched GEMM and a dot, in a workspace of at most 32 MiB
 * (dp_strips.c). Either way no T x T matrix and no whole p x d per-sample gradient. */
typedef enum { DP_FLASH_TILES = 0, DP_FLASH_STRIPS } dp_flash_impl;

/* Parses a preset name ("vanilla", "flat", "ghost", "mixed_ghost", "bk", "flash_clip");
 * DP_EINVAL naming the valid presets. */
int dp_method_preset(const char *name, dp_norms_method *norms, dp_clip_method *clip);
/* Parses a norms choice ("materialize", "ghost", "mixed", "flash"); DP_EINVAL naming them. */
int dp_norms_parse(const char *name, dp_norms_method *out);
/* Parses a clip choice ("twopass", "bk"); DP_EINVAL naming them. */
int dp_clip_parse(const char *name, dp_clip_method *out);
/* The choice's name ("materialize", ...; "none" for DP_NORMS_NONE). */
const char *dp_norms_name(dp_norms_method n);
/* The choice's name ("twopass", "bk"; "none" for DP_CLIP_NONE). */
const char *dp_clip_name(dp_clip_method c);
/* The preset naming this pair, or NULL when none does (then results say "norms+clip"). */
const char *dp_method_preset_name(dp_norms_method n, dp_clip_method c);
/* Parses a flash Gram choice ("tiles", "strips"); DP_EINVAL naming them. */
int dp_flash_impl_parse(const char *name, dp_flash_impl *out);
/* The choice's name ("tiles", "strips"). */
const char *dp_flash_impl_name(dp_flash_impl g);
/* The bf16 flash tile kernels' configurations on CUDA (kernels/dp_kernels.h, dpk_dp_flash_select):
 * Gram 0..3, gradient 0..2; 0 is the default, the others exist to be benchmarked. */
#define DP_FLASH_GRAM_VARIANTS 4
#define DP_FLASH_GRAD_VARIANTS 3
/* Parses the benchmark knob DPPROF_FLASH_VARIANT, "GRAM[,GRAD]" (NULL or "": 0, 0); DP_EINVAL
 * naming the valid ranges. */
int dp_flash_variant_parse(const char *text, int *gram, int *grad);
/* The formulation's name ("direct", "materialize", "ghost", "gram_tile", "grad_tile", "batch1",
 * "grouped", "gram_strip", "grad_strip"). */
const char *dp_formulation_name(dp_formulation f);

/* The formulation `norms` uses for a linear's weight with B samples of T tokens, input width d,
 * output width p, compute dtype t: mixed compares the estimated time (a roofline of flops and
 * bytes, the same constants on every device so that CPU, CUDA and plan allocate alike) of
 * ghost and materialize; flash compares the flops of its two tile formulations (batch1 when
 * B == 1). Writes the estimated flops and bytes of the choice when non-NULL. */
dp_formulation dp_choose_linear(dp_norms_method norms, int64_t B, int64_t T, int64_t d, int64_t p, dp_dtype t,
                                double *flops, double *bytes);
/* The formulation `norms` uses for a token embedding: ghost for ghost, grouped otherwise. */
dp_formulation dp_choose_embedding(dp_norms_method norms);

typedef struct dp_dpsgd_config {
    dp_norms_method norms;           /* DP_NORMS_NONE with DP_CLIP_NONE: vanilla */
    dp_clip_method clip;
    double max_grad_norm;            /* C, > 0 (default 1) */
    double noise_multiplier;         /* sigma, >= 0 (default 1) */
    double sample_rate;              /* q in (0, 1]; 0 = expected_batch_size / dataset_size */
    int64_t dataset_size;            /* N; 0 = unknown (then sample_rate must be given to account) */
    int64_t expected_batch_size;     /* 0 = int(q N) with Poisson (Opacus), else the model's batch */
    int64_t max_physical_batch_size; /* 0 = the model's batch */
    int poisson;                     /* 1: logical batch sizes ~ Binomial(N, q) */
    uint64_t seed;                   /* noise and sampling */
    double delta;                    /* for dp_dpsgd_epsilon's default (1e-5) */
    dp_flash_impl flash_impl;        /* flash's kernels: tiles (default) or strips */
} dp_dpsgd_config;

/* One logical step: logical_size samples in n_physical physical batches of physical_size
 * samples each, the last one possibly smaller (see dp_step_plan_batch). */
typedef struct dp_step_plan {
    int64_t logical_size, physical_size, n_physical;
} dp_step_plan;

/* Size of physical batch k (0-based) of the plan. */
int64_t dp_step_plan_batch(const dp_step_plan *plan, int64_t k);

/* One DP layer as the last backward saw it. */
typedef struct dp_dp_layer {
    uint32_t module;          /* module id (scope.h) of the layer */
    const char *kind;         /* "linear", "head", "tied_head", "lora_a", "lora_b", "embedding",
                               * "position", "layernorm", "rmsnorm" */
    dp_formulation norms;
} dp_dp_layer;

typedef struct dp_dpsgd dp_dpsgd;

/* Fills cfg with defaults (vanilla, C = 1, sigma = 1, delta = 1e-5, fixed batches). */
void dp_dpsgd_config_default(dp_dpsgd_config *cfg);
/* Wraps model m (not owned; must outlive the wrapper). Checks cfg: DP_EINVAL naming the key and
 * its valid range (a norms choice without a clip choice, C <= 0, q outside (0, 1], a physical
 * batch above the model's, Poisson without a dataset size...). */
int dp_dpsgd_new(dp_model *m, const dp_dpsgd_config *cfg, dp_dpsgd **out);
/* Frees the wrapper and whatever it still holds. NULL is a no-op. */
void dp_dpsgd_free(dp_dpsgd *dp);
/* The configuration with defaults filled in (expected batch size, sample rate). */
const dp_dpsgd_config *dp_dpsgd_config_of(const dp_dpsgd *dp);

/* Draws the next logical batch: Poisson (each of N samples with probability q, from the
 * generator keyed by the seed and the step) or fixed (the expected batch size), split into
 * physical batches of at most max_physical_batch_size. */
int dp_dpsgd_next_step(dp_dpsgd *dp, dp_step_plan *out);
/* Forward of one physical batch (inputs/targets B x T i32 on the model's device; they must
 * stay alive until dp_dpsgd_clip). Writes the batch loss and, when non-NULL, the B losses. */
int dp_dpsgd_forward(dp_dpsgd *dp, const dp_tensor *inputs, const dp_tensor *targets, float *loss,
                     float *sample_losses);
/* Backward of the last forward: vanilla accumulates the gradient of the logical batch's mean
 * loss; DP computes every trainable tensor's per-sample squared norms (and what bk keeps). */
int dp_dpsgd_backward(dp_dpsgd *dp);
/* Clip factors from the norms, then the clipped sum added to the parameters' gradients
 * (second backward or book-keeping). Vanilla: nothing. */
int dp_dpsgd_clip(dp_dpsgd *dp);
/* Once per logical step: adds N(0, sigma^2 C^2) to every trainable gradient (allocating zero
 * gradients where none exist) and divides by the expected batch size; counts the step.
 * Vanilla: only counts the step. */
int dp_dpsgd_noise(dp_dpsgd *dp);

/* Logical steps taken (noise calls). */
int64_t dp_dpsgd_steps(const dp_dpsgd *dp);
/* The Poisson rate q used for accounting (0 when unknown). */
double dp_dpsgd_sample_rate(const dp_dpsgd *dp);
/* The expected logical batch size the noisy sum is divided by. */
int64_t dp_dpsgd_expected_batch_size(const dp_dpsgd *dp);
/* Epsilon at delta (delta <= 0: the configured one) after the steps taken, from the accountant
 * (accountant.h, default options); 0 before the first step, INFINITY for vanilla or sigma = 0.
 * DP_EINVAL when q is unknown or the accountant fails. */
int dp_dpsgd_epsilon(const dp_dpsgd *dp, double delta, dp_acct_kind accountant, double *epsilon);

/* Per-sample norms ||g_i|| and clip factors c_i of every sample clipped in the current logical
 * step (or the last one once its noise was added), in order; n of each. */
const float *dp_dpsgd_norms(const dp_dpsgd *dp, size_t *n);
/* See dp_dpsgd_norms. */
const float *dp_dpsgd_clip_factors(const dp_dpsgd *dp, size_t *n);
/* Per-sample squared norms of one trainable parameter's gradient in the last physical batch
 * (B host floats, copied into out), from the norms pass. DP_EINVAL for an unknown or frozen
 * parameter or before any DP backward. */
int dp_dpsgd_param_sq_norms(const dp_dpsgd *dp, const dp_param *p, float *out, int64_t n);
/* Number of layers the last DP backward saw. */
size_t dp_dpsgd_layer_count(const dp_dpsgd *dp);
/* Layer i of them, in the order the backward met them (NULL when out of range). */
const dp_dp_layer *dp_dpsgd_layer(const dp_dpsgd *dp, size_t i);

#endif
