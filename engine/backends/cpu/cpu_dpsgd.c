/* cpu_dpsgd.c: the CPU implementation of the DP kernels (dpsgd_ops.h), the specification the CUDA
 * kernels match. Loops in OpenMP over a partition fixed by the sizes alone; per-sample partial
 * sums are doubles added in a fixed order, so results do not depend on the thread count. The
 * fused "flash" entries walk DPSGD_FLASH_TILE tiles across the team, each an OpenBLAS GEMM
 * (single-threaded inside the team) into a tile-sized per-thread buffer (bf16 operands widened
 * tile by tile), and keep one partial per (sample, tile). */
#include "cpu_dpsgd.h"

#include "device.h"
#include "cpu_sums.h"
#include "cpu_util.h"
#include "error.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#define PAR_MIN 32768  /* below this many elements of work a loop runs on one thread */
#define DOT_CHUNK 4096 /* elements per partial sum in batched_dot */

/* n elements, at least 1 (malloc(0) may return NULL) */
static size_t nz(int64_t n) { return n > 0 ? (size_t)n : 1; }

static int host_oom(const char *op) { return dp_error_set(DP_EOOM, "%s: out of host memory for partial sums", op); }

/* out[i] = (accumulate ? out[i] : 0) + alpha * (partials[i*n_parts] + ... in order) */
static void finish_partials(int64_t B, int64_t n_parts, const double *partials, float alpha, float *out,
                            int accumulate) {
    for (int64_t i = 0; i < B; i++) {
        double s = 0.0;
        for (int64_t k = 0; k < n_parts; k++) s += partials[i * n_parts + k];
        double v = (double)alpha * s;
        out[i] = (float)(accumulate ? (double)out[i] + v : v);
    }
}

static int cpu_batched_dot(dp_device *dev, int64_t B, int64_t n, dp_dtype tx, const void *x, dp_dtype ty, const void *y,
                           float alpha, float *out, int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(tx, "batched_dot"));
    DP_TRY(dp_cpu_need_float(ty, "batched_dot"));
    int64_t parts = n ? (n + DOT_CHUNK - 1) / DOT_CHUNK : 1;
    double *partial = malloc((size_t)(B * parts) * sizeof *partial);
    if (!partial) return host_oom("batched_dot");
#pragma omp parallel for schedule(static) if (B * n > PAR_MIN)
    for (int64_t item = 0; item < B * parts; item++) {
        int64_t i = item / parts, k = item % parts;
        int64_t begin = k * DOT_CHUNK, end = begin + DOT_CHUNK < n ? begin + DOT_CHUNK : n;
        partial[item] = dp_cpu_dot(tx, x, ty, y, i * n + begin, end - begin);
    }
    finish_partials(B, parts, partial, alpha, out, accumulate);
    free(partial);
    return DP_OK;
}

static int cpu_gram_dot_masked(dp_device *dev, int64_t B, int64_t T, const float *gram, const int32_t *ids, float alpha,
                               float *out, int accumulate) {
    (void)dev;
    double *partial = malloc(nz(B * T) * sizeof *partial);
    if (!partial) return host_oom("gram_dot_masked");
#pragma omp parallel for schedule(static) if (B * T * T > PAR_MIN)
    for (int64_t item = 0; item < B * T; item++) {
        int64_t i = item / T, s = item % T;
        const float *row = gram + (i * T + s) * T;
        const int32_t *id = ids + i * T;
        double acc = 0.0;
        for (int64_t u = 0; u < T; u++)
            if (id[u] == id[s]) acc += row[u];
        partial[item] = acc;
    }
    finish_partials(B, T, partial, alpha, out, accumulate);
    free(partial);
    return DP_OK;
}

#define COL_CHUNK 256 /* columns per task of the per-sample column sums */

/* The per-sample column sums walk each sample's T rows in order over a chunk of COL_CHUNK columns
 * (contiguous, vectorised), in double: the same order, hence the same bits, as a sum per column. */
