/* test_cuda_dp.c: the CUDA DP kernels and the DP step on CUDA against the CPU.
 * - Each dp op on the same inputs (f32 and bf16; tile edges; rows that are and are not 16-byte
 *   aligned; an odd vocabulary): norms within 1e-4 relative (both accumulate in f32 or better,
 *   in different orders), sorts, gathers and scalings exact.
 * - The same two runs on a small gpt (tied) and llama with every norms method: per-parameter
 *   per-sample norms within 1e-4 (floor: 1e-7 of the sample's norm^2) and the noisy update of one
 *   logical step within 1e-4 relative (the noise is the same bits on both devices).
 * - The bf16 model on CUDA: every method against flat within 1e-2 (see test_step_bf16).
 * - flash_impl = strips (cuBLAS strips of the Gram triangle, blocks of per-sample gradient rows)
 *   against the CPU's and the fused tiles.
 * - DPPROF_DP_BENCH=1 also times the fused tile kernels against cuBLAS doing the same products
 *   (bf16) and prints achieved TFLOP/s and the ratio, then the strips of the same formulation
 *   (their own flops, the ratio to cuBLAS's reference, and the tiles' time over theirs).
 * DPPROF_DP_OPS_ONLY=1 runs the op tests alone (for compute-sanitizer).
 * Skips (exit 77) where no GPU is usable. */
#include "check.h"
#include "test_util.h"
#include "clock.h"
#include "device.h"
#include "dpprof_engine.h"
#include "cpu_dpsgd.h"
#include "dispatch.h"
#include "dpsgd_impl.h"
#include "error.h"
#include "layer_ops.h"
#include "model.h"
#include "ops.h"
#include "tensor.h"

#ifdef DPPROF_HAVE_CUDA
#include "dp_kernels.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

static dp_device *cpu, *gpu;
static uint64_t stream_counter = 300;

static dp_tensor *host_rand(dp_dtype t, int ndim, const int64_t *shape, float std) {
    dp_tensor *x = dp_tensor_new(cpu, t, ndim, shape, DP_CAT_TEMP);
    CHECK_OK(dp_tensor_rand(x, DP_RAND_NORMAL, 0.0f, std, 17, stream_counter++));
    return x;
}

static dp_tensor *to_gpu(const dp_tensor *c) {
    dp_tensor *g = dp_tensor_new(gpu, c->dtype, c->ndim, c->shape, DP_CAT_TEMP);
    CHECK_OK(dp_tensor_copy(g, c));
    return g;
}

/* n floats (or bytes/4 words) from the GPU */
static void from_gpu(void *host, const void *dev_ptr, size_t bytes) {
    CHECK_OK(dp_device_sync(gpu));
    CHECK_OK(gpu->ops->memcpy(gpu, host, dev_ptr, bytes, DP_COPY_D2H));
}

static dp_alloc scratch_allocs[64];
static int n_scratch_allocs;

/* n floats on the GPU, released at the end of the test */
static float *gpu_floats(int64_t n) {
    dp_alloc *a = &scratch_allocs[n_scratch_allocs < 63 ? n_scratch_allocs++ : 63];
    dp_mem_release(gpu->mem, a);
    CHECK_OK(dp_mem_alloc(gpu->mem, (uint64_t)(n > 0 ? n : 1) * 4, DP_CAT_TEMP, a));
    return a->ptr;
}

static void compare(const char *what, const float *got, const float *want, int64_t n, double tol) {
    double scale = 0.0, worst = 0.0;
    for (int64_t k = 0; k < n; k++) scale = fmax(scale, fabs(want[k]));
    for (int64_t k = 0; k < n; k++) worst = fmax(worst, fabs((double)got[k] - want[k]) / fmax(scale, 1e-30));
    if (!(worst <= tol)) {
        fprintf(stderr, "  %s: max difference %.3g of the largest value (tol %g)\n", what, worst, tol);
        check_failures++;
    }
}

static void test_tile_ops(dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p) {
    int64_t sa[3] = {B, T, d}, sg[3] = {B, T, p};
    dp_tensor *a = host_rand(t, 3, sa, 1.0f), *g = host_rand(t, 3, sg, 1.0f);
    dp_tensor *ga = to_gpu(a), *gg = to_gpu(g);
    float *want = malloc((size_t)B * sizeof *want), *got = malloc((size_t)B * sizeof *got);
    float *dout = gpu_floats(B);
    char what[160];
    for (int form = 0; form < 2; form++) {
        for (int64_t i = 0; i < B; i++) want[i] = 0.5f;
        CHECK_OK(gpu->ops->memcpy(gpu, dout, want, (size_t)B * 4, DP_COPY_H2D));
        if (form == 0) {
            CHECK_OK(dpsgd_cpu_ops.gram_tile_sumsq(cpu, t, B, T, d, p, a->data, g->data, 1.5f, want, 1));
            CHECK_OK(DPSGD_DISPATCH(gpu, gram_tile_sumsq, t, B, T, d, p, ga->data, gg->data, 1.5f, dout, 1));
        } else {
            CHECK_OK(dpsgd_cpu_ops.grad_tile_sumsq(cpu, t, B, T, d, p, a->data, g->data, 1.5f, want, 1));
            CHECK_OK(DPSGD_DISPATCH(gpu, grad_tile_sumsq, t, B, T, d, p, ga->data, gg->data, 1.5f, dout, 1));
        }
        from_gpu(got, dout, (size_t)B * 4);
        snprintf(what, sizeof what, "%s %s B=%lld T=%lld d=%lld p=%lld", form ? "grad_tile" : "gram_tile",
                 dp_dtype_name(t), (long long)B, (long long)T, (long long)d, (long long)p);
        compare(what, got, want, B, 1e-4);
    }
    free(want);
    free(got);
    dp_tensor_free(a);
    dp_tensor_free(g);
    dp_tensor_free(ga);
    dp_tensor_free(gg);
}

