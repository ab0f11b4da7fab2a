/* attention_common.cuh: pieces shared by attention_fwd.cu and attention_bwd.cu.
 *
 * Tensor-core path (bf16, head dim 64 or 128): inline PTX for cp.async (16-byte global ->
 * shared copies, zero-filled past the sequence end), ldmatrix (8x8 b16 tiles from shared
 * memory into mma fragments, .trans for the operand that must be transposed) and
 * mma.sync.m16n8k16 bf16 -> f32. Tiles live in shared memory as rows of HD + 8 bf16 (a 16-byte
 * pad: the 8 rows one ldmatrix reads fall in 8 different 16-byte bank groups).
 *
 * Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), used throughout:
 *   A (16x16, row-major) regs a0..a3: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
 *   B (16x8, k x n)      regs b0, b1: (k 2t..2t+1, n g), (k 2t+8..2t+9, n g)
 *   C (16x8, f32)        c0..c3:      (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
 * so two neighbouring C tiles (n 0..7, 8..15), rounded to bf16 pairs, are exactly the A
 * fragment of one k16 step: P and dS go from accumulators to the next product in registers.
 * ldmatrix.x4 address per lane (row r = lane % 8 of matrix mi = lane / 8):
 *   A from row-major [row][col] at (r0, c0):        row r0 + (lane & 15), col c0 + (lane >> 4) * 8
 *   B = M^T from M row-major [n][k] (no .trans):     n n0 + (lane & 7) + (lane >> 4) * 8,
 *                                                    k k0 + ((lane >> 3) & 1) * 8
 *     -> regs 0,1 = b0,b1 of n-tile n0; regs 2,3 = b0,b1 of n-tile n0 + 8
 *   B = M from M row-major [k][n] (.trans):          k k0 + (lane & 7) + ((lane >> 3) & 1) * 8,
 *                                                    n n0 + (lane >> 4) * 8
 *     -> regs 0,1 = b0,b1 of n-tile n0; regs 2,3 = b0,b1 of n-tile n0 + 8
 *
 * SIMT path (f32, and bf16 with other head dims): f32 tiles in shared memory, rows of HD + 4
 * floats (HD = 64, 128 or 256, the head dim zero-padded up), 256 threads as 16 x 16: thread
 * (ty, tx) owns rows ty + 16 i and columns tx + 16 j of a score tile, and rows ty + 16 i,
 * columns 4 tx + 64 cc .. + 3 of an output tile. */
#ifndef DPK_ATTENTION_COMMON_CUH
#define DPK_ATTENTION_COMMON_CUH

#include "layer_util.cuh"

#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

/* ---- PTX wrappers -------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, or 16 zero bytes when !valid (src is then not read). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n) : "memory");
}

/* 4 bytes global -> shared, or zero when !valid. */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
    const int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}

/* c += a * b for one m16n8k16 tile, bf16 inputs, f32 accumulators. */
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The A fragment of k16 step kk from accumulator tiles 2kk and 2kk + 1 (see the layouts). */
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = pack_bf16x2(c0[0], c0[1]);
    a[1] = pack_bf16x2(c0[2], c0[3]);
    a[2] = pack_bf16x2(c1[0], c1[1]);
    a[3] = pack_bf16x2(c1[2], c1[3]);
}

/* Rows [r0, r0 + ROWS) of one head (HD bf16 from src, row stride ld elements) into a shared
 * tile with row stride HD + 8, by NTHREADS threads; rows >= T become zeros. */
template <int HD, int ROWS, int NTHREADS>
__device__ __forceinline__ void cp_tile(bf16 *dst, const bf16 *src, int64_t ld, int r0, int T) {
    constexpr int CH = HD / 8; /* 16-byte chunks per row */
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * CH; i += NTHREADS) {
        const int r = i / CH, c = (i % CH) * 8, t = r0 + r;
        const bool ok = t < T;
        cp_async16(dst + r * (HD + 8) + c, ok ? src + (int64_t)t * ld + c : src, ok);
    }
}

/* ---- SIMT tiles ---------------------------------------------------------------------------- */

