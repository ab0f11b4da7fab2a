/* dpsgd_impl.h: the DP-SGD wrapper's internals, shared by engine/dp/dpsgd_*.c (and the unit tests, which
 * drive the layer hooks without a model). Not part of the public API: see dpsgd.h. */
#ifndef DPSGD_IMPL_H
#define DPSGD_IMPL_H

#include "dpsgd.h"
#include "dpsgd_ops.h"
#include "scope.h"

/* What bk keeps for one parameter until the clip factors are known. */
typedef enum {
    DPSGD_BOOK_PER_SAMPLE, /* per-sample gradients psg (B x numel f32): grad += c^T psg */
    DPSGD_BOOK_LINEAR,     /* output gradient G (B x T x p) and the retained input A (B x T x d):
                            * grad += scale (c (.) G)^T A */
    DPSGD_BOOK_EMBEDDING   /* output gradient G (B x T x d) of the embedding sum and its ids:
                            * dwte[ids] += c (.) G, dwpe[t] += sum_i c_i G_i[t] */
} dpsgd_book_kind;

typedef struct dpsgd_book {
    dpsgd_book_kind kind;
    dp_param *param;            /* PER_SAMPLE, LINEAR: the parameter; EMBEDDING: wte (may be NULL) */
    dp_param *wpe;              /* EMBEDDING: the position table (may be NULL) */
    dp_tensor psg;              /* PER_SAMPLE: `per_sample_grads` */
    dp_tensor out_grad;         /* LINEAR, EMBEDDING: G (a copy, or adopted from the backward), `output_grads` */
    dp_tensor ids;              /* EMBEDDING: a copy of the ids, `output_grads` */
    dp_tensor input;            /* LINEAR: a view of the retained activation A (owns nothing); empty between
                                 * the backward and the clip when A was recomputed (block >= 0) */
    const void *source;         /* EMBEDDING: G's data pointer in the hook, to share one copy */
    float scale;                /* LINEAR: LoRA's alpha / r, else 1 */
    int adopting;               /* LINEAR: out_grad is a view of the backward's G until it hands G over */
    const dp_tensor *input_src; /* LINEAR: the model's tensor A (linears that share an input share it) */
    int input_scaled;           /* LINEAR: the clip scaled A's rows by c, so G stays as it is */
    int block;                  /* LINEAR: the checkpointed block that recomputed A, which the clip recomputes
                                 * again (dp_model_recompute_block); -1 when A is retained */
    int formed;                 /* its clipped gradient is formed (early, at its block's end): nothing left */
    int owns_input;             /* LINEAR, early forming: input is a copy of A (a head's), released with it */
    int64_t pblock;             /* fsdp's clip: the block the parameter lies in, -1 outside the blocks (set
                                 * once a clip, so its per-block stages do not search the parameters) */
} dpsgd_book;

/* Between a tied head's hook and its embedding's: what the cross term needs. */
typedef struct dpsgd_tied_pending {
    dp_param *wte;          /* NULL when nothing is pending */
    dp_tensor psg;          /* materialized: wte's per-sample gradients B x V x d (head part) */
    dp_tensor rows;         /* twopass: r[i,u,:] = (g_head,i)[ids[i,u], :], B x T x d f32 (bk forms
                             * them in the embedding's hook from the head's book instead) */
    dpsgd_formulation form; /* the head's formulation (GHOST or a flash tile) */
} dpsgd_tied_pending;

/* A strategy's hooks (dpsgd_strategy_ops.c): what the step calls where the strategies differ, chosen
 * once by dpsgd_set_distributed (dpsgd->strat; one process's until then). A NULL entry does nothing. */