static void test_tied_rows(dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V) {
    int64_t sa[3] = {B, T, d}, sg[3] = {B, T, V};
    dp_tensor *a = host_rand(t, 3, sa, 1.0f), *g = host_rand(t, 3, sg, 1.0f), *ids = test_ids(cpu, B, T, V, 5);
    dp_tensor *ga = to_gpu(a), *gg = to_gpu(g), *gi = to_gpu(ids);
    float *want = malloc((size_t)(B * T * d) * sizeof *want), *got = malloc((size_t)(B * T * d) * sizeof *got);
    float *dr = gpu_floats(B * T * d);
    CHECK_OK(dpsgd_cpu_ops.tied_rows(cpu, t, B, T, d, V, g->data, ids->data, a->data, want));
    CHECK_OK(DPSGD_DISPATCH(gpu, tied_rows, t, B, T, d, V, gg->data, gi->data, ga->data, dr));
    from_gpu(got, dr, (size_t)(B * T * d) * 4);
    char what[128];
    snprintf(what, sizeof what, "tied_rows %s B=%lld T=%lld d=%lld V=%lld", dp_dtype_name(t), (long long)B,
             (long long)T, (long long)d, (long long)V);
    compare(what, got, want, B * T * d, 1e-4);
    /* and gather_cols, exactly */
    int64_t sh[3] = {B, T, T};
    dp_tensor *h = dp_tensor_new(cpu, t, 3, sh, DP_CAT_TEMP), *gh = dp_tensor_new(gpu, t, 3, sh, DP_CAT_TEMP);
    CHECK_OK(dpsgd_cpu_ops.gather_cols(cpu, t, B, T, V, g->data, ids->data, h->data));
    CHECK_OK(DPSGD_DISPATCH(gpu, gather_cols, t, B, T, V, gg->data, gi->data, gh->data));
    void *back = malloc((size_t)dp_tensor_bytes(h));
    from_gpu(back, gh->data, (size_t)dp_tensor_bytes(h));
    CHECK(memcmp(back, h->data, (size_t)dp_tensor_bytes(h)) == 0);
    free(back);
    free(want);
    free(got);
    dp_tensor *all[] = {a, g, ids, ga, gg, gi, h, gh};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) dp_tensor_free(all[k]);
}

