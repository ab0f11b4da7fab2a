/* backend_cpu.c: the CPU backend. Memory from aligned_alloc, GEMM from OpenBLAS, element-wise
 * work in OpenMP loops. Reductions split the data into fixed chunks whose partial sums (double)
 * are added in chunk order, so results do not depend on the thread count. */
#include "backend_cpu.h"
#include "cpu_alloc.h"
#include "cpu_dpsgd.h"
#include "cpu_layers.h"
#include "cpu_peak.h"
#include "cpu_philox.h"
#include "cpu_sums.h"
#include "cpu_blas.h"
#include "cpu_threads.h"
#include "cpu_util.h"
#include "device.h"
#include "error.h"

#include "philox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define PAR_MIN 32768  /* below this many elements a loop runs on one thread */
#define SUM_CHUNK 4096 /* elements per partial sum in reductions */

static void read_cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *colon = strchr(line, ':');
        if (!colon) break;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(out, n, "%s", colon);
        break;
    }
    fclose(f);
}

static int cpu_init(dp_device *dev) {
    dp_cpu_threads_init();
    dp_cpu_blas_warn_generic(); /* once: a generic kernel makes every CPU time several times too slow */
    read_cpu_model(dev->info.cpu, sizeof dev->info.cpu);
    snprintf(dev->info.name, sizeof dev->info.name, "%.200s", dev->info.cpu);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    dev->info.total_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
#ifdef _OPENMP
    dev->info.cores = omp_get_max_threads();
#else
    dev->info.cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
#endif
    return DP_OK;
}

static void cpu_shutdown(dp_device *dev) {
    (void)dev;
    dp_cpu_block_trim();
}

static int cpu_raw_alloc(void *ctx, size_t bytes, void **ptr) {
    (void)ctx;
    *ptr = NULL;
    if (bytes == 0) return DP_OK;
    *ptr = dp_cpu_block_alloc(bytes);
    return *ptr ? DP_OK : DP_EOOM;
}

static void cpu_raw_free(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    dp_cpu_block_free(ptr, bytes);
}

static int cpu_sync(dp_device *dev) {
    (void)dev;
    return DP_OK;
}

static int cpu_memcpy(dp_device *dev, void *dst, const void *src, size_t bytes, dp_copy_kind kind) {
    (void)dev;
    (void)kind;
    if (bytes) memcpy(dst, src, bytes);
    return DP_OK;
}

static int cpu_fill(dp_device *dev, dp_dtype t, void *x, size_t n, double value) {
    (void)dev;
    if (t == DP_I32) {
        int32_t v = (int32_t)value;
        int32_t *p = x;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
        for (size_t i = 0; i < n; i++) p[i] = v;
        return DP_OK;
    }
    float v = (float)value;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) dp_cpu_st(t, x, i, v);
    return DP_OK;
}

#define RAND_BATCH 256 /* Philox blocks (4 values each) per batch: 8 KiB of stack (words and values) */

/* z[4j .. 4j+3] = dist's 4 values of block block0 + j for j < nb, as a + b z (normal) or
 * a + (b - a) u (uniform): the blocks' words first (cpu_philox.c, eight blocks an instruction),
 * then Box-Muller over them, branch-free (philox.h), in a loop that vectorises. */
DP_CPU_CLONES static void rand_blocks(dp_rand_dist dist, float a, float b, uint64_t seed, uint64_t stream,
                                      uint64_t block0, int64_t nb, float *restrict z) {
    uint32_t w[4 * RAND_BATCH];
    dp_cpu_philox_words(seed, stream, block0, nb, w, RAND_BATCH);
    if (dist == DP_RAND_NORMAL) {
        for (int64_t j = 0; j < nb; j++) {
            float z0, z1, z2, z3;
            dp_philox_box_muller(w[j], w[RAND_BATCH + j], &z0, &z1);
            dp_philox_box_muller(w[2 * RAND_BATCH + j], w[3 * RAND_BATCH + j], &z2, &z3);
            z[4 * j] = a + b * z0;
            z[4 * j + 1] = a + b * z1;
            z[4 * j + 2] = a + b * z2;
            z[4 * j + 3] = a + b * z3;
        }
    } else {
        for (int64_t j = 0; j < nb; j++)
            for (int k = 0; k < 4; k++) z[4 * j + k] = a + (b - a) * dp_philox_uniform_word(w[k * RAND_BATCH + j]);
    }
}