typedef struct dpsgd_strategy_ops {
    dpsgd_strategy kind;
    int (*setup)(dpsgd *dp);  /* after dp->comm is set: cut, mark the slices, install providers */
    void (*clear)(dpsgd *dp); /* forgets the strategy's state (the wrapper is freed, or distributed again) */
    /* the backward that accumulates weight gradients (vanilla's; twopass's second) */
    int (*backward)(dpsgd *dp, const dp_backward_opts *o);
    /* the step's plan once this rank took its slice: fsdp pads every rank to the most batches */
    void (*plan)(dpsgd *dp, dpsgd_step_plan *plan);
    int (*reduce)(dpsgd *dp, int k); /* trainable parameter k's gradient summed across the ranks */
    int (*after_step)(dpsgd *dp);    /* after the optimizer (dpsgd_gather_params) */
    int (*unshard)(dpsgd *dp);       /* the end of training: the model whole again */
} dpsgd_strategy_ops;

/* fsdp: how one model parameter is held between the passes. */
typedef struct dpsgd_fsdp_held {
    int64_t block; /* the block (or pseudo-block: DP_MODEL_EMBEDDINGS, DP_MODEL_HEAD) whose passes gather it */
    int compute;   /* gathered into dp_param.compute (bf16) from its f32 master part: a bf16 model's GEMM weight */
    int parted;    /* 1 while its part is in dp_param.part (0 once gathered back whole) */
} dpsgd_fsdp_held;

struct dpsgd {
    dp_model *model; /* NULL in unit tests that drive the hooks directly */
    dp_device *dev;
    dpsgd_config cfg;
    int64_t model_batch; /* the model's batch: physical batches are at most this */

    int n_params; /* trainable parameters, in the model's order */
    dp_param **params;
    int64_t *offsets; /* element offset of each in the concatenation (noise) */

    /* the current physical batch */
    const dp_tensor *inputs;         /* ids of the last forward (the caller keeps them alive) */
    uint64_t forward_id;             /* the model's id of that forward (dp_model_forward_id) */
    int64_t batch, seq_len;          /* B, T of the last forward */
    int64_t logical_size;            /* of the current logical step (0 = unknown: use B) */
    dp_comm *comm;                   /* the ranks' world (NULL: one process) */
    dp_comm plan_comm;               /* dpsgd_distribute on the plan device: the simulated world comm is */
    const dpsgd_strategy_ops *strat; /* its hooks: dpsgd_strategy_table(strategy) */
    int64_t *fsdp_block;             /* fsdp: per trainable parameter its block, or outside the blocks its pseudo-block
                                      * (DP_MODEL_EMBEDDINGS, DP_MODEL_HEAD) (NULL otherwise) */
    dp_tensor *fsdp_acc;             /* fsdp: per trainable parameter the step's reduce-scattered gradient part, summed
                                      * over the physical batches whose backward gave a block's gradient whole */
    int fsdp_grads;                  /* fsdp: 1 during a backward that accumulates weight gradients */
    int fsdp_rc; /* fsdp: the first failure of a reduce-scatter in a release (reported after the backward) */
    /* fsdp: per model parameter (trainable or frozen) how it is held: its block and gather (NULL otherwise) */
    dpsgd_fsdp_held *fsdp_held;
    int padding;              /* the current physical batch is a padding one (dpsgd_forward_padding) */
    dp_tensor pad_in, pad_tg; /* its 1 x 1 inputs and targets, `inputs`, until its clip */
    int reduced;              /* the step's gradients were summed across the ranks */
    int phase;                /* 0 idle, 1 forward done, 2 backward done */

    /* per trainable parameter: sample squared norms of the current physical batch */
    dp_tensor sq_norms; /* n_params x B f32, `norm_samples`, from backward to clip: one
                         * allocation and one copy to the host per physical batch */
    dp_tensor *sq_rows; /* row k of sq_norms (views, valid while it is allocated) */
    int *sq_written;    /* 1 once a hook wrote the row in this backward */
    float *host_sq;     /* n_params x B host copy of the last batch's rows (none on plan: zeros) */
    int64_t host_batch; /* B of host_sq (0 = none yet) */