static int cpu_token_sum(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t p, const void *g, float *out) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "token_sum"));
    const int64_t chunks = (p + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for schedule(static) if (B * T * p > PAR_MIN)
    for (int64_t task = 0; task < B * chunks; task++) {
        const int64_t i = task / chunks, c0 = task % chunks * COL_CHUNK, nc = p - c0 < COL_CHUNK ? p - c0 : COL_CHUNK;
        double s[COL_CHUNK] = {0};
        for (int64_t tt = 0; tt < T; tt++) {
            const int64_t row = (i * T + tt) * p + c0;
            for (int64_t c = 0; c < nc; c++) s[c] += dp_cpu_ld(t, g, row + c);
        }
        for (int64_t c = 0; c < nc; c++) out[i * p + c0 + c] = (float)s[c];
    }
    return DP_OK;
}

static int cpu_norm_grads(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, const void *x, const float *mean,
                          const float *rstd, const void *g, float *dw, float *db) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "norm_grads"));
    const int64_t chunks = (d + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for schedule(static) if (B * T * d > PAR_MIN)
    for (int64_t task = 0; task < B * chunks; task++) {
        const int64_t i = task / chunks, c0 = task % chunks * COL_CHUNK, nc = d - c0 < COL_CHUNK ? d - c0 : COL_CHUNK;
        double sw[COL_CHUNK] = {0}, sb[COL_CHUNK] = {0};
        for (int64_t tt = 0; tt < T; tt++) {
            const int64_t n = i * T + tt, row = n * d + c0;
            const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
            for (int64_t c = 0; c < nc; c++) {
                float xv = dp_cpu_ld(t, x, row + c), xhat = mean ? (xv - mu) * rs : xv * rs;
                float gv = dp_cpu_ld(t, g, row + c);
                sw[c] += (double)gv * (double)xhat;
                sb[c] += gv;
            }
        }
        for (int64_t c = 0; c < nc; c++) {
            dw[i * d + c0 + c] = (float)sw[c];
            if (db) db[i * d + c0 + c] = (float)sb[c];
        }
    }
    return DP_OK;
}

#define SCALE_CHUNK 8192 /* elements per task of scale_samples */

/* x[k] *= c for k in [k0, k1): f32 in a loop that vectorises (compiled per instruction set), bf16
 * widened and rounded once */
DP_CPU_CLONES static void scale_span(dp_dtype t, void *x, int64_t k0, int64_t k1, float c) {
    if (t == DP_F32) {
        float *xf = x;
        for (int64_t k = k0; k < k1; k++) xf[k] *= c;
        return;
    }
    for (int64_t k = k0; k < k1; k++) dp_cpu_st(t, x, k, dp_cpu_ld(t, x, k) * c);
}

static int cpu_scale_samples(dp_device *dev, dp_dtype t, int64_t B, int64_t n, void *x, const float *c) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "scale_samples"));
    const int64_t chunks = (n + SCALE_CHUNK - 1) / SCALE_CHUNK;
#pragma omp parallel for schedule(static) if (B * n > PAR_MIN)
    for (int64_t task = 0; task < B * chunks; task++) {
        const int64_t i = task / chunks, k0 = i * n + task % chunks * SCALE_CHUNK;
        scale_span(t, x, k0, k0 + SCALE_CHUNK < (i + 1) * n ? k0 + SCALE_CHUNK : (i + 1) * n, c[i]);
    }
    return DP_OK;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cpu_sort_ids(dp_device *dev, int64_t B, int64_t T, const int32_t *ids, uint64_t *keys) {
    (void)dev;
#pragma omp parallel for schedule(static) if (B * T > 4096)
    for (int64_t i = 0; i < B; i++) {
        uint64_t *k = keys + i * T;
        for (int64_t tt = 0; tt < T; tt++) k[tt] = ((uint64_t)(uint32_t)ids[i * T + tt] << 32) | (uint64_t)tt;
        qsort(k, (size_t)T, sizeof *k, cmp_u64);
    }
    return DP_OK;
}