/* Rows [r0, r0 + rows) of one head (hd elements from src, row stride ld) widened into an f32
 * tile with row stride HD + 4; rows >= T and columns >= hd become zeros. */
template <typename T, int HD>
__device__ __forceinline__ void simt_load_tile(float *dst, const T *src, int64_t ld, int r0, int rows, int T_, int hd) {
    for (int i = threadIdx.x; i < rows * HD; i += 256) {
        const int r = i / HD, c = i % HD, t = r0 + r;
        dst[r * (HD + 4) + c] = (t < T_ && c < hd) ? ldf(src + (int64_t)t * ld + c) : 0.0f;
    }
}

/* acc[i][j] += sum_c A[ty + 16i][c] B[tx + 16j][c]: a score tile from two row tiles. */
template <int HD, int RM, int RN>
__device__ __forceinline__ void simt_dot(float (&acc)[RM][RN], const float *A, const float *B, int ty, int tx) {
    constexpr int LDF = HD + 4;
#pragma unroll 4
    for (int c = 0; c < HD; c += 4) {
        float4 a[RM], b[RN];
#pragma unroll
        for (int i = 0; i < RM; i++) a[i] = *reinterpret_cast<const float4 *>(A + (ty + 16 * i) * LDF + c);
#pragma unroll
        for (int j = 0; j < RN; j++) b[j] = *reinterpret_cast<const float4 *>(B + (tx + 16 * j) * LDF + c);
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) {
                acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

/* acc[i][cc][e] += sum_j P[ty + 16i][j] M[j][4 tx + 64 cc + e] for j < NJ: a score tile (row
 * stride NJ + 4) times a row tile (row stride HD + 4). */
template <int HD, int NJ, int RM>
__device__ __forceinline__ void simt_pm(float (&acc)[RM][HD / 64][4], const float *P, const float *M, int ty, int tx) {
    constexpr int LDF = HD + 4, LDP = NJ + 4, CO = HD / 64;
#pragma unroll 2
    for (int j = 0; j < NJ; j += 4) {
        float4 p[RM];
#pragma unroll
        for (int i = 0; i < RM; i++) p[i] = *reinterpret_cast<const float4 *>(P + (ty + 16 * i) * LDP + j);
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
#pragma unroll
            for (int cc = 0; cc < CO; cc++) {
                const float4 m = *reinterpret_cast<const float4 *>(M + (j + jj) * LDF + 4 * tx + 64 * cc);
#pragma unroll
                for (int i = 0; i < RM; i++) {
                    const float pv = jj == 0 ? p[i].x : jj == 1 ? p[i].y : jj == 2 ? p[i].z : p[i].w;
                    acc[i][cc][0] = fmaf(pv, m.x, acc[i][cc][0]);
                    acc[i][cc][1] = fmaf(pv, m.y, acc[i][cc][1]);
                    acc[i][cc][2] = fmaf(pv, m.z, acc[i][cc][2]);
                    acc[i][cc][3] = fmaf(pv, m.w, acc[i][cc][3]);
                }
            }
        }
    }
}

/* max and sum over the 16 threads of a half-warp that share a row (tx = lane % 16) */
__device__ __forceinline__ float half_warp_max(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Raises a kernel's dynamic shared memory limit once (needed above 48 KiB). */
template <typename K> static cudaError_t att_smem_limit(K kernel, size_t bytes) {
    if (bytes <= 48u * 1024u) return cudaSuccess;
    return cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Whether the tensor-core kernels can take this problem (bf16, hd 64/128, 16-byte rows). */
static inline bool att_mma_ok(int dtype, int64_t hd, int64_t ld_q, int64_t ld_kv, const void *q, const void *k,
                              const void *v) {
    return dtype == DPK_BF16 && (hd == 64 || hd == 128) && ld_q % 8 == 0 && ld_kv % 8 == 0 && dpk_aligned16(q) &&
           dpk_aligned16(k) && dpk_aligned16(v);
}

/* The padded head dim of the SIMT kernels, or 0 when hd is too large. */
static inline int att_simt_hd(int64_t hd) { return hd <= 64 ? 64 : hd <= 128 ? 128 : hd <= 256 ? 256 : 0; }

#endif