    dpsgd_book *books;
    int n_books, cap_books;
    dpsgd_tied_pending tied;
    /* the model's bracket of linears sharing one input (shared_input): that input, and its ghost
     * Gram a_i a_i^T (B x T x T f32, `temp`) once a ghost hook formed it, freed at the bracket's end */
    struct {
        const dp_tensor *src;
        dp_tensor gram;
    } shared;
    dp_tensor clip_dev;        /* n_groups x B clip factors on the device (bk), `norm_samples` */
    const float *form_factors; /* twopass with groups: the host factors while the second backward forms */

    /* adaptive clipping (dpsgd_adaptive.c): the current step's counts and the steps so far */
    int64_t ada_unclipped, ada_samples;
    dpsgd_bound_step *ada_history;
    size_t n_ada, cap_ada;

    /* clipping groups (dpsgd_groups.c): group_of[k] of trainable parameter k, in 0..n_groups-1 */
    int n_groups;
    int *group_of;
    double *group_bound;
    char **group_name;
    /* early forming (dpsgd_early.c; dpsgd_groups.c sets them with the groups): group_block[g] the
     * block whose backward's end completes group
     * g (its tensors all in it), -1 for a group formed at the clip; early_possible when bk may form
     * block-local groups at their block's end (every group block-local or outside the blocks);
     * early for the current backward (not under fsdp) */
    int64_t *group_block;
    int early_possible, early;

    dpsgd_layer_info *layers; /* as the last backward saw them */
    size_t n_layers, cap_layers;

    /* per-sample figures of the current logical step (group_norms: n_groups a sample) */
    float *norms, *factors, *group_norms;
    size_t n_samples, cap_samples;
    int step_open; /* 0 after noise: the next clip starts a new list */

    int64_t steps; /* logical steps taken */
    int64_t plans; /* next_step calls (keys the sampling stream) */
};

/* Builds a wrapper over explicit parameters (the trainable ones are kept, in order) on dev, with
 * no model: dpsgd_new uses it, and unit tests drive the hooks with it. */
int dpsgd_new_params(dp_device *dev, const dpsgd_config *cfg, dp_param **params, int n_params, int64_t model_batch,
                     dpsgd **out);
/* Starts a norm pass: frees what the last batch left, clears the layer list. */
int dpsgd_begin_norms(dpsgd *dp);
/* Ends a norm pass: DP_EINTERNAL when a tied head's embedding never came, or a kept output
 * gradient was never handed over. */
int dpsgd_end_norms(dpsgd *dp);

/* ---- dpsgd_method.c ---- */
/* Flops of flash's Gram-tile formulation of a linear's norms, B samples of T tokens, widths d
 * in and p out: B T (T+1) (d+p) for the lower triangles of a a^T and g g^T, B T (T+1) for their
 * product; the cost model and the ledger both count this. */
double dpsgd_gram_tile_flops(int64_t B, int64_t T, int64_t d, int64_t p);
/* Flops of forming and squaring the per-sample gradient g_i^T a_i (materialize, and flash's
 * gradient tiles): 2 B T p d + 2 B p d. */
double dpsgd_grad_tile_flops(int64_t B, int64_t T, int64_t d, int64_t p);
/* The kind string of a linear's weight ("linear", "head", "tied_head", "lora_a", "lora_b"). */
const char *dpsgd_linear_kind(const dp_param *w);

/* ---- dpsgd_state.c: the per-batch state; helpers every file may call, which call back
 * into no other dpsgd_*.c ---- */
/* The block of parameter p from its Hugging Face name ("model.layers.3.", "transformer.h.3."), or
 * outside the blocks its pseudo-block: DP_MODEL_EMBEDDINGS (token embedding, positions; a tied
 * head's table), DP_MODEL_HEAD (final norm, lm_head). fsdp gathers by it, clipping groups by it. */