/* x[i] (+)= r[i], then *= post, for i in [i0, i1) */
static inline __attribute__((always_inline)) void rand_apply(dp_dtype t, void *x, const float *r, int64_t i0,
                                                             int64_t i1, int accumulate, float post) {
    for (int64_t i = i0; i < i1; i++) {
        float v = accumulate ? dp_cpu_ld(t, x, i) + r[i - i0] : r[i - i0];
        v = post != 1.0f ? v * post : v; /* rounded as the separate scale would round it */
        dp_cpu_st(t, x, i, v);
    }
}

static int cpu_rand(dp_device *dev, dp_dtype t, void *x, size_t n, dp_rand_dist dist, float a, float b, uint64_t seed,
                    uint64_t stream, uint64_t offset, int accumulate, float post) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "rand"));
    if (n == 0) return DP_OK;
    /* element i of the tensor is element offset+i of the stream, value (offset+i) % 4 of block
     * (offset+i) / 4: each block is generated once, in batches of RAND_BATCH blocks */
    const uint64_t first = offset >> 2, blocks = ((offset + n - 1) >> 2) - first + 1;
    const int64_t batches = (int64_t)((blocks + RAND_BATCH - 1) / RAND_BATCH);
#pragma omp parallel for schedule(static) if (n > PAR_MIN / 8)
    for (int64_t c = 0; c < batches; c++) {
        float z[4 * RAND_BATCH];
        uint64_t b0 = first + (uint64_t)c * RAND_BATCH, nb = blocks - (uint64_t)c * RAND_BATCH;
        nb = nb < RAND_BATCH ? nb : RAND_BATCH;
        rand_blocks(dist, a, b, seed, stream, b0, (int64_t)nb, z);
        /* the tensor's elements among the batch's values: stream elements [4 b0, 4 (b0 + nb)) */
        uint64_t e0 = 4 * b0 > offset ? 4 * b0 : offset, e1 = 4 * (b0 + nb) < offset + n ? 4 * (b0 + nb) : offset + n;
        const float *r = z + (e0 - 4 * b0);
        if (t == DP_F32)
            rand_apply(DP_F32, x, r, (int64_t)(e0 - offset), (int64_t)(e1 - offset), accumulate, post);
        else
            rand_apply(t, x, r, (int64_t)(e0 - offset), (int64_t)(e1 - offset), accumulate, post);
    }
    return DP_OK;
}

static int cpu_cast(dp_device *dev, dp_dtype dt, void *dst, dp_dtype st, const void *src, size_t n) {
    (void)dev;
    if (dt == st) {
        memcpy(dst, src, n * dp_dtype_size(dt));
        return DP_OK;
    }
    DP_TRY(dp_cpu_need_float(dt, "cast"));
    DP_TRY(dp_cpu_need_float(st, "cast"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) dp_cpu_st(dt, dst, i, dp_cpu_ld(st, src, i));
    return DP_OK;
}

/* A bf16 matrix widened to a host f32 copy: the CPU's bf16 GEMM is the slow exact reference of
 * cuBLAS's (bf16 operands and C read, f32 accumulation, the result rounded once). rows x cols with row stride ld, per
 * batch item at stride. */
static float *widen(const void *src, int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
    size_t n = (size_t)((batch - 1) * stride + rows * ld);
    float *f = malloc(n * sizeof *f);
    if (!f) return NULL;
    for (size_t i = 0; i < n; i++) f[i] = dp_bf16_to_f32(((const uint16_t *)src)[i]);
    return f;
}

static int cpu_gemm(dp_device *dev, const dp_gemm_args *g) {
    (void)dev;
    if (g->m == 0 || g->n == 0 || g->batch == 0) return DP_OK;
    const float *A = g->a, *B = g->b;
    float *C = g->c, *wa = NULL, *wb = NULL, *wc = NULL;
    int rc = DP_OK;
    if (g->ab_type == DP_BF16) {
        wa = widen(g->a, g->batch, g->stride_a, g->trans_a ? g->k : g->m, g->lda);
        wb = widen(g->b, g->batch, g->stride_b, g->trans_b ? g->n : g->k, g->ldb);
        if (!wa || !wb) rc = dp_error_set(DP_EOOM, "gemm: out of host memory widening bf16");
        A = wa;
        B = wb;
    }
    if (rc == DP_OK && g->c_type == DP_BF16) {
        wc = widen(g->c, g->batch, g->stride_c, g->m, g->ldc);
        if (!wc) rc = dp_error_set(DP_EOOM, "gemm: out of host memory widening bf16");
        C = wc;
    }
    if (rc == DP_OK) {
        dp_cpu_sgemm_batched(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, A, g->lda, g->stride_a, B, g->ldb,
                             g->stride_b, g->beta, C, g->ldc, g->stride_c, g->batch);
        if (wc) {
            size_t n = (size_t)((g->batch - 1) * g->stride_c + g->m * g->ldc);
            for (size_t i = 0; i < n; i++) ((uint16_t *)g->c)[i] = dp_f32_to_bf16(wc[i]);
        }
    }
    free(wa);
    free(wb);
    free(wc);
    return rc;
}

static int cpu_add(dp_device *dev, dp_dtype t, size_t n, const void *x, const void *y, void *out) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "add"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) dp_cpu_st(t, out, i, dp_cpu_ld(t, x, i) + dp_cpu_ld(t, y, i));
    return DP_OK;
}