static int cpu_grouped_sumsq(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, const void *g,
                             const uint64_t *keys, float alpha, float *out, int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "grouped_sumsq"));
    double *partial = malloc(nz(B) * sizeof *partial);
    double *sums = malloc(nz(B * d) * sizeof *sums);
    if (!partial || !sums) {
        free(partial);
        free(sums);
        return host_oom("grouped_sumsq");
    }
#pragma omp parallel for schedule(static) if (B * T * d > PAR_MIN)
    for (int64_t i = 0; i < B; i++) {
        const uint64_t *k = keys + i * T;
        double *sum = sums + i * d, acc = 0.0;
        int64_t run = 0;
        while (run < T) {
            uint32_t id = (uint32_t)(k[run] >> 32);
            for (int64_t c = 0; c < d; c++) sum[c] = 0.0;
            int64_t end = run;
            for (; end < T && (uint32_t)(k[end] >> 32) == id; end++) {
                int64_t row = i * T + (int64_t)(uint32_t)k[end];
                for (int64_t c = 0; c < d; c++) sum[c] += dp_cpu_ld(t, g, row * d + c);
            }
            for (int64_t c = 0; c < d; c++) acc += sum[c] * sum[c];
            run = end;
        }
        partial[i] = acc;
    }
    finish_partials(B, 1, partial, alpha, out, accumulate);
    free(partial);
    free(sums);
    return DP_OK;
}

static int cpu_scatter_rows(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                            const int32_t *ids, float alpha, float *psg) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "scatter_rows"));
#pragma omp parallel for schedule(static) if (B * T * d > PAR_MIN)
    for (int64_t i = 0; i < B; i++)
        for (int64_t tt = 0; tt < T; tt++) {
            float *dst = psg + (i * V + ids[i * T + tt]) * d;
            for (int64_t c = 0; c < d; c++) dst[c] += alpha * dp_cpu_ld(t, g, (i * T + tt) * d + c);
        }
    return DP_OK;
}

static int cpu_gather_cols(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t V, const void *g,
                           const int32_t *ids, void *h) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "gather_cols"));
    size_t es = dp_dtype_size(t);
#pragma omp parallel for schedule(static) if (B * T * T > PAR_MIN)
    for (int64_t is = 0; is < B * T; is++) {
        int64_t i = is / T;
        const char *row = (const char *)g + (size_t)(is * V) * es;
        char *dst = (char *)h + (size_t)(is * T) * es;
        for (int64_t u = 0; u < T; u++) memcpy(dst + u * es, row + (size_t)ids[i * T + u] * es, es);
    }
    return DP_OK;
}

/* ---- flash: tiled, fused norms ------------------------------------------------------------ */

/* rows x cols block at (row0, col0) of a row-major matrix (row stride ld) as f32 (cpu_util.h) */
static const float *tile_f32(dp_dtype t, const void *x, int64_t ld_x, int64_t row0, int64_t col0, int64_t rows,
                             int64_t cols, float *buf, int64_t *ld_out) {
    return dp_cpu_f32_block(t, x, ld_x, row0 * ld_x + col0, rows, cols, buf, ld_out);
}

static double frob(const float *x, const float *y, int64_t n) { return dp_cpu_dot(DP_F32, x, DP_F32, y, 0, n); }

/* The flash entries run their items (a sample's tile, tile pair or strip) across the team, each
 * with this thread's scratch of `floats` floats. Each item writes its own output (a partial sum,
 * a block of rows), so the order they run in does not matter. DP_OK, or DP_EOOM for the scratch. */
typedef struct {
    dp_dtype t;
    int64_t B, T, d, p, V;
    const void *a, *g;
    const int32_t *ids;
    double *partial;
    float *rows;
} flash_job;

typedef void (*flash_item)(const flash_job *job, int64_t item, float *scratch);