int64_t dpsgd_param_block(const dp_param *p);
/* Index of trainable parameter p in dp->params, or -1. */
int dpsgd_param_index(const dpsgd *dp, const dp_param *p);
/* The B-float squared-norm row of trainable parameter p (`norm_samples`, p's module), allocated
 * on first use in this backward; *accumulate says whether a hook already wrote it (add) or not
 * (write). Marks it written. */
int dpsgd_norm_row(dpsgd *dp, const dp_param *p, dp_tensor **row, int *accumulate);
/* Appends a layer record for the stats. */
int dpsgd_record_layer(dpsgd *dp, uint32_t module, const char *kind, dpsgd_formulation f);
/* Appends a book entry (zeroed) and returns it, or NULL (DP_EOOM set). */
dpsgd_book *dpsgd_book_add(dpsgd *dp, dpsgd_book_kind kind);
/* Makes sure p's gradient exists (zeros, `gradients`, p's module), as a backward would. */
int dpsgd_ensure_grad(dpsgd *dp, dp_param *p);
/* Releases every book, the tied pending state and the norm rows. */
void dpsgd_release_batch_state(dpsgd *dp);

/* ---- dpsgd_hooks.c ---- */
/* The hooks that compute per-sample norms (and keep the books) for dp's method. */
dp_layer_hooks dpsgd_norm_hooks(dpsgd *dp);

/* ---- per-layer formulas (dpsgd_materialize.c, dpsgd_ghost.c, dpsgd_flash.c) ---- */
/* psg[i] = scale g_i^T a_i (B x p x d f32, allocated under `per_sample_grads`, w's module). */
int dpsgd_materialize_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                             dp_tensor *psg);
/* row[i] (+)= ||scale g_i^T a_i||^2 from each sample's gradient materialized in turn (one p x d f32
 * under `per_sample_grads`, w's module, freed on return): materialize's norms without B of them. */
int dpsgd_materialize_norms(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                            dp_tensor *row, int accumulate);
/* row[i] (+)= scale^2 <a_i a_i^T, g_i g_i^T> through two T x T Gram matrices (`temp`). */
int dpsgd_ghost_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                       dp_tensor *row, int accumulate);
/* row[i] (+)= ||g_i||^2 of an embedding through g g^T (`temp`) and the token-equality mask. */
int dpsgd_ghost_embedding(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *G, dp_tensor *row,
                          int accumulate);
/* rows[i,u,:] = (g_head,i^T a_i)[ids[i,u], :] through the gathered T x T matrix (`temp`). */
int dpsgd_ghost_tied_rows(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *A, const dp_tensor *G,
                          dp_tensor *rows);
/* row[i] (+)= scale^2 ||g_i^T a_i||^2 with a fused tile kernel (form: GRAM_TILE or GRAD_TILE). */
int dpsgd_flash_linear(dpsgd *dp, dpsgd_formulation form, const dp_tensor *A, const dp_tensor *G, float scale,
                       dp_tensor *row, int accumulate);
/* row[i] (+)= ||g_i||^2 of an embedding, equal ids grouped per sample (sort keys in `temp`). */
int dpsgd_grouped_embedding(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *G, dp_tensor *row,
                            int accumulate);
/* rows[i,u,:] = (g_head,i^T a_i)[ids[i,u], :] with the fused gathered-GEMM kernel (rows: B x T x d
 * f32 under `per_sample_grads`, wte's module: they are rows of the per-sample head gradient). */
int dpsgd_flash_tied_rows(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *A, const dp_tensor *G,
                          dp_tensor *rows);

/* ---- dpsgd_strips.c ---- */
#define DPSGD_STRIP_ROWS 256 /* strip height S, at most */
#define DPSGD_STRIP_WORKSPACE                                                                                          \
    (32ull << 20) /* bytes of the strip buffers, at most (but one                                                      \
                   * sample's pair at S = 16 when T is huge, one                                                       \
                   * sample's row when d is) */