static int cpu_scale(dp_device *dev, dp_dtype t, size_t n, void *x, float alpha) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "scale"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) dp_cpu_st(t, x, i, dp_cpu_ld(t, x, i) * alpha);
    return DP_OK;
}

static int cpu_axpy(dp_device *dev, dp_dtype t, size_t n, float alpha, const void *x, void *y) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "axpy"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) dp_cpu_st(t, y, i, dp_cpu_ld(t, y, i) + alpha * dp_cpu_ld(t, x, i));
    return DP_OK;
}

/* Sum of squares of chunk c (SUM_CHUNK elements, fewer at the end) of x[0..n), in double. */
static double chunk_sumsq(dp_dtype t, const void *x, size_t c, size_t n) {
    size_t end = (c + 1) * SUM_CHUNK < n ? (c + 1) * SUM_CHUNK : n;
    return dp_cpu_dot(t, x, t, NULL, (int64_t)(c * SUM_CHUNK), (int64_t)(end - c * SUM_CHUNK));
}

/* Sum of squares of x[0..n), as fixed SUM_CHUNK chunks added in order: the same result for any
 * thread count (and without the partials buffer when the host is out of memory). */
static double sumsq_span(dp_dtype t, const void *x, size_t n) {
    size_t chunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
    double *part = chunks > 1 ? malloc(chunks * sizeof *part) : NULL;
    double total = 0;
    if (!part) {
        for (size_t c = 0; c < chunks; c++) total += chunk_sumsq(t, x, c, n);
        return total;
    }
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) part[c] = chunk_sumsq(t, x, c, n);
    for (size_t c = 0; c < chunks; c++) total += part[c];
    free(part);
    return total;
}

static int cpu_sumsq_rows(dp_device *dev, dp_dtype t, size_t rows, size_t cols, const void *x, float *out,
                          int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "sumsq_rows"));
    if (rows == 1) {
        double s = sumsq_span(t, x, cols);
        out[0] = (float)(accumulate ? out[0] + s : s);
        return DP_OK;
    }
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        double s = dp_cpu_dot(t, x, t, NULL, (int64_t)(r * cols), (int64_t)cols);
        out[r] = (float)(accumulate ? out[r] + s : s);
    }
    return DP_OK;
}

const dp_backend dp_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .reserved = NULL,
    .sync = cpu_sync,
    .memcpy = cpu_memcpy,
    .fill = cpu_fill,
    .rand = cpu_rand,
    .cast = cpu_cast,
    .gemm = cpu_gemm,
    .add = cpu_add,
    .scale = cpu_scale,
    .axpy = cpu_axpy,
    .sumsq_rows = cpu_sumsq_rows,
    .peak = dp_cpu_peak,
    .layers = &dp_cpu_layer_ops,
    .dpsgd = &dpsgd_cpu_ops,
};