static int run_items(const char *op, const flash_job *job, int64_t items, int64_t floats, flash_item fn) {
    int failed = 0;
#pragma omp parallel if (items > 1)
    {
        float *scratch = malloc(nz(floats) * sizeof *scratch);
        if (!scratch) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++)
            if (scratch) fn(job, item, scratch);
        free(scratch);
    }
    return failed ? host_oom(op) : DP_OK;
}

/* Gram-tile item: tile pair q of sample i; scratch two S x S tiles (+ two S x kmax for bf16) */
static void gram_tile_item(const flash_job *job, int64_t item, float *scratch) {
    const int64_t S = DPSGD_FLASH_TILE, T = job->T, nt = (T + S - 1) / S, pairs = nt * (nt + 1) / 2;
    const int64_t kmax = job->d > job->p ? job->d : job->p;
    int64_t i = item / pairs, q = item % pairs;
    int64_t bs = 0; /* pair q is (bs, bt) with bt <= bs, in row order of the lower triangle */
    while ((bs + 1) * (bs + 2) / 2 <= q) bs++;
    int64_t bt = q - bs * (bs + 1) / 2;
    int64_t ms = T - bs * S < S ? T - bs * S : S, ns = T - bt * S < S ? T - bt * S : S;
    float *c1 = scratch, *c2 = c1 + S * S, *wide = job->t == DP_BF16 ? c2 + S * S : NULL;
    const void *mats[2] = {job->a, job->g};
    int64_t ks[2] = {job->d, job->p};
    for (int m = 0; m < 2; m++) {
        int64_t k = ks[m], l1, l2;
        const char *base = (const char *)mats[m] + (size_t)(i * T * k) * dp_dtype_size(job->t);
        const float *x = tile_f32(job->t, base, k, bs * S, 0, ms, k, wide, &l1);
        const float *y = tile_f32(job->t, base, k, bt * S, 0, ns, k, wide ? wide + S * kmax : NULL, &l2);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)ms, (blasint)ns, (blasint)k, 1.0f, x, (blasint)l1,
                    y, (blasint)l2, 0.0f, m ? c2 : c1, (blasint)ns);
    }
    job->partial[item] = (bs == bt ? 1.0 : 2.0) * frob(c1, c2, ms * ns);
}

static int cpu_gram_tile_sumsq(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                               const void *g, float alpha, float *out, int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "gram_tile_sumsq"));
    const int64_t S = DPSGD_FLASH_TILE, nt = (T + S - 1) / S, pairs = nt * (nt + 1) / 2, kmax = d > p ? d : p;
    flash_job job = {t, B, T, d, p, 0, a, g, NULL, malloc(nz(B * pairs) * sizeof(double)), NULL};
    if (!job.partial) return host_oom("gram_tile_sumsq");
    int rc =
        run_items("gram_tile_sumsq", &job, B * pairs, 2 * S * S + (t == DP_BF16 ? 2 * S * kmax : 0), gram_tile_item);
    if (rc == DP_OK) finish_partials(B, pairs, job.partial, alpha, out, accumulate);
    free(job.partial);
    return rc;
}

/* Gradient-tile item: tile (bp, bd) of sample i's p x d gradient; scratch the S x S tile (+ two
 * T x S strips for bf16) */
static void grad_tile_item(const flash_job *job, int64_t item, float *scratch) {
    const int64_t S = DPSGD_FLASH_TILE, T = job->T, d = job->d, p = job->p;
    const int64_t nd = (d + S - 1) / S, tiles = (p + S - 1) / S * nd;
    const size_t es = dp_dtype_size(job->t);
    int64_t i = item / tiles, bp = (item % tiles) / nd, bd = item % nd;
    int64_t mp = p - bp * S < S ? p - bp * S : S, md = d - bd * S < S ? d - bd * S : S, lg, la;
    float *c = scratch, *wide = job->t == DP_BF16 ? c + S * S : NULL;
    /* the gradient tile dW[bp, bd] = g_i[:, bp]^T a_i[:, bd]: strips of T rows */
    const float *gs = tile_f32(job->t, (const char *)job->g + (size_t)(i * T * p) * es, p, 0, bp * S, T, mp, wide, &lg);
    const float *as = tile_f32(job->t, (const char *)job->a + (size_t)(i * T * d) * es, d, 0, bd * S, T, md,
                               wide ? wide + T * S : NULL, &la);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)mp, (blasint)md, (blasint)T, 1.0f, gs, (blasint)lg,
                as, (blasint)la, 0.0f, c, (blasint)md);
    job->partial[item] = frob(c, NULL, mp * md);
}