/* The strip height *S and the samples per pass *Bc for B samples of T tokens. */
void dpsgd_strip_shape(int64_t B, int64_t T, int64_t *S, int64_t *Bc);
/* row[i] (+)= scale^2 ||g_i^T a_i||^2 through strips of the Gram triangle (workspace in `temp`). */
int dpsgd_strip_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                       dp_tensor *row, int accumulate);
/* The rows *P of the per-sample gradient per block and the samples per pass *Bc for B samples of
 * a p x d gradient. */
void dpsgd_grad_strip_shape(int64_t B, int64_t d, int64_t p, int64_t *P, int64_t *Bc);
/* row[i] (+)= scale^2 ||g_i^T a_i||^2 through blocks of P rows of the per-sample gradient
 * (workspace in `temp`). */
int dpsgd_grad_strip_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                            dp_tensor *row, int accumulate);

/* ---- dpsgd_tied.c ---- */
/* rows of the tied head's per-sample gradient at the ids, by formulation form, times scale. */
int dpsgd_tied_rows(dpsgd *dp, dpsgd_formulation form, const dp_param *wte, const dp_tensor *ids, const dp_tensor *A,
                    const dp_tensor *G, float scale, dp_tensor *rows);
/* row[i] += 2 <G_emb[i], r[i]>: from the rows the head's hook left (twopass), or (bk) formed here
 * one sample at a time from the head's book. */
int dpsgd_tied_cross(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *G, dp_tensor *row);

/* ---- dpsgd_groups.c ---- */
/* The clipping groups of dp's style with no specs (dpsgd_new): flat, per_layer, per_block; the
 * groups style is left with none, to be given. */
int dpsgd_groups_default(dpsgd *dp);
/* Frees the groups. */
void dpsgd_groups_free(dpsgd *dp);
/* Factor c of a group of bound C for sample norm n under dp's clip function. */
double dpsgd_group_factor(const dpsgd *dp, double C, double n);

/* ---- dpsgd_adaptive.c ---- */
/* The checks of cfg's adaptive clipping (DP_EINVAL naming the key), DP_OK when it is off. */
int dpsgd_adaptive_check(const dpsgd_config *cfg);
/* Counts one clipped sample of norm n against the current bound C (adaptive only). */
void dpsgd_adaptive_observe(dpsgd *dp, double C, double n);
/* After a logical step's noise: the bound's update (the counts summed across the ranks), recorded. */
int dpsgd_adaptive_step(dpsgd *dp);

/* Whether the norm pass keeps books (what the clipped gradient is formed from): bk, or twopass
 * when its groups are block-local (formed at each block's end, no second backward). */
static inline int dpsgd_keeps_books(const dpsgd *dp) { return dp->cfg.clip == DPSGD_CLIP_BK || dp->early; }

/* ---- dpsgd_early.c ---- */
/* The backward hook at block `layer`'s end: the groups it completes get their factors and their
 * books are formed and freed (early forming only). */
int dpsgd_early_block_end(void *ctx, dp_model *m, int64_t layer);

/* ---- dpsgd_clip.c ---- */
/* Forms the books of one stage (block: -1 the live inputs, else that recomputed block) whose
 * books' pblock is pblock (DPSGD_ANY_BLOCK: all), with factors on the host (n_groups x B) and in
 * dp->clip_dev; each formed book is freed and marked formed. */
#define DPSGD_ANY_BLOCK (-1000) /* not a block nor a pseudo-block (DP_MODEL_EMBEDDINGS, DP_MODEL_HEAD) */
int dpsgd_clip_stage(dpsgd *dp, const float *factors, int block, int64_t pblock);
/* Clip factors of the current physical batch from the norm rows (host), appended to the stats:
 * factors is n_groups x B, row g group g's (one row for flat). */
