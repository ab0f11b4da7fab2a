/* cpu_threads.c: one thread pool for the CPU backend (cpu_threads.h). */
#include "cpu_threads.h"

#include "error.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define PIECES_MAX 64             /* pieces of one GEMM at most */
#define PIECE_MIN_EDGE 64         /* rows or columns of C per piece at least */
#define PIECE_MIN_FLOPS (1 << 21) /* flops per piece at least: a piece outweighs its call and packing */
#define PIECE_ALIGN 16            /* piece edges on multiples of this (OpenBLAS's register blocks) */
#define OPENBLAS_PTHREADS 1       /* openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP */

void dp_cpu_threads_init(void) {
    static int done;
    if (done) return;
    done = 1;
    /* In OpenBLAS's OpenMP build openblas_set_num_threads would set our team's size too. */
    if (openblas_get_parallel() == OPENBLAS_PTHREADS) openblas_set_num_threads(1);
}

int dp_cpu_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int dp_cpu_set_threads(int n) {
    if (n < 1 || n > 4096) return dp_error_set(DP_EINVAL, "threads: %d is not a thread count (1 to 4096)", n);
    dp_cpu_threads_init();
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    return DP_OK;
}

/* Pieces of an m x n x k GEMM: a power of two, from the sizes alone. */
static int64_t gemm_pieces(int64_t m, int64_t n, int64_t k) {
    int64_t edge = m > n ? m : n, p = 1;
    double flops = 2.0 * (double)m * (double)n * (double)k;
    while (p < PIECES_MAX && edge / (2 * p) >= PIECE_MIN_EDGE && flops / (double)(2 * p) >= PIECE_MIN_FLOPS) p *= 2;
    return p;
}

/* First row (or column) of piece i of p along an edge of `edge`. */
static int64_t piece_start(int64_t edge, int64_t i, int64_t p) {
    if (i >= p) return edge;
    return edge * i / p / PIECE_ALIGN * PIECE_ALIGN;
}

/* Piece i of p of one GEMM: rows of C when m >= n, else columns. */
static void gemm_piece(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int64_t i,
                       int64_t p) {
    CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    if (m >= n) {
        int64_t r0 = piece_start(m, i, p), r1 = piece_start(m, i + 1, p);
        const float *a = trans_a ? A + r0 : A + r0 * lda;
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)(r1 - r0), (blasint)n, (blasint)k, alpha, a, (blasint)lda, B,
                    (blasint)ldb, beta, C + r0 * ldc, (blasint)ldc);
    } else {
        int64_t c0 = piece_start(n, i, p), c1 = piece_start(n, i + 1, p);
        const float *b = trans_b ? B + c0 * ldb : B + c0;
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)(c1 - c0), (blasint)k, alpha, A, (blasint)lda, b,
                    (blasint)ldb, beta, C + c0, (blasint)ldc);
    }
}

void dp_cpu_sgemm_batched(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                          int64_t lda, int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,
                          float *C, int64_t ldc, int64_t stride_c, int64_t batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    const int64_t p = gemm_pieces(m, n, k), tasks = batch * p;
    int team = tasks > 1 && 2.0 * (double)m * (double)n * (double)k * (double)batch >= 2.0 * PIECE_MIN_FLOPS;
#ifdef _OPENMP
    team = team && !omp_in_parallel() && omp_get_max_threads() > 1;
#endif
#pragma omp parallel for schedule(static) if (team)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t b = t / p, i = t % p;
        gemm_piece(trans_a, trans_b, m, n, k, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta,
                   C + b * stride_c, ldc, i, p);
    }
}

void dp_cpu_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    dp_cpu_sgemm_batched(trans_a, trans_b, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
