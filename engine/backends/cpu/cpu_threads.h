/* cpu_threads.h: the CPU backend's one thread pool. dpprof's OpenMP team runs every parallel
 * loop and every large GEMM (split into pieces across the team); OpenBLAS itself stays
 * single-threaded, so two pools never compete for the cores (GNU OpenMP's workers spin between
 * regions while OpenBLAS's pthreads wanted the same cores: a third of the cycles of a step). */
#ifndef DP_CPU_THREADS_H
#define DP_CPU_THREADS_H

#include <stdint.h>

/* Makes OpenBLAS single-threaded (its pthread build; its OpenMP build is single-threaded inside
 * our parallel regions by itself). Idempotent; the CPU backend's init calls it. */
void dp_cpu_threads_init(void);

/* Threads the CPU backend's parallel loops and GEMMs use: OMP_NUM_THREADS, else the CPU count,
 * until dp_cpu_set_threads. 1 in a build without OpenMP. */
int dp_cpu_threads(void);

/* Sets the thread count (n >= 1) for this process and the children it forks afterwards. DP_OK,
 * or DP_EINVAL naming n and the valid range. */
int dp_cpu_set_threads(int n);

/* One row-major f32 GEMM, C = alpha op(A) op(B) + beta C (op(A) m x k, op(B) k x n), split into
 * pieces of C (rows or columns) whose number depends on m, n and k alone, so every element gets
 * the same bits whatever the thread count; the pieces run across the team when called outside a
 * parallel region, in this thread inside one. */
void dp_cpu_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* batch GEMMs as dp_cpu_sgemm, item b at A + b stride_a, B + b stride_b, C + b stride_c: the
 * items and their pieces run across the team together. */
void dp_cpu_sgemm_batched(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                          int64_t lda, int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,
                          float *C, int64_t ldc, int64_t stride_c, int64_t batch);

#endif