int dpsgd_compute_clip_factors(dpsgd *dp, float *factors);
/* Forms the clipped sum from the books (bk) with the n_groups x B factors and releases them. */
int dpsgd_clip_books(dpsgd *dp, const float *factors);
/* grad (n floats) += c^T x, x of B x n (B in-order AXPYs with c_host for small B in f32, else one
 * GEMM reading c on the device); op names it in the ledger. */
int dpsgd_weighted_sum(dpsgd *dp, dp_tensor *grad, const dp_tensor *c, const float *c_host, const dp_tensor *x,
                       int64_t B, int64_t n, const char *op);
/* Scales x's B sample rows (x is B x ...) in place by the device factors c. */
int dpsgd_scale_samples(dpsgd *dp, dp_tensor *x, const dp_tensor *c);
/* The factors of p's clipping group (p NULL: group 0): c a view of its row of dp->clip_dev, *host
 * its row of the host factors (n_groups x B). */
int dpsgd_group_factors(dpsgd *dp, const dp_param *p, const float *factors, dp_tensor *c, const float **host);

/* ---- dpsgd_sample_grads.c ---- */
/* A bias's per-sample gradients from its output gradient G (B x T x p): *out B x p f32 under cat
 * with b's module (released on failure). */
int dpsgd_bias_grads(dpsgd *dp, const dp_param *b, const dp_tensor *G, dp_category cat, dp_tensor *out);
/* A norm layer's per-sample gradients: *dw its gain's (B x d f32, cat_w, owner's module: the gain,
 * or the bias when the gain does not train and dw is only the kernel's scratch), *db its bias's when
 * b is given (cat_b, b's module; empty otherwise). Both released on failure. */
int dpsgd_norm_layer_grads(dpsgd *dp, const dp_param *owner, const dp_param *b, const dp_tensor *x,
                           const dp_tensor *mean, const dp_tensor *rstd, const dp_tensor *G, dp_category cat_w,
                           dp_category cat_b, dp_tensor *dw, dp_tensor *db);

/* ---- dpsgd_form.c ---- */
/* The hooks of twopass's second backward under several clipping groups: each layer's clipped
 * gradient formed as its backward reaches it, from its input and output gradient with its
 * group's factors (dp->form_factors, uploaded to dp->clip_dev), nothing kept. */
dp_layer_hooks dpsgd_form_hooks(dpsgd *dp);

/* ---- dpsgd_noise.c ---- */
/* grad += N(0, (sigma ||C||_2)^2) for every trainable parameter, then grad /= expected batch size. */
int dpsgd_add_noise(dpsgd *dp);
/* The Philox stream of logical step `step`'s noise (seed is the configured one). */
uint64_t dpsgd_noise_stream(int64_t step);

/* ---- dpsgd_sampling.c ---- */
/* ---- dpsgd_strategy_ops.c: each strategy's hooks ---- */
/* The hooks of strategy s (one process's for DPSGD_STRATEGY_NONE; NULL for an unknown s). */
const dpsgd_strategy_ops *dpsgd_strategy_table(dpsgd_strategy s);

/* ---- dpsgd_shard.c: zero2's parts of each trainable tensor ---- */
/* Marks every trainable parameter with this rank's slice (dp_param.sharded, shard_lo, shard_n). */
int dpsgd_shard_setup(dpsgd *dp);
/* Forgets the slices (the wrapper is freed: the model trains whole again). */
void dpsgd_shard_clear(dpsgd *dp);
/* Reduce-scatters p's full gradient into this rank's part, which replaces it as p->grad. */
int dpsgd_shard_reduce(dpsgd *dp, dp_param *p);
/* All-gathers every rank's updated slice into p's full value; releases p's gradient part. */
int dpsgd_shard_gather(dpsgd *dp, dp_param *p);
/* All-gathers every rank's part of p (part: this rank's, ceil(n / N) elements) into `into` (p's n
 * elements, part's dtype): directly where N divides n, else through a padded copy under `temp`. */