static int cpu_grad_tile_sumsq(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                               const void *g, float alpha, float *out, int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "grad_tile_sumsq"));
    const int64_t S = DPSGD_FLASH_TILE, tiles = (p + S - 1) / S * ((d + S - 1) / S);
    flash_job job = {t, B, T, d, p, 0, a, g, NULL, malloc(nz(B * tiles) * sizeof(double)), NULL};
    if (!job.partial) return host_oom("grad_tile_sumsq");
    int rc = run_items("grad_tile_sumsq", &job, B * tiles, S * S + (t == DP_BF16 ? 2 * T * S : 0), grad_tile_item);
    if (rc == DP_OK) finish_partials(B, tiles, job.partial, alpha, out, accumulate);
    free(job.partial);
    return rc;
}

/* Tied-rows item: strip bu of sample i's rows; scratch the gathered T x S strip (+ the widened
 * T x d input for bf16) */
static void tied_rows_item(const flash_job *job, int64_t item, float *scratch) {
    const int64_t S = DPSGD_FLASH_TILE, T = job->T, d = job->d, V = job->V, nt = (T + S - 1) / S;
    const size_t es = dp_dtype_size(job->t);
    int64_t i = item / nt, bu = item % nt, la;
    int64_t mu = T - bu * S < S ? T - bu * S : S;
    float *h = scratch, *wide = job->t == DP_BF16 ? h + T * S : NULL;
    const float *ai = tile_f32(job->t, (const char *)job->a + (size_t)(i * T * d) * es, d, 0, 0, T, d, wide, &la);
    /* h[s, u] = g[i, s, ids[i, bu*S + u]]: a T x mu strip of the gathered matrix */
    for (int64_t s = 0; s < T; s++)
        for (int64_t u = 0; u < mu; u++)
            h[s * mu + u] = dp_cpu_ld(job->t, job->g, (i * T + s) * V + job->ids[i * T + bu * S + u]);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)mu, (blasint)d, (blasint)T, 1.0f, h, (blasint)mu, ai,
                (blasint)la, 0.0f, job->rows + (i * T + bu * S) * d, (blasint)d);
}

static int cpu_tied_rows(dp_device *dev, dp_dtype t, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                         const int32_t *ids, const void *a, float *r) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "tied_rows"));
    const int64_t S = DPSGD_FLASH_TILE, nt = (T + S - 1) / S;
    flash_job job = {t, B, T, d, 0, V, a, g, ids, NULL, r};
    return run_items("tied_rows", &job, B * nt, T * S + (t == DP_BF16 ? T * d : 0), tied_rows_item);
}

const dpsgd_ops dpsgd_cpu_ops = {
    .batched_dot = cpu_batched_dot,
    .gram_dot_masked = cpu_gram_dot_masked,
    .token_sum = cpu_token_sum,
    .norm_grads = cpu_norm_grads,
    .scale_samples = cpu_scale_samples,
    .sort_ids = cpu_sort_ids,
    .grouped_sumsq = cpu_grouped_sumsq,
    .scatter_rows = cpu_scatter_rows,
    .gather_cols = cpu_gather_cols,
    .gram_tile_sumsq = cpu_gram_tile_sumsq,
    .grad_tile_sumsq = cpu_grad_tile_sumsq,
    .tied_rows = cpu_tied_rows,
};