static void test_small_ops(dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V) {
    int64_t sg[3] = {B, T, d}, sgram[3] = {B, T, T}, sn[1] = {B * T};
    dp_tensor *g = host_rand(t, 3, sg, 1.0f), *x = host_rand(t, 3, sg, 1.0f), *gram = host_rand(DP_F32, 3, sgram, 1.0f);
    dp_tensor *rstd = host_rand(DP_F32, 1, sn, 1.0f), *mean = host_rand(DP_F32, 1, sn, 1.0f);
    dp_tensor *ids = test_ids(cpu, B, T, V, 9);
    dp_tensor *gg = to_gpu(g), *gx = to_gpu(x), *ggram = to_gpu(gram), *grstd = to_gpu(rstd), *gmean = to_gpu(mean),
              *gids = to_gpu(ids);
    int64_t nmax = B * V * d > B * d * 2 ? B * V * d : B * d * 2;
    float *want = calloc((size_t)nmax, sizeof *want), *got = calloc((size_t)nmax, sizeof *got);
    float *dout = gpu_floats(nmax);
    char what[96];
    /* batched_dot, mixed dtypes */
    CHECK_OK(dpsgd_cpu_ops.batched_dot(cpu, B, T * d, t, g->data, t, x->data, 2.0f, want, 0));
    CHECK_OK(DPSGD_DISPATCH(gpu, batched_dot, B, T * d, t, gg->data, t, gx->data, 2.0f, dout, 0));
    from_gpu(got, dout, (size_t)B * 4);
    snprintf(what, sizeof what, "batched_dot %s", dp_dtype_name(t));
    compare(what, got, want, B, 1e-4);
    /* gram_dot_masked */
    CHECK_OK(dpsgd_cpu_ops.gram_dot_masked(cpu, B, T, gram->data, ids->data, 1.0f, want, 0));
    CHECK_OK(DPSGD_DISPATCH(gpu, gram_dot_masked, B, T, ggram->data, gids->data, 1.0f, dout, 0));
    from_gpu(got, dout, (size_t)B * 4);
    compare("gram_dot_masked", got, want, B, 1e-4);
    /* token_sum and norm_grads (LayerNorm and RMSNorm) */
    CHECK_OK(dpsgd_cpu_ops.token_sum(cpu, t, B, T, d, g->data, want));
    CHECK_OK(DPSGD_DISPATCH(gpu, token_sum, t, B, T, d, gg->data, dout));
    from_gpu(got, dout, (size_t)(B * d) * 4);
    compare("token_sum", got, want, B * d, 1e-4);
    for (int ln = 0; ln < 2; ln++) {
        CHECK_OK(dpsgd_cpu_ops.norm_grads(cpu, t, B, T, d, x->data, ln ? mean->data : NULL, rstd->data, g->data, want,
                                          want + B * d));
        CHECK_OK(DPSGD_DISPATCH(gpu, norm_grads, t, B, T, d, gx->data, ln ? gmean->data : NULL, grstd->data, gg->data,
                                dout, dout + B * d));
        from_gpu(got, dout, (size_t)(2 * B * d) * 4);
        compare(ln ? "layernorm grads" : "rmsnorm grads", got, want, 2 * B * d, 1e-4);
    }
    /* sort_ids (exact) and grouped_sumsq */
    dp_alloc kc, kg;
    CHECK_OK(dp_mem_alloc(cpu->mem, (uint64_t)(B * T) * 8, DP_CAT_TEMP, &kc));
    CHECK_OK(dp_mem_alloc(gpu->mem, (uint64_t)(B * T) * 8, DP_CAT_TEMP, &kg));
    CHECK_OK(dpsgd_cpu_ops.sort_ids(cpu, B, T, ids->data, kc.ptr));
    CHECK_OK(DPSGD_DISPATCH(gpu, sort_ids, B, T, gids->data, kg.ptr));
    uint64_t *kb = malloc((size_t)(B * T) * 8);
    from_gpu(kb, kg.ptr, (size_t)(B * T) * 8);
    CHECK(memcmp(kb, kc.ptr, (size_t)(B * T) * 8) == 0);
    free(kb);
    CHECK_OK(dpsgd_cpu_ops.grouped_sumsq(cpu, t, B, T, d, g->data, kc.ptr, 1.0f, want, 0));
    CHECK_OK(DPSGD_DISPATCH(gpu, grouped_sumsq, t, B, T, d, gg->data, kg.ptr, 1.0f, dout, 0));
    from_gpu(got, dout, (size_t)B * 4);
    snprintf(what, sizeof what, "grouped_sumsq %s T=%lld", dp_dtype_name(t), (long long)T);
    compare(what, got, want, B, 1e-4);
    dp_mem_release(cpu->mem, &kc);
    dp_mem_release(gpu->mem, &kg);
    /* scatter_rows into zeroed per-sample gradients */
    memset(want, 0, (size_t)(B * V * d) * sizeof *want);
    CHECK_OK(gpu->ops->memcpy(gpu, dout, want, (size_t)(B * V * d) * 4, DP_COPY_H2D));
    CHECK_OK(dpsgd_cpu_ops.scatter_rows(cpu, t, B, T, d, V, g->data, ids->data, 0.5f, want));
    CHECK_OK(DPSGD_DISPATCH(gpu, scatter_rows, t, B, T, d, V, gg->data, gids->data, 0.5f, dout));
    from_gpu(got, dout, (size_t)(B * V * d) * 4);
    compare("scatter_rows", got, want, B * V * d, 1e-5);
    /* scale_samples, exactly */
    float c[64];
    for (int64_t i = 0; i < B && i < 64; i++) c[i] = 0.25f + 0.125f * (float)i;
    float *dc = gpu_floats(B);
    CHECK_OK(gpu->ops->memcpy(gpu, dc, c, (size_t)B * 4, DP_COPY_H2D));
    CHECK_OK(dpsgd_cpu_ops.scale_samples(cpu, t, B, T * d, g->data, c));
    CHECK_OK(DPSGD_DISPATCH(gpu, scale_samples, t, B, T * d, gg->data, dc));
    void *back = malloc((size_t)dp_tensor_bytes(g));
    from_gpu(back, gg->data, (size_t)dp_tensor_bytes(g));
    CHECK(memcmp(back, g->data, (size_t)dp_tensor_bytes(g)) == 0);
    free(back);
    free(want);
    free(got);
    dp_tensor *all[] = {g, x, gram, rstd, mean, ids, gg, gx, ggram, grstd, gmean, gids};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) dp_tensor_free(all[k]);
}

/* ---- the DP step on both devices ------------------------------------------------------------ */

static int checkpoint_setting; /* the models' activation checkpointing (test_checkpoint sets it) */
/* 1: run_step's samples are right-padded (issue 31): sample b has PAD_LEN[b] real positions, then
 * input 0 and target -100 (no loss, no gradient: the CUDA loss kernel's ignore index) */
static int padded_step;
static const int64_t PAD_LEN[5] = {40, 23, 31, 9, 17};

static dp_model *model_on(dp_device *dev, dp_arch arch, dp_dtype dt) {
    dp_model_config cfg;
    dp_model_config_default(&cfg, arch);
    cfg.vocab = 53;
    cfg.hidden = 64;
    cfg.heads = 4;
    cfg.layers = 2;
    cfg.ffn = 128;
    cfg.seq_len = 40;
    cfg.batch = 3;
    cfg.tie_head = arch == DP_ARCH_GPT;
    if (arch == DP_ARCH_LLAMA) { /* grouped-query attention, heads of 64: the tensor-core kernels in bf16 */
        cfg.kv_heads = 2;
        cfg.head_dim = 64;
    }
    cfg.seed = 21;
    cfg.dtype = dt;
    cfg.checkpoint = checkpoint_setting;
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(dev, &cfg, &m));
    return m;
}

/* One logical step of 5 samples (physical 3 + 2): norms of the last physical batch per
 * parameter (sq: n_tp x 2), the update (params after SGD-free "noise / E" in the grads). */