int dpsgd_gather_parts(dpsgd *dp, const dp_param *p, const dp_tensor *part, dp_tensor *into);

/* ---- dpsgd_fsdp.c: fsdp's parts and the block weights provider ---- */
/* Cuts every tensor, trainable or frozen, as zero2, keeps its part alone (dp_param.part: f32 masters,
 * the frozen base in its own dtype) and installs the provider that gathers a block (or pseudo-block)
 * before each pass that reads it. */
int dpsgd_fsdp_setup(dpsgd *dp);
/* All-gathers p's part into the buffer a pass reads, under `parameters` with p's module: the bf16
 * compute copy (compute = 1: the f32 master part cast to bf16 first, so bf16 goes on the wire), or
 * value in its own dtype. Nothing is left allocated on failure. */
int dpsgd_fsdp_gather(dpsgd *dp, dp_param *p, int compute);
/* Frees what dpsgd_fsdp_gather allocated (the shape and dtype stay). */
void dpsgd_fsdp_drop(dp_param *p, int compute);
/* After the optimizer: the gradient parts released (nothing is gathered: the next pass gathers). */
int dpsgd_fsdp_after_step(dpsgd *dp);
/* The backward that accumulates weight gradients (vanilla's; twopass's second), with every block's
 * gradient (and the final norm's and head's) reduce-scattered into dp->fsdp_acc right after the pass
 * over it, the embeddings' after the backward; plain backward otherwise. */
int dpsgd_fsdp_backward(dpsgd *dp, const dp_backward_opts *o);
/* Gathers block `layer` and frees it again, computing nothing: the gather a rank makes to pair
 * the others' where it has no recomputation of that block to make (bk's clip). */
int dpsgd_fsdp_gather_only(dpsgd *dp, int64_t layer);
/* Block `layer`'s gradients (made zero where this batch gave none) reduce-scattered into their parts
 * and added to the step's (dp->fsdp_acc): bk's clip, as soon as the block's books are formed. */
int dpsgd_fsdp_reduce_block(dpsgd *dp, int64_t layer);
/* Moves the step's summed parts into the gradients (the blocks reduce-scattered per block); 1 when k was. */
int dpsgd_fsdp_take_part(dpsgd *dp, int k);
/* Gathers every parameter whole again and removes the provider (the end of training). */
int dpsgd_fsdp_unshard(dpsgd *dp);
/* Forgets the provider and fsdp's state (the wrapper is freed, or distributed again); the parts
 * stay the model's, all it holds of those tensors (a second fsdp distribute to this rank takes them). */
void dpsgd_fsdp_clear(dpsgd *dp);

/* Fills in the derived sizes (expected batch size, sample rate) and checks them. */
int dpsgd_sampling_setup(dpsgd_config *cfg, int64_t model_batch);
/* The plan of logical step number `k` (Poisson draw or the fixed size). */
int dpsgd_sampling_plan(const dpsgd_config *cfg, int64_t k, dpsgd_step_plan *out);
/* The samples of logical step k (0-based indices into the data set, increasing under Poisson);
 * writes at most cap of them to out (NULL when cap is 0: a count) and returns how many there are. */
int64_t dpsgd_sampling_members(const dpsgd_config *cfg, int64_t k, int64_t *out, int64_t cap);
/* Narrows plan to rank's slice of its logical batch (samples n r / N up to n (r+1) / N) and the
 * physical batches of that slice (at most max_physical each, split as dpsgd_split splits). */
int dpsgd_sampling_slice(dpsgd_step_plan *plan, int rank, int world_size, int64_t max_physical);
/* Sets plan->n_padding (plan sliced for its rank) to the physical batches the rank whose slice
 * makes the most runs beyond this rank's: every rank's slice is known from the logical size. */
void dpsgd_sampling_pad(dpsgd_step_plan *plan, int world_size, int64_t max_physical);

#endif