static int run_step(dp_device *dev, dp_arch arch, dp_dtype dt, dpsgd_norms_method norms, dpsgd_clip_method clip,
                    dpsgd_clip_style style, dpsgd_clip_fn fn, float *sq, float *grads, int64_t cap) {
    dp_model *m = model_on(dev, arch, dt);
    if (!m) return 0;
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.norms = norms;
    cfg.clip = clip;
    cfg.clipping = style;
    cfg.clip_fn = fn;
    cfg.max_grad_norm = 0.8;
    cfg.noise_multiplier = 0.6;
    cfg.expected_batch_size = 5;
    cfg.seed = 77;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    dp_tensor *ids = test_ids(cpu, 5, 40, 53, 3), *tg = test_ids(cpu, 5, 40, 53, 4);
    for (int64_t b = 0; padded_step && b < 5; b++)
        for (int64_t j = PAD_LEN[b]; j < 40; j++)
            ((int32_t *)ids->data)[b * 40 + j] = 0, ((int32_t *)tg->data)[b * 40 + j] = DP_IGNORE_INDEX;
    dp_tensor *di = dp_tensor_new(dev, DP_I32, 2, ids->shape, DP_CAT_INPUTS);
    dp_tensor *dtg = dp_tensor_new(dev, DP_I32, 2, tg->shape, DP_CAT_INPUTS);
    CHECK_OK(dp_tensor_copy(di, ids));
    CHECK_OK(dp_tensor_copy(dtg, tg));
    int64_t first = 0, sizes[2] = {3, 2};
    for (int k = 0; k < 2; k++) {
        int64_t shape[2] = {sizes[k], 40};
        dp_tensor in, t;
        CHECK_OK(dp_tensor_view(&in, di, first * 40, 2, shape));
        CHECK_OK(dp_tensor_view(&t, dtg, first * 40, 2, shape));
        float loss;
        CHECK_OK(dpsgd_forward(dp, &in, &t, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        first += sizes[k];
    }
    int n = 0;
    for (int k = 0; k < dp_model_param_count(m); k++) {
        dp_param *p = dp_model_param(m, k);
        if (!p->trainable) continue;
        if (norms != DPSGD_NORMS_NONE) CHECK_OK(dpsgd_param_sq_norms(dp, p, sq + 2 * n, 2));
        n++;
    }
    CHECK_OK(dpsgd_noise(dp));
    int64_t off = 0;
    for (int k = 0; k < dp_model_param_count(m); k++) {
        dp_param *p = dp_model_param(m, k);
        if (!p->trainable) continue;
        if (off + p->grad.numel <= cap) CHECK_OK(dp_tensor_to_host(&p->grad, grads + off, dp_tensor_bytes(&p->grad)));
        off += p->grad.numel;
    }
    dpsgd_free(dp);
    dp_tensor_free(ids);
    dp_tensor_free(tg);
    dp_tensor_free(di);
    dp_tensor_free(dtg);
    dp_model_free(m);
    return n;
}

/* Every method under the flat, per_layer and per_block styles (per_block also with automatic
 * clipping): the per-parameter norms and the update on CUDA equal the CPU's. The block-local
 * styles run the cheaper schedule (each block formed at its end, the head's output gradient
 * adopted, flat's head from its kept output gradient), so these are its CUDA checks. */
static void test_step(dp_arch arch) {
    static const dpsgd_norms_method norms[] = {DPSGD_NORMS_MATERIALIZE, DPSGD_NORMS_GHOST, DPSGD_NORMS_MIXED,
                                               DPSGD_NORMS_FLASH};
    static const dpsgd_clip_method clips[] = {DPSGD_CLIP_BK, DPSGD_CLIP_TWOPASS, DPSGD_CLIP_BK, DPSGD_CLIP_BK};
    static const struct {
        dpsgd_clip_style st;
        dpsgd_clip_fn fn;
    } styles[] = {{DPSGD_STYLE_FLAT, DPSGD_CLIP_FN_ABADI},
                  {DPSGD_STYLE_PER_LAYER, DPSGD_CLIP_FN_ABADI},
                  {DPSGD_STYLE_PER_BLOCK, DPSGD_CLIP_FN_ABADI},
                  {DPSGD_STYLE_PER_BLOCK, DPSGD_CLIP_FN_AUTOMATIC}};
    const int64_t cap = 1 << 20;
    float *sq_c = malloc(1024 * sizeof(float)), *sq_g = malloc(1024 * sizeof(float));
    float *gr_c = malloc(cap * sizeof(float)), *gr_g = malloc(cap * sizeof(float));
    for (size_t s = 0; s < sizeof styles / sizeof *styles; s++)
        for (int k = 0; k < 4; k++) {
            int n = run_step(cpu, arch, DP_F32, norms[k], clips[k], styles[s].st, styles[s].fn, sq_c, gr_c, cap);
            int ng = run_step(gpu, arch, DP_F32, norms[k], clips[k], styles[s].st, styles[s].fn, sq_g, gr_g, cap);
            CHECK(n == ng && n > 0 && 2 * n <= 1024);
            double tot[2] = {0, 0};
            for (int j = 0; j < n; j++) tot[0] += sq_c[2 * j], tot[1] += sq_c[2 * j + 1];
            int bad = 0;
            for (int j = 0; j < 2 * n; j++)
                if (!(fabs(sq_g[j] - sq_c[j]) <= 1e-4 * fmax(sq_c[j], 1e-3 * tot[j & 1]))) bad++;
            char what[128];
            snprintf(what, sizeof what, "%s %s %s/%s%s", arch == DP_ARCH_GPT ? "gpt" : "llama",
                     dpsgd_norms_name(norms[k]), dpsgd_style_name(styles[s].st), dpsgd_clip_fn_name(styles[s].fn),
                     padded_step ? " padded" : "");
            if (bad) {
                fprintf(stderr, "  %s: %d per-parameter norms differ between cuda and cpu\n", what, bad);
                check_failures++;
            }
            char upd[160];
            snprintf(upd, sizeof upd, "%s update (cuda vs cpu)", what);
            dp_model *m = model_on(cpu, arch, DP_F32);
            int64_t nparams = m ? dp_model_num_params(m, 1) : 0;
            dp_model_free(m);
            compare(upd, gr_g, gr_c, nparams < cap ? nparams : cap, 1e-4);
        }
    free(sq_c);
    free(sq_g);
    free(gr_c);
    free(gr_g);
}

/* bf16 on CUDA (the benchmarks' setting): every method against flat on the same device. The
 * forward and backward are the same code for all, so only the norm algorithms differ: bf16
 * operands, f32 accumulation in different orders, and bk's clip factors applied to bf16 output
 * gradients in place (2^-9 rounding): 1e-2 relative on norms and on the update. */
static void test_step_bf16(dp_arch arch) {
    static const dpsgd_norms_method norms[] = {DPSGD_NORMS_GHOST, DPSGD_NORMS_MIXED, DPSGD_NORMS_FLASH,
                                               DPSGD_NORMS_FLASH};
    static const dpsgd_clip_method clips[] = {DPSGD_CLIP_TWOPASS, DPSGD_CLIP_BK, DPSGD_CLIP_BK, DPSGD_CLIP_TWOPASS};
    const int64_t cap = 1 << 20;
    float *sq_r = malloc(1024 * sizeof(float)), *sq_g = malloc(1024 * sizeof(float));
    float *gr_r = malloc(cap * sizeof(float)), *gr_g = malloc(cap * sizeof(float));
    int n = run_step(gpu, arch, DP_BF16, DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_BK, DPSGD_STYLE_FLAT, DPSGD_CLIP_FN_ABADI,
                     sq_r, gr_r, cap);
    dp_model *m = model_on(cpu, arch, DP_F32);
    int64_t nparams = m ? dp_model_num_params(m, 1) : 0;
    dp_model_free(m);
    for (int k = 0; k < 4; k++) {
        int ng =
            run_step(gpu, arch, DP_BF16, norms[k], clips[k], DPSGD_STYLE_FLAT, DPSGD_CLIP_FN_ABADI, sq_g, gr_g, cap);
        CHECK(n == ng && n > 0);
        double tot[2] = {0, 0};
        for (int j = 0; j < n; j++) tot[0] += sq_r[2 * j], tot[1] += sq_r[2 * j + 1];
        int bad = 0;
        for (int j = 0; j < 2 * n; j++)
            if (!(fabs(sq_g[j] - sq_r[j]) <= 1e-2 * fmax(sq_r[j], 1e-3 * tot[j & 1]))) bad++;
        if (bad) {
            fprintf(stderr, "  bf16 %s %s+%s: %d per-parameter norms differ from flat's\n",
                    arch == DP_ARCH_GPT ? "gpt" : "llama", dpsgd_norms_name(norms[k]), dpsgd_clip_name(clips[k]), bad);
            check_failures++;
        }
        char what[96];
        snprintf(what, sizeof what, "bf16 %s %s+%s update (vs flat)", arch == DP_ARCH_GPT ? "gpt" : "llama",
                 dpsgd_norms_name(norms[k]), dpsgd_clip_name(clips[k]));
        compare(what, gr_g, gr_r, nparams < cap ? nparams : cap, 1e-2);
    }
    free(sq_r);
    free(sq_g);
    free(gr_r);
    free(gr_g);
}

/* A trainable linear weight p x d on the CPU: it only names the module charged */
static dp_param weight_param(const char *name, const int64_t shape[2]) {
    dp_param w;
    memset(&w, 0, sizeof w);
    snprintf(w.name, sizeof w.name, "%s", name);
    w.kind = DP_PARAM_LINEAR_W;
    w.trainable = 1;
    w.module = dp_module_intern(name);
    CHECK_OK(dp_tensor_init(&w.value, cpu, DP_F32, 2, shape, DP_CAT_PARAMETERS));
    return w;
}

static dpsgd *strip_wrapper(dp_device *dev, dp_param *w) {
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.norms = DPSGD_NORMS_FLASH;
    cfg.clip = DPSGD_CLIP_TWOPASS;
    cfg.flash_impl = DPSGD_FLASH_STRIPS;
    dp_param *ps[1] = {w};
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new_params(dev, &cfg, ps, 1, 8, &dp));
    return dp;
}

/* flash_impl = strips on both devices, both formulations of the same norms: cuBLAS Gram strips
 * against OpenBLAS's, against the fused Gram tiles, and cuBLAS gradient blocks against both:
 * within 1e-4 relative. */
static void test_strips(dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p) {
    int64_t sa[3] = {B, T, d}, sg[3] = {B, T, p}, sw[2] = {p, d}, sr[1] = {B};
    dp_tensor *a = host_rand(t, 3, sa, 1.0f), *g = host_rand(t, 3, sg, 1.0f);
    dp_tensor *ga = to_gpu(a), *gg = to_gpu(g);
    dp_param w = weight_param("strips", sw);
    dpsgd *dc = strip_wrapper(cpu, &w), *dg = strip_wrapper(gpu, &w);
    dp_tensor *rc = dp_tensor_new(cpu, DP_F32, 1, sr, DP_CAT_NORM_SAMPLES);
    dp_tensor *rg = dp_tensor_new(gpu, DP_F32, 1, sr, DP_CAT_NORM_SAMPLES);
    float *got = malloc((size_t)B * sizeof *got), *tiles = malloc((size_t)B * sizeof *tiles);
    float *grad = malloc((size_t)B * sizeof *grad);
    if (dc && dg && rc && rg) {
        CHECK_OK(dpsgd_strip_linear(dc, &w, a, g, 1.5f, rc, 0));
        CHECK_OK(dpsgd_strip_linear(dg, &w, ga, gg, 1.5f, rg, 0));
        from_gpu(got, rg->data, (size_t)B * 4);
        /* the strips take the scale (they add scale^2 ||.||^2), the tiles the factor alpha itself */
        CHECK_OK(DPSGD_DISPATCH(gpu, gram_tile_sumsq, t, B, T, d, p, ga->data, gg->data, 1.5f * 1.5f, rg->data, 0));
        from_gpu(tiles, rg->data, (size_t)B * 4);
        CHECK_OK(dpsgd_grad_strip_linear(dg, &w, ga, gg, 1.5f, rg, 0));
        from_gpu(grad, rg->data, (size_t)B * 4);
        char what[160];
        snprintf(what, sizeof what, "strips %s B=%lld T=%lld d=%lld p=%lld", dp_dtype_name(t), (long long)B,
                 (long long)T, (long long)d, (long long)p);
        compare(what, got, rc->data, B, 1e-4);
        compare(what, got, tiles, B, 1e-4);
        compare(what, grad, rc->data, B, 1e-4);
    }
    free(got);
    free(tiles);
    free(grad);
    dp_tensor_free(rc);
    dp_tensor_free(rg);
    dpsgd_free(dc);
    dpsgd_free(dg);
    dp_tensor_release(&w.value);
    dp_tensor_free(a);
    dp_tensor_free(g);
    dp_tensor_free(ga);
    dp_tensor_free(gg);
}

/* ---- benchmark (DPPROF_DP_BENCH=1) --------------------------------------------------------- */

static double time_ms(int (*fn)(void *), void *arg, int reps) {
    CHECK_OK(fn(arg)); /* warm-up */
    CHECK_OK(dp_device_sync(gpu));
    double t0 = dp_clock_s();
    for (int r = 0; r < reps; r++) CHECK_OK(fn(arg));
    CHECK_OK(dp_device_sync(gpu));
    return (dp_clock_s() - t0) * 1e3 / reps;
}

typedef struct bench {
    dp_dtype t;
    int64_t B, T, d, p;
    dp_tensor *a, *g, *c, *row;
    dpsgd *dp;
    dp_param *w;
} bench;

static int run_gram(void *x) {
    bench *b = x;
    return DPSGD_DISPATCH(gpu, gram_tile_sumsq, b->t, b->B, b->T, b->d, b->p, b->a->data, b->g->data, 1.0f,
                          b->row->data, 0);
}
static int run_grad(void *x) {
    bench *b = x;
    return DPSGD_DISPATCH(gpu, grad_tile_sumsq, b->t, b->B, b->T, b->d, b->p, b->a->data, b->g->data, 1.0f,
                          b->row->data, 0);
}
/* flash_impl = strips: cuBLAS strips of the Gram triangle or blocks of the gradient, the dot, the
 * workspace */
static int run_gram_strips(void *x) {
    bench *b = x;
    return dpsgd_strip_linear(b->dp, b->w, b->a, b->g, 1.0f, b->row, 0);
}
static int run_grad_strips(void *x) {
    bench *b = x;
    return dpsgd_grad_strip_linear(b->dp, b->w, b->a, b->g, 1.0f, b->row, 0);
}
/* cuBLAS doing the Gram products a a^T and g g^T (full T x T, bf16 or f32 in, f32 out) */
static int run_cublas_gram(void *x) {
    bench *b = x;
    dp_gemm_args ga = {.trans_a = 0,
                       .trans_b = 1,
                       .m = b->T,
                       .n = b->T,
                       .k = b->d,
                       .alpha = 1,
                       .beta = 0,
                       .ab_type = b->t,
                       .c_type = DP_F32,
                       .a = b->a->data,
                       .lda = b->d,
                       .stride_a = b->T * b->d,
                       .b = b->a->data,
                       .ldb = b->d,
                       .stride_b = b->T * b->d,
                       .c = b->c->data,
                       .ldc = b->T,
                       .stride_c = b->T * b->T,
                       .batch = b->B};
    DP_TRY(gpu->ops->gemm(gpu, &ga));
    ga.k = b->p, ga.a = ga.b = b->g->data, ga.lda = ga.ldb = b->p, ga.stride_a = ga.stride_b = b->T * b->p;
    return gpu->ops->gemm(gpu, &ga);
}
/* cuBLAS forming the per-sample gradients g_i^T a_i (p x d, f32 out) */
static int run_cublas_grad(void *x) {
    bench *b = x;
    dp_gemm_args ga = {.trans_a = 1,
                       .trans_b = 0,
                       .m = b->p,
                       .n = b->d,
                       .k = b->T,
                       .alpha = 1,
                       .beta = 0,
                       .ab_type = b->t,
                       .c_type = DP_F32,
                       .a = b->g->data,
                       .lda = b->p,
                       .stride_a = b->T * b->p,
                       .b = b->a->data,
                       .ldb = b->d,
                       .stride_b = b->T * b->d,
                       .c = b->c->data,
                       .ldc = b->d,
                       .stride_c = b->p * b->d,
                       .batch = b->B};
    return gpu->ops->gemm(gpu, &ga);
}

/* Times the tiles (every bf16 variant; f32 has one), cuBLAS on the same products and the strips
 * at the shapes of the gpt2-size model and of bench_dp's batched config (d = 2048, T = 1024,
 * B = 16: qkv, attn.proj, mlp.fc, mlp.proj and the tied head, p = V = 32000), bf16 and f32. */
static void benchmark(void) {
    static const int64_t shapes[][4] = {
        {8, 512, 768, 2304},     {8, 1024, 768, 3072},   {16, 1024, 768, 768},   {8, 1024, 3072, 768},
        {8, 2048, 768, 768},     {16, 2048, 1024, 1024}, {8, 4096, 768, 3072},   {4, 4096, 1024, 4096},
        {16, 1024, 2048, 6144},  {16, 1024, 2048, 2048}, {16, 1024, 2048, 8192}, {16, 1024, 8192, 2048},
        {16, 1024, 2048, 32000},
    };
    const size_t n_shapes = sizeof shapes / sizeof *shapes;
    printf("%-22s %-5s %-10s %3s %9s %9s %10s %9s %7s\n", "B x T x d x p", "dtype", "form", "var", "ms", "TFLOP/s",
           "cuBLAS ms", "TFLOP/s", "ratio");
    for (size_t k = 0; k < 2 * n_shapes; k++) {
        const int64_t *sh = shapes[k % n_shapes];
        const dp_dtype t = k < n_shapes ? DP_BF16 : DP_F32;
        if (t == DP_F32 && sh[2] < 2048) continue; /* f32: the batched config's shapes */
        bench b = {t, sh[0], sh[1], sh[2], sh[3], NULL, NULL, NULL, NULL, NULL, NULL};
        int64_t sa[3] = {b.B, b.T, b.d}, sg[3] = {b.B, b.T, b.p};
        b.a = dp_tensor_new(gpu, t, 3, sa, DP_CAT_TEMP);
        b.g = dp_tensor_new(gpu, t, 3, sg, DP_CAT_TEMP);
        int gram = dpsgd_choose_linear(DPSGD_NORMS_FLASH, b.B, b.T, b.d, b.p, t, NULL, NULL) == DPSGD_FORM_GRAM_TILE;
        int64_t cshape[3] = {b.B, gram ? b.T : b.p, gram ? b.T : b.d};
        b.c = dp_tensor_new(gpu, DP_F32, 3, cshape, DP_CAT_TEMP);
        if (!b.a || !b.g || !b.c) {
            fprintf(stderr, "benchmark: no room for %lld x %lld x %lld x %lld\n", (long long)b.B, (long long)b.T,
                    (long long)b.d, (long long)b.p);
            dp_tensor_free(b.a);
            dp_tensor_free(b.g);
            dp_tensor_free(b.c);
            continue;
        }
        CHECK_OK(dp_tensor_rand(b.a, DP_RAND_NORMAL, 0, 1, 1, 1));
        CHECK_OK(dp_tensor_rand(b.g, DP_RAND_NORMAL, 0, 1, 1, 2));
        int64_t sr[1] = {b.B};
        b.row = dp_tensor_new(gpu, DP_F32, 1, sr, DP_CAT_NORM_SAMPLES);
        double ref = time_ms(gram ? run_cublas_gram : run_cublas_grad, &b, 20);
        int64_t nt = (b.T + 127) / 128;
        /* flops each executes: whole tiles of the lower triangle, or all of g^T a; cuBLAS the full Gram */
        double fl = gram ? 2.0 * b.B * (double)(nt * (nt + 1) / 2) * 128 * 128 * (double)(b.d + b.p)
                         : 2.0 * b.B * (double)b.T * b.p * b.d;
        double fl_ref = gram ? 2.0 * b.B * (double)b.T * b.T * (b.d + b.p) : fl;
        char name[64];
        snprintf(name, sizeof name, "%lldx%lldx%lldx%lld", (long long)b.B, (long long)b.T, (long long)b.d,
                 (long long)b.p);
        const char *tn = dp_dtype_name(t);
        for (int v = 0; v < (t == DP_BF16 ? 4 : 1); v++) {
            if (!gram && v == 3) continue; /* variant 3 is Gram's alone */
#ifdef DPPROF_HAVE_CUDA
            dpk_dp_flash_select(v, v);
#endif
            double ms = time_ms(gram ? run_gram : run_grad, &b, 20);
            printf("%-22s %-5s %-10s %3d %9.3f %9.1f %10.3f %9.1f %7.2f\n", name, tn, gram ? "gram_tile" : "grad_tile",
                   v, ms, fl / ms * 1e-9, ref, fl_ref / ref * 1e-9, (fl / ms) / (fl_ref / ref));
        }
#ifdef DPPROF_HAVE_CUDA
        dpk_dp_flash_select(0, 0);
#endif
        { /* the same norms through strips: ratio to cuBLAS's reference products, and the tiles' time
           * over the strips' */
            int64_t sw[2] = {b.p, b.d}, S, Bc;
            dp_param w = weight_param("bench", sw);
            b.w = &w;
            b.dp = strip_wrapper(gpu, &w);
            double fs = 0.0; /* what the strips execute */
            if (gram) {      /* each strip's diagonal and off-diagonal blocks */
                dpsgd_strip_shape(b.B, b.T, &S, &Bc);
                for (int64_t r0 = 0; r0 < b.T; r0 += S) {
                    int64_t m = b.T - r0 < S ? b.T - r0 : S;
                    fs += 2.0 * b.B * (double)m * (double)(r0 + m) * (double)(b.d + b.p);
                }
            } else { /* the whole per-sample gradient, block by block */
                dpsgd_grad_strip_shape(b.B, b.d, b.p, &S, &Bc);
                fs = fl;
            }
            if (b.dp) {
                double ms = time_ms(gram ? run_gram_strips : run_grad_strips, &b, 20);
                printf("%-22s %-5s %-10s %3s %9.3f %9.1f %10.3f %9.1f %7.2f   (%s=%lld Bc=%lld; tiles' time %.2fx)\n",
                       name, tn, gram ? "gram_strip" : "grad_strip", "-", ms, fs / ms * 1e-9, ref, fl_ref / ref * 1e-9,
                       (fs / ms) / (fl_ref / ref), gram ? "S" : "P", (long long)S, (long long)Bc,
                       time_ms(gram ? run_gram : run_grad, &b, 20) / ms);
            }
            dpsgd_free(b.dp);
            dp_tensor_release(&w.value);
        }
        dp_tensor_free(b.row);
        dp_tensor_free(b.a);
        dp_tensor_free(b.g);
        dp_tensor_free(b.c);
    }
}

/* Activation checkpointing on CUDA (issue 16): with checkpointing every block, every method gives
 * the per-parameter norms and the update it gives without, on the same device. The recomputation
 * runs the same kernels on the same inputs; on the CPU that is the same bits (test_checkpoint.c),
 * here it is held to 1e-6 of the largest value (bitwise only as far as cuBLAS picks the same
 * algorithms for buffers at other addresses). */
static void test_checkpoint(dp_arch arch, dp_dtype dt) {
    static const dpsgd_norms_method norms[] = {DPSGD_NORMS_NONE,  DPSGD_NORMS_MATERIALIZE, DPSGD_NORMS_GHOST,
                                               DPSGD_NORMS_MIXED, DPSGD_NORMS_FLASH,       DPSGD_NORMS_FLASH};
    static const dpsgd_clip_method clips[] = {DPSGD_CLIP_NONE, DPSGD_CLIP_BK,      DPSGD_CLIP_TWOPASS,
                                              DPSGD_CLIP_BK,   DPSGD_CLIP_TWOPASS, DPSGD_CLIP_BK};
    const int64_t cap = 1 << 20;
    float *sq[2], *gr[2];
    for (int c = 0; c < 2; c++) sq[c] = calloc(1024, sizeof(float)), gr[c] = malloc(cap * sizeof(float));
    dp_model *m = model_on(cpu, arch, DP_F32);
    int64_t nparams = m ? dp_model_num_params(m, 1) : 0;
    dp_model_free(m);
    for (int k = 0; k < 6; k++) {
        int n[2];
        for (int c = 0; c < 2; c++) {
            checkpoint_setting = c; /* off, then every block */
            n[c] =
                run_step(gpu, arch, dt, norms[k], clips[k], DPSGD_STYLE_FLAT, DPSGD_CLIP_FN_ABADI, sq[c], gr[c], cap);
        }
        checkpoint_setting = 0;
        CHECK(n[0] == n[1]);
        char what[128];
        snprintf(what, sizeof what, "%s %s %s+%s: norms with checkpointing (cuda)",
                 arch == DP_ARCH_GPT ? "gpt" : "llama", dp_dtype_name(dt), dpsgd_norms_name(norms[k]),
                 dpsgd_clip_name(clips[k]));
        if (norms[k] != DPSGD_NORMS_NONE) compare(what, sq[1], sq[0], 2 * n[0], 1e-6);
        snprintf(what, sizeof what, "%s %s %s+%s: update with checkpointing (cuda)",
                 arch == DP_ARCH_GPT ? "gpt" : "llama", dp_dtype_name(dt), dpsgd_norms_name(norms[k]),
                 dpsgd_clip_name(clips[k]));
        compare(what, gr[1], gr[0], nparams < cap ? nparams : cap, 1e-6);
    }
    for (int c = 0; c < 2; c++) free(sq[c]), free(gr[c]);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    if (!test_cuda_or_skip()) return 77;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK_OK(dp_device_get(DP_DEV_CUDA, &gpu));
    /* tile kernels: 16-byte-aligned rows (d, p multiples of 8) and not, tile edges, both dtypes,
     * every bf16 configuration */
    for (int v = 0; v < 4; v++) {
#ifdef DPPROF_HAVE_CUDA
        dpk_dp_flash_select(v, v);
#endif
        test_tile_ops(DP_BF16, 3, 200, 136, 264);
        test_tile_ops(DP_BF16, 2, 129, 130, 57);
        test_tile_ops(DP_BF16, 1, 7, 24, 16);
        test_tile_ops(DP_BF16, 2, 300, 64, 1001); /* an odd "vocabulary" */
        test_tied_rows(DP_BF16, 2, 150, 72, 101);
        test_tied_rows(DP_BF16, 1, 9, 16, 7);
    }
#ifdef DPPROF_HAVE_CUDA
    dpk_dp_flash_select(0, 0);
#endif
    test_tile_ops(DP_F32, 3, 200, 136, 264);
    test_tile_ops(DP_F32, 2, 129, 130, 57);
    test_tied_rows(DP_F32, 2, 150, 70, 101);
    test_strips(DP_BF16, 3, 600, 136, 264); /* three strips, the last short */
    test_strips(DP_F32, 2, 300, 72, 40);
    test_strips(DP_BF16, 5, 4096, 24, 16);   /* samples in passes of 4 */
    test_strips(DP_BF16, 2, 33, 4096, 4100); /* gradient blocks of 2048 + 2048 + 4 rows */
    for (int t = 0; t < 2; t++) {
        test_small_ops(t ? DP_BF16 : DP_F32, 3, 64, 40, 11);
        test_small_ops(t ? DP_BF16 : DP_F32, 2, 5000, 24, 13); /* global-memory sort, many segments */
    }
    const char *ops_only = getenv("DPPROF_DP_OPS_ONLY"); /* for compute-sanitizer runs */
    if (!(ops_only && *ops_only == '1')) {
        test_step(DP_ARCH_GPT);
        test_step(DP_ARCH_LLAMA);
        padded_step = 1; /* the same step on right-padded samples: CUDA against the CPU */
        test_step(DP_ARCH_GPT);
        test_step(DP_ARCH_LLAMA);
        padded_step = 0;
        test_step_bf16(DP_ARCH_GPT);
        test_step_bf16(DP_ARCH_LLAMA);
        for (int t = 0; t < 2; t++) {
            test_checkpoint(DP_ARCH_GPT, t ? DP_BF16 : DP_F32);
            test_checkpoint(DP_ARCH_LLAMA, t ? DP_BF16 : DP_F32);
        }
    }
    const char *bench_env = getenv("DPPROF_DP_BENCH");
    if (bench_env && *bench_env == '1') benchmark();
    for (int k = 0; k < n_scratch_allocs; k++) dp_mem_release(gpu->mem, &scratch_allocs[k]);
    dp_engine_shutdown();
    return check_report("test_cuda_dp");
}
