/* dp_flash.cu: the fused, tiled per-sample norm kernels of flash clipping (engine/core/dpsgd_ops.h).
 *
 * Each is a GEMM whose output tile never leaves registers:
 * - Gram tiles: for sample i and a 128 x 128 tile (s-block >= t-block) of the lower triangle,
 *   acc1 = a_s a_t^T over K = d, then acc2 = g_s g_t^T over K = p, then sum(acc1 * acc2), twice
 *   for an off-diagonal tile: <a a^T, g g^T> = ||g^T a||^2 without a T x T matrix.
 *   Flops: 2 * 128^2 * (d + p) per tile, nt (nt + 1) / 2 tiles per sample (nt = ceil(T / 128)),
 *   about B T^2 (d + p).
 * - Gradient tiles: for sample i and a 128 x 128 tile of the p x d per-sample gradient,
 *   acc = g_i[:, P]^T a_i[:, D] over K = T, then sum(acc^2). Flops: 2 * 128^2 * T per tile,
 *   about 2 B T p d.
 * - Tied rows: r_i[U, D] = h_i[:, U]^T a_i[:, D] over K = T with h_i[s, u] = g_i[s, ids_i[u]]
 *   gathered as the tile is loaded (no T x T matrix); stored, not reduced. 2 B T^2 d flops.
 *
 * bf16: tensor cores (mma.sync.m16n8k16, f32 accumulation) fed by ldmatrix from shared memory
 * that a 3-stage cp.async pipeline fills with K slices of 64 (16-byte copies when rows are
 * 16-byte aligned, element loads otherwise, e.g. a vocabulary of odd size); 256 threads as 2 x 4
 * warps of 64 x 32; the fragments of the next k16 step are loaded before the current step's mma.
 * Measured on an H100 80GB HBM3 against cuBLAS (tests/c/test_cuda_dp.c, DPPROF_DP_BENCH=1):
 * gradient tiles run at 0.42-0.54 of cuBLAS's throughput on the same products (224-313 TFLOP/s),
 * Gram tiles at 0.30-0.32 (158-210 TFLOP/s; two accumulators hold them to one block per SM:
 * 195-216 registers). Variant 3 (gram_tile_bf16<C, true>, benchmarks only until measured) keeps one
 * accumulator and stashes a a^T in shared memory: 128 registers (ptxas, sm_90; 112 bytes of
 * spill), 104 KB of shared memory, so two blocks per SM. Closing the gap for good needs
 * Hopper's wgmma (sm_90a), not written yet.
 * f32: the same tiles on the CUDA cores (8 x 8 outputs per thread, register double buffering).
 * Per (sample, block) f32 partials go to the scratch and are added in order by a second kernel:
 * deterministic, a partition fixed by the sizes. */
#include "dp_common.cuh"
#include "dp_kernels.h"

#include <cuda_bf16.h>

using namespace dpk_dp;

namespace dpk_flash {

constexpr int TILE = 128; /* = DPSGD_FLASH_TILE */
constexpr int THREADS = 256;
constexpr int MAX_BLOCKS = 8192; /* per launch, over all samples: bounds the partials */

typedef __nv_bfloat16 bf16;

/* ---- tile scheduling ------------------------------------------------------------------------ */

/* Lower-triangle pair q = bs (bs + 1) / 2 + bt, bt <= bs. */
__device__ __forceinline__ void tri_pair(int64_t q, int64_t *bs, int64_t *bt) {
    int64_t s = (int64_t)((sqrt(8.0 * (double)q + 1.0) - 1.0) * 0.5);
    while (s * (s + 1) / 2 > q) s--;
    while ((s + 1) * (s + 2) / 2 <= q) s++;
    *bs = s;
    *bt = q - s * (s + 1) / 2;
}

/* ================================ bf16: tensor cores ========================================= */

/* A kernel configuration: NT threads as WARPS_M x WARPS_N warps over the 128 x 128 block tile,
 * each warp MI x NI mma tiles of 16 x 8 (warp tile (128 / WARPS_M) x (128 / WARPS_N)), and a
 * STAGES-deep pipeline of BK = 32 slices. 64 x 64 warp tiles read 4 KB of shared memory per 32
 * mma (128 KFLOP), 64 x 32 ones 3 KB per 16: the larger tile halves the shared-memory traffic per
 * flop, which is what bounds mma.sync kernels on Hopper. */
template <int NT_, int WARPS_N_, int STAGES_, int BK_, bool PIPE_> struct Cfg {
    static constexpr int NT = NT_, WARPS_N = WARPS_N_, WARPS_M = NT_ / 32 / WARPS_N_, STAGES = STAGES_;
    static constexpr int MI = TILE / WARPS_M / 16, NI = TILE / WARPS_N / 8;
    static constexpr int BK = BK_;       /* K slice per stage */
    static constexpr int LDK = BK_ + 8;  /* K-major tile row: BK + 8 elements, conflict-free ldmatrix */
    static constexpr int LDM = TILE + 8; /* M-major tile row: 272 bytes */
    static constexpr int STAGE_ELEMS = TILE * LDK > BK_ *LDM ? TILE *LDK : BK_ *LDM;
    static constexpr bool PIPE = PIPE_; /* fragments of the next k16 loaded before this one's mma */
};
typedef Cfg<256, 4, 3, 32, true> Cfg8w;    /* 8 warps of 64 x 32, fragments double-buffered */
typedef Cfg<256, 4, 3, 64, true> Cfg8w64;  /* the same with BK = 64 */
typedef Cfg<256, 4, 3, 32, false> Cfg8wNP; /* 8 warps of 64 x 32, one k16 step at a time */
typedef Cfg<128, 2, 3, 64, true> Cfg4w64;  /* 4 warps of 64 x 64, BK = 64, fragments double-buffered */
typedef Cfg<256, 4, 2, 32, false> Cfg8wS2; /* 8 warps of 64 x 32, 2 stages, one k16 step at a time:
                                            * the stashed Gram kernel's, two blocks per SM */

template <class C> __host__ __device__ constexpr int pipeline_bytes() {
    return 2 * C::STAGES * C::STAGE_ELEMS * (int)sizeof(bf16);
}

/* One sample's row-major matrix: element (r, c) at p[r * ld + c], valid for r < rows, c < ld. */
struct Mat {
    const bf16 *p;
    int64_t ld, rows;
    bool vec; /* ld % 8 == 0 and p 16-byte aligned: 16-byte chunks */
};

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* K-major tile: s[m * LDK + k] = M(r0 + m, k0 + k), m < 128, k < BK (0 outside M) */
template <class C> __device__ __forceinline__ void load_kmajor(bf16 *s, const Mat &M, int64_t r0, int64_t k0) {
    constexpr int CPR = C::BK / 8; /* 16-byte chunks per row */
    const int tid = threadIdx.x;
    if (M.vec) {
#pragma unroll
        for (int j = 0; j < TILE * CPR / C::NT; j++) {
            const int c = tid + j * C::NT, m = c / CPR, kc = (c % CPR) * 8;
            const int64_t r = r0 + m, k = k0 + kc;
            const bool ok = r < M.rows && k < M.ld;
            cp_async16(s + m * C::LDK + kc, ok ? M.p + r * M.ld + k : M.p, ok);
        }
    } else {
#pragma unroll 4
        for (int j = 0; j < TILE * C::BK / C::NT; j++) {
            const int e = tid + j * C::NT, m = e / C::BK, k = e % C::BK;
            const int64_t r = r0 + m, kk = k0 + k;
            s[m * C::LDK + k] = r < M.rows && kk < M.ld ? M.p[r * M.ld + kk] : __float2bfloat16(0.0f);
        }
    }
}

/* M-major tile: s[k * LDM + m] = M(k0 + k, c0 + m), k < BK, m < 128 (0 outside M) */
template <class C> __device__ __forceinline__ void load_mmajor(bf16 *s, const Mat &M, int64_t k0, int64_t c0) {
    const int tid = threadIdx.x;
    if (M.vec) {
#pragma unroll
        for (int j = 0; j < C::BK * 16 / C::NT; j++) {
            const int c = tid + j * C::NT, k = c >> 4, mc = (c & 15) * 8;
            const int64_t r = k0 + k, col = c0 + mc;
            const bool ok = r < M.rows && col < M.ld;
            cp_async16(s + k * C::LDM + mc, ok ? M.p + r * M.ld + col : M.p, ok);
        }
    } else {
#pragma unroll 4
        for (int j = 0; j < TILE * C::BK / C::NT; j++) {
            const int e = tid + j * C::NT, k = e >> 7, m = e & 127;
            const int64_t r = k0 + k, col = c0 + m;
            s[k * C::LDM + m] = r < M.rows && col < M.ld ? M.p[r * M.ld + col] : __float2bfloat16(0.0f);
        }
    }
}

/* Gathered M-major tile: s[k * LDM + m] = g(k0 + k, id[m]) (row stride V), id[m] < 0: none */
template <class C>
__device__ __forceinline__ void load_gathered(bf16 *s, const bf16 *g, int64_t V, int64_t T, int64_t k0,
                                              const int32_t *id) {
    const int tid = threadIdx.x;
#pragma unroll 4
    for (int j = 0; j < TILE * C::BK / C::NT; j++) {
        const int e = tid + j * C::NT, k = e >> 7, m = e & 127;
        const int64_t r = k0 + k;
        const int32_t c = id[m];
        s[k * C::LDM + m] = r < T && c >= 0 ? g[r * V + c] : __float2bfloat16(0.0f);
    }
}

/* The fragments of one k16 step of a warp: A (MI tiles of 16 x 16) and B (NI tiles of 16 x 8). */
template <class C> struct Frags { uint32_t a[C::MI][4], b[C::NI][2]; };

/* Loads the fragments of k16 step kk of a stage: A (128 x BK: rows m, K-major [m][k] or M-major
 * [k][m]) and B (BK x 128: columns n, K-major [n][k] or M-major [k][n]). Warp (wm, wn) owns rows
 * wm * MI * 16.. and columns wn * NI * 8.. */
template <class C, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void load_frags(Frags<C> &f, const bf16 *sa, const bf16 *sb, int kk, int wm, int wn,
                                           int lane) {
    const int q = lane >> 3, r = lane & 7;
#pragma unroll
    for (int mi = 0; mi < C::MI; mi++) {
        const int m0 = wm * C::MI * 16 + mi * 16;
        if (A_KMAJOR)
            ldsm_x4(f.a[mi], sa + (m0 + (lane & 15)) * C::LDK + kk + (lane >> 4) * 8);
        else
            ldsm_x4_trans(f.a[mi], sa + (kk + r + (q >> 1) * 8) * C::LDM + m0 + (q & 1) * 8);
    }
#pragma unroll
    for (int nj = 0; nj < C::NI / 2; nj++) {
        const int n0 = wn * C::NI * 8 + nj * 16;
        uint32_t t[4];
        if (B_KMAJOR)
            ldsm_x4(t, sb + (n0 + r + (q >> 1) * 8) * C::LDK + kk + (q & 1) * 8);
        else
            ldsm_x4_trans(t, sb + (kk + r + (q & 1) * 8) * C::LDM + n0 + (q >> 1) * 8);
        f.b[2 * nj][0] = t[0];
        f.b[2 * nj][1] = t[1];
        f.b[2 * nj + 1][0] = t[2];
        f.b[2 * nj + 1][1] = t[3];
    }
}

template <class C> __device__ __forceinline__ void mma_frags(float (&acc)[C::MI][C::NI][4], const Frags<C> &f) {
#pragma unroll
    for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < C::NI; ni++) mma_bf16(acc[mi][ni], f.a[mi], f.b[ni][0], f.b[ni][1]);
}

/* acc = sum over K of the tiles loaded by la (A side) and lb (B side), BK at a time, through a
 * C::STAGES-deep cp.async pipeline. la(s, k0) / lb(s, k0) fill stage buffer s with K columns
 * [k0, k0 + BK); they may also store synchronously (element loads): a stage is read only after
 * the barrier that follows its loads. With C::PIPE the fragments of the next k16 step (across a
 * stage boundary too) are loaded before the mma of the current one, so that shared-memory
 * latency hides behind the tensor cores (in-order issue would otherwise wait on each ldmatrix). */
template <class C, bool A_KMAJOR, bool B_KMAJOR, typename LA, typename LB>
__device__ __forceinline__ void mainloop(float (&acc)[C::MI][C::NI][4], bf16 *smem, int64_t K, LA la, LB lb) {
    constexpr int S = C::STAGES, KSTEPS = C::BK / 16, SE = C::STAGE_ELEMS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
    bf16 *sa = smem, *sb = smem + S * SE;
#pragma unroll
    for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;
    const int64_t nk = (K + C::BK - 1) / C::BK;
    if (nk == 0) return;
    auto load = [&](int st, int64_t kt) { /* stage buffer st <- K slice kt */
                                          la(sa + st * SE, kt * C::BK);
                                          lb(sb + st * SE, kt * C::BK);
    };
    __syncthreads(); /* the stages may still be read by the previous mainloop */
#pragma unroll
    for (int st = 0; st < S - 1; st++) {
        if (st < nk) load(st, st);
        cp_async_commit();
    }
    if constexpr (C::PIPE) {
        Frags<C> f[2];
        cp_async_wait<S - 2>();
        __syncthreads();
        load_frags<C, A_KMAJOR, B_KMAJOR>(f[0], sa, sb, 0, wm, wn, lane);
        for (int64_t kt = 0; kt < nk; kt++) {
            const int cur = (int)(kt % S);
#pragma unroll
            for (int ks = 0; ks < KSTEPS; ks++) {
                if (ks == 0) { /* refill the stage everyone finished reading before the last barrier */
                    if (kt + S - 1 < nk) load((int)((kt + S - 1) % S), kt + S - 1);
                    cp_async_commit();
                }
                if (ks == KSTEPS - 1) { /* the next stage: landed, and visible to every thread */
                    cp_async_wait<S - 2>();
                    __syncthreads();
                }
                if (ks + 1 < KSTEPS)
                    load_frags<C, A_KMAJOR, B_KMAJOR>(f[(ks + 1) & 1], sa + cur * SE, sb + cur * SE, (ks + 1) * 16, wm,
                                                      wn, lane);
                else if (kt + 1 < nk)
                    load_frags<C, A_KMAJOR, B_KMAJOR>(f[(ks + 1) & 1], sa + ((kt + 1) % S) * SE,
                                                      sb + ((kt + 1) % S) * SE, 0, wm, wn, lane);
                mma_frags<C>(acc, f[ks & 1]);
            }
        }
    } else {
        for (int64_t kt = 0; kt < nk; kt++) {
            cp_async_wait<S - 2>();
            __syncthreads(); /* stage kt landed for everyone; stage kt-1 is no longer read */
            if (kt + S - 1 < nk) load((int)((kt + S - 1) % S), kt + S - 1);
            cp_async_commit();
            const int cur = (int)(kt % S);
#pragma unroll
            for (int ks = 0; ks < KSTEPS; ks++) {
                Frags<C> f;
                load_frags<C, A_KMAJOR, B_KMAJOR>(f, sa + cur * SE, sb + cur * SE, ks * 16, wm, wn, lane);
                mma_frags<C>(acc, f);
            }
        }
    }
    cp_async_wait<0>();
}

__device__ __forceinline__ bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <class C>
__device__ __forceinline__ float frob_acc(const float (&x)[C::MI][C::NI][4], const float (&y)[C::MI][C::NI][4]) {
    float t = 0.0f;
#pragma unroll
    for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) t = fmaf(x[mi][ni][e], y[mi][ni][e], t);
    return t;
}

/* Gram tiles. STASH false: both Gram tiles in registers (two accumulators: 64 x 32 warp tiles
 * only; one block per SM). STASH true (variant 3): a_s a_t^T is stashed in shared memory after
 * the pipeline's stages (each thread its own fragments, [element][thread]: conflict-free, no
 * barrier) while g_s g_t^T accumulates in the same registers, then both meet in the dot: half
 * the accumulator registers, for two blocks per SM; stash_bytes more shared memory per block. */
template <class C> constexpr int stash_bytes() { return C::NT * C::MI * C::NI * 4 * (int)sizeof(float); }

template <class C, bool STASH>
__global__ void __launch_bounds__(C::NT, STASH ? 2 : 1)
    gram_tile_bf16(int64_t T, int64_t d, int64_t p, const bf16 *a, const bf16 *g, int64_t pairs, int64_t P,
                   float *partial) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *smem = (bf16 *)smem_raw;
    const int64_t i = blockIdx.y;
    const Mat A = {a + i * T * d, d, T, d % 8 == 0 && aligned16(a)};
    const Mat G = {g + i * T * p, p, T, p % 8 == 0 && aligned16(g)};
    float sum = 0.0f;
    for (int64_t q = blockIdx.x; q < pairs; q += P) {
        int64_t bs, bt;
        tri_pair(q, &bs, &bt);
        const int64_t rs = bs * TILE, rt = bt * TILE;
        float t; /* rows or columns past T are zero in both: they add nothing */
        if constexpr (STASH) {
            float *stash = (float *)(smem_raw + pipeline_bytes<C>()) + threadIdx.x;
            float acc[C::MI][C::NI][4];
            mainloop<C, true, true>(
                acc, smem, d, [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, A, rs, k0); },
                [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, A, rt, k0); });
#pragma unroll
            for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
                for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
                    for (int e = 0; e < 4; e++) stash[((mi * C::NI + ni) * 4 + e) * C::NT] = acc[mi][ni][e];
            mainloop<C, true, true>(
                acc, smem, p, [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, G, rs, k0); },
                [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, G, rt, k0); });
            t = 0.0f;
#pragma unroll
            for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
                for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
                    for (int e = 0; e < 4; e++) t = fmaf(stash[((mi * C::NI + ni) * 4 + e) * C::NT], acc[mi][ni][e], t);
        } else {
            /* two pipelines, not one through both products: switching accumulators inside one
             * loop measured 20% slower on an H100 */
            float acc1[C::MI][C::NI][4], acc2[C::MI][C::NI][4];
            mainloop<C, true, true>(
                acc1, smem, d, [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, A, rs, k0); },
                [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, A, rt, k0); });
            mainloop<C, true, true>(
                acc2, smem, p, [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, G, rs, k0); },
                [&](bf16 *s, int64_t k0) { load_kmajor<C>(s, G, rt, k0); });
            t = frob_acc<C>(acc1, acc2);
        }
        sum += bs == bt ? t : 2.0f * t;
    }
    sum = block_sum<C::NT>(sum);
    if (threadIdx.x == 0) partial[i * P + blockIdx.x] = sum;
}

template <class C>
__global__ void __launch_bounds__(C::NT, 2)
    grad_tile_bf16(int64_t T, int64_t d, int64_t p, const bf16 *a, const bf16 *g, int64_t tiles, int64_t nd, int64_t P,
                   float *partial) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *smem = (bf16 *)smem_raw;
    const int64_t i = blockIdx.y;
    const Mat A = {a + i * T * d, d, T, d % 8 == 0 && aligned16(a)};
    const Mat G = {g + i * T * p, p, T, p % 8 == 0 && aligned16(g)};
    float sum = 0.0f;
    for (int64_t q = blockIdx.x; q < tiles; q += P) {
        const int64_t cp = (q / nd) * TILE, cd = (q % nd) * TILE;
        float acc[C::MI][C::NI][4];
        mainloop<C, false, false>(
            acc, smem, T, [&](bf16 *s, int64_t k0) { load_mmajor<C>(s, G, k0, cp); },
            [&](bf16 *s, int64_t k0) { load_mmajor<C>(s, A, k0, cd); });
        sum += frob_acc<C>(acc, acc);
    }
    sum = block_sum<C::NT>(sum);
    if (threadIdx.x == 0) partial[i * P + blockIdx.x] = sum;
}

template <class C>
__global__ void __launch_bounds__(C::NT, 2) tied_rows_bf16(int64_t T, int64_t d, int64_t V, const bf16 *g,
                                                           const int32_t *ids, const bf16 *a, int64_t nd, float *r) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ int32_t id[TILE];
    bf16 *smem = (bf16 *)smem_raw;
    const int64_t i = blockIdx.y, u0 = (blockIdx.x / nd) * TILE, c0 = (blockIdx.x % nd) * TILE;
    const Mat A = {a + i * T * d, d, T, d % 8 == 0 && aligned16(a)};
    const bf16 *gi = g + i * T * V;
    for (int m = threadIdx.x; m < TILE; m += C::NT) id[m] = u0 + m < T ? ids[i * T + u0 + m] : -1;
    float acc[C::MI][C::NI][4];
    mainloop<C, false, false>(
        acc, smem, T, [&](bf16 *s, int64_t k0) { load_gathered<C>(s, gi, V, T, k0, id); },
        [&](bf16 *s, int64_t k0) { load_mmajor<C>(s, A, k0, c0); });
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
#pragma unroll
    for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t u = u0 + wm * C::MI * 16 + mi * 16 + (lane >> 2) + (e >> 1) * 8;
                const int64_t c = c0 + wn * C::NI * 8 + ni * 8 + (lane & 3) * 2 + (e & 1);
                if (u < T && c < d) r[(i * T + u) * d + c] = acc[mi][ni][e];
            }
}

/* ================================ f32: CUDA cores ============================================ */

constexpr int FBK = 8, FLD = TILE + 4; /* smem tiles [k][m], 528-byte rows (float4 aligned) */

/* One stage's operand tile in registers: 4 elements per thread, [k][m] order (k < 8, m < 128). */
struct Regs {
    float v[4];
};

/* element e = tid + j * 256 of a [k][m] tile: (k, m) = (e >> 7, e & 127) for M-major sources, and
 * (e & 7, e >> 3) for K-major ones, so that each warp reads consecutive addresses */
__device__ __forceinline__ void fload_kmajor(Regs &R, const float *p, int64_t ld, int64_t rows, int64_t r0,
                                             int64_t k0) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int e = threadIdx.x + j * THREADS, k = e & 7, m = e >> 3;
        const int64_t r = r0 + m, kk = k0 + k;
        R.v[j] = r < rows && kk < ld ? p[r * ld + kk] : 0.0f;
    }
}
__device__ __forceinline__ void fstore_kmajor(float *s, const Regs &R) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int e = threadIdx.x + j * THREADS;
        s[(e & 7) * FLD + (e >> 3)] = R.v[j];
    }
}
__device__ __forceinline__ void fload_mmajor(Regs &R, const float *p, int64_t ld, int64_t rows, int64_t k0,
                                             int64_t c0) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int e = threadIdx.x + j * THREADS, k = e >> 7, m = e & 127;
        const int64_t r = k0 + k, c = c0 + m;
        R.v[j] = r < rows && c < ld ? p[r * ld + c] : 0.0f;
    }
}
__device__ __forceinline__ void fload_gathered(Regs &R, const float *g, int64_t V, int64_t T, int64_t k0,
                                               const int32_t *id) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int e = threadIdx.x + j * THREADS, k = e >> 7, m = e & 127;
        const int64_t r = k0 + k;
        R.v[j] = r < T && id[m] >= 0 ? g[r * V + id[m]] : 0.0f;
    }
}
__device__ __forceinline__ void fstore_mmajor(float *s, const Regs &R) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int e = threadIdx.x + j * THREADS;
        s[(e >> 7) * FLD + (e & 127)] = R.v[j];
    }
}

/* acc[8][8] += A^T B over K, both sides loaded by la / lb into registers (stage k0) and stored by
 * sa_store / sb_store into [k][m] shared tiles; thread (tx, ty) of 16 x 16 owns rows
 * {ty*4 + 0..3, 64 + ty*4 + 0..3} and columns {tx*4 + 0..3, 64 + tx*4 + 0..3}. */
template <typename LA, typename SA, typename LB, typename SB>
__device__ __forceinline__ void fmainloop(float (&acc)[8][8], float *smem, int64_t K, LA la, SA sa_store, LB lb,
                                          SB sb_store) {
    float *sa = smem, *sb = smem + 2 * FBK * FLD;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
    for (int x = 0; x < 8; x++)
#pragma unroll
        for (int y = 0; y < 8; y++) acc[x][y] = 0.0f;
    const int64_t nk = (K + FBK - 1) / FBK;
    Regs ra, rb;
    __syncthreads(); /* the buffers may still be read by the previous mainloop */
    if (nk > 0) {
        la(ra, 0);
        lb(rb, 0);
        sa_store(sa, ra);
        sb_store(sb, rb);
    }
    __syncthreads();
    for (int64_t kt = 0; kt < nk; kt++) {
        const int cur = (int)(kt & 1);
        if (kt + 1 < nk) {
            la(ra, (kt + 1) * FBK);
            lb(rb, (kt + 1) * FBK);
        }
        const float *xa = sa + cur * FBK * FLD, *xb = sb + cur * FBK * FLD;
#pragma unroll
        for (int k = 0; k < FBK; k++) {
            float av[8], bv[8];
            const float4 a0 = *(const float4 *)(xa + k * FLD + ty * 4),
                         a1 = *(const float4 *)(xa + k * FLD + 64 + ty * 4);
            const float4 b0 = *(const float4 *)(xb + k * FLD + tx * 4),
                         b1 = *(const float4 *)(xb + k * FLD + 64 + tx * 4);
            av[0] = a0.x, av[1] = a0.y, av[2] = a0.z, av[3] = a0.w, av[4] = a1.x, av[5] = a1.y, av[6] = a1.z,
            av[7] = a1.w;
            bv[0] = b0.x, bv[1] = b0.y, bv[2] = b0.z, bv[3] = b0.w, bv[4] = b1.x, bv[5] = b1.y, bv[6] = b1.z,
            bv[7] = b1.w;
#pragma unroll
            for (int x = 0; x < 8; x++)
#pragma unroll
                for (int y = 0; y < 8; y++) acc[x][y] = fmaf(av[x], bv[y], acc[x][y]);
        }
        if (kt + 1 < nk) {
            sa_store(sa + (1 - cur) * FBK * FLD, ra);
            sb_store(sb + (1 - cur) * FBK * FLD, rb);
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(THREADS, 1) gram_tile_f32(int64_t T, int64_t d, int64_t p, const float *a,
                                                            const float *g, int64_t pairs, int64_t P, float *partial) {
    __shared__ __align__(16) float smem[4 * FBK * FLD];
    const int64_t i = blockIdx.y;
    const float *ai = a + i * T * d, *gi = g + i * T * p;
    float sum = 0.0f;
    for (int64_t q = blockIdx.x; q < pairs; q += P) {
        int64_t bs, bt;
        tri_pair(q, &bs, &bt);
        const int64_t rs = bs * TILE, rt = bt * TILE;
        float acc1[8][8], acc2[8][8];
        fmainloop(
            acc1, smem, d, [&](Regs &R, int64_t k0) { fload_kmajor(R, ai, d, T, rs, k0); },
            [](float *x, const Regs &R) { fstore_kmajor(x, R); },
            [&](Regs &R, int64_t k0) { fload_kmajor(R, ai, d, T, rt, k0); },
            [](float *x, const Regs &R) { fstore_kmajor(x, R); });
        fmainloop(
            acc2, smem, p, [&](Regs &R, int64_t k0) { fload_kmajor(R, gi, p, T, rs, k0); },
            [](float *x, const Regs &R) { fstore_kmajor(x, R); },
            [&](Regs &R, int64_t k0) { fload_kmajor(R, gi, p, T, rt, k0); },
            [](float *x, const Regs &R) { fstore_kmajor(x, R); });
        float t = 0.0f;
#pragma unroll
        for (int x = 0; x < 8; x++)
#pragma unroll
            for (int y = 0; y < 8; y++) t = fmaf(acc1[x][y], acc2[x][y], t);
        sum += bs == bt ? t : 2.0f * t;
    }
    sum = block_sum<THREADS>(sum);
    if (threadIdx.x == 0) partial[i * P + blockIdx.x] = sum;
}

__global__ void __launch_bounds__(THREADS, 2)
    grad_tile_f32(int64_t T, int64_t d, int64_t p, const float *a, const float *g, int64_t tiles, int64_t nd, int64_t P,
                  float *partial) {
    __shared__ __align__(16) float smem[4 * FBK * FLD];
    const int64_t i = blockIdx.y;
    const float *ai = a + i * T * d, *gi = g + i * T * p;
    float sum = 0.0f;
    for (int64_t q = blockIdx.x; q < tiles; q += P) {
        const int64_t cp = (q / nd) * TILE, cd = (q % nd) * TILE;
        float acc[8][8];
        fmainloop(
            acc, smem, T, [&](Regs &R, int64_t k0) { fload_mmajor(R, gi, p, T, k0, cp); },
            [](float *x, const Regs &R) { fstore_mmajor(x, R); },
            [&](Regs &R, int64_t k0) { fload_mmajor(R, ai, d, T, k0, cd); },
            [](float *x, const Regs &R) { fstore_mmajor(x, R); });
        float t = 0.0f;
#pragma unroll
        for (int x = 0; x < 8; x++)
#pragma unroll
            for (int y = 0; y < 8; y++) t = fmaf(acc[x][y], acc[x][y], t);
        sum += t;
    }
    sum = block_sum<THREADS>(sum);
    if (threadIdx.x == 0) partial[i * P + blockIdx.x] = sum;
}

__global__ void __launch_bounds__(THREADS, 2) tied_rows_f32(int64_t T, int64_t d, int64_t V, const float *g,
                                                            const int32_t *ids, const float *a, int64_t nd, float *r) {
    __shared__ __align__(16) float smem[4 * FBK * FLD];
    __shared__ int32_t id[TILE];
    const int64_t i = blockIdx.y, u0 = (blockIdx.x / nd) * TILE, c0 = (blockIdx.x % nd) * TILE;
    const float *ai = a + i * T * d, *gi = g + i * T * V;
    for (int m = threadIdx.x; m < TILE; m += THREADS) id[m] = u0 + m < T ? ids[i * T + u0 + m] : -1;
    float acc[8][8];
    fmainloop(
        acc, smem, T, [&](Regs &R, int64_t k0) { fload_gathered(R, gi, V, T, k0, id); },
        [](float *x, const Regs &R) { fstore_mmajor(x, R); },
        [&](Regs &R, int64_t k0) { fload_mmajor(R, ai, d, T, k0, c0); },
        [](float *x, const Regs &R) { fstore_mmajor(x, R); });
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
    for (int x = 0; x < 8; x++)
#pragma unroll
        for (int y = 0; y < 8; y++) {
            const int64_t u = u0 + (x < 4 ? ty * 4 + x : 64 + ty * 4 + x - 4);
            const int64_t c = c0 + (y < 4 ? tx * 4 + y : 64 + tx * 4 + y - 4);
            if (u < T && c < d) r[(i * T + u) * d + c] = acc[x][y];
        }
}

/* ---- launches --------------------------------------------------------------------------------- */

/* The bf16 configurations in use (dpk_dp_flash_select changes them, for benchmarks). */
int gram_variant = 0, grad_variant = 0;

/* Raises a kernel's dynamic shared-memory limit (past 48 KB it must be asked for), once. */
cudaError_t allow_smem(const void *kernel, int bytes) {
    static const void *done[16];
    static int n_done;
    for (int k = 0; k < n_done; k++)
        if (done[k] == kernel) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess && n_done < 16) done[n_done++] = kernel;
    return e;
}

/* blocks per sample: every item (tile) gets a block, within MAX_BLOCKS over all samples and the
 * scratch; a block walks items q, q + P, ... */
int64_t blocks_per_sample(int64_t items, int64_t B, size_t scratch_elems) {
    int64_t P = MAX_BLOCKS / (B > 0 ? B : 1);
    if (P < 1) P = 1;
    if (P > items) P = items;
    if ((size_t)P > scratch_elems) P = (int64_t)scratch_elems;
    return P > 0 ? P : 1;
}

template <class C, bool STASH = false>
cudaError_t launch_gram(dim3 grid, cudaStream_t s, int64_t T, int64_t d, int64_t p, const bf16 *a, const bf16 *g,
                        int64_t items, int64_t P, float *partial) {
    const int bytes = pipeline_bytes<C>() + (STASH ? stash_bytes<C>() : 0);
    cudaError_t e = allow_smem((const void *)gram_tile_bf16<C, STASH>, bytes);
    if (e != cudaSuccess) return e;
    static bool carved;     /* per instantiation: asked once, as allow_smem does */
    if (STASH && !carved) { /* two blocks of 104 KB per SM only with the largest carveout: ask (a hint) */
        e = cudaFuncSetAttribute((const void *)gram_tile_bf16<C, STASH>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared);
        if (e != cudaSuccess) return e;
        carved = true;
    }
    gram_tile_bf16<C, STASH><<<grid, C::NT, bytes, s>>>(T, d, p, a, g, items, P, partial);
    return cudaGetLastError();
}

template <class C>
cudaError_t launch_grad(dim3 grid, cudaStream_t s, int64_t T, int64_t d, int64_t p, const bf16 *a, const bf16 *g,
                        int64_t items, int64_t nd, int64_t P, float *partial) {
    cudaError_t e = allow_smem((const void *)grad_tile_bf16<C>, pipeline_bytes<C>());
    if (e != cudaSuccess) return e;
    grad_tile_bf16<C><<<grid, C::NT, pipeline_bytes<C>(), s>>>(T, d, p, a, g, items, nd, P, partial);
    return cudaGetLastError();
}

enum { GRAM = 0, GRAD = 1 };

cudaError_t tile_sumsq(int mode, cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t p, const void *a,
                       const void *g, float alpha, float *out, int accumulate, float *scratch, size_t scratch_elems) {
    if (B <= 0) return cudaSuccess;
    const int64_t nt = (T + TILE - 1) / TILE, np = (p + TILE - 1) / TILE, nd = (d + TILE - 1) / TILE;
    const int64_t items = mode == GRAM ? nt * (nt + 1) / 2 : np * nd;
    if (items == 0) return launch_finish(s, B, 0, scratch, alpha, out, accumulate); /* T, d or p is 0 */
    const int64_t P = blocks_per_sample(items, B, scratch_elems), per = samples_per_launch(B, P, scratch_elems);
    const size_t es = dtype == DPK_BF16 ? 2 : 4;
    for (int64_t b0 = 0; b0 < B; b0 += per) {
        const int64_t nb = B - b0 < per ? B - b0 : per;
        const dim3 grid((unsigned)P, (unsigned)nb);
        const char *ab = (const char *)a + (size_t)(b0 * T * d) * es, *gb = (const char *)g + (size_t)(b0 * T * p) * es;
        const bf16 *a16 = (const bf16 *)ab, *g16 = (const bf16 *)gb;
        cudaError_t e = cudaSuccess;
        if (dtype == DPK_BF16 && mode == GRAM) {
            if (gram_variant == 1)
                e = launch_gram<Cfg8w>(grid, s, T, d, p, a16, g16, items, P, scratch);
            else if (gram_variant == 2)
                e = launch_gram<Cfg8wNP>(grid, s, T, d, p, a16, g16, items, P, scratch);
            else if (gram_variant == 3)
                e = launch_gram<Cfg8wS2, true>(grid, s, T, d, p, a16, g16, items, P, scratch);
            else
                e = launch_gram<Cfg8w64>(grid, s, T, d, p, a16, g16, items, P, scratch);
        } else if (dtype == DPK_BF16) {
            if (grad_variant == 1)
                e = launch_grad<Cfg8w>(grid, s, T, d, p, a16, g16, items, nd, P, scratch);
            else if (grad_variant == 2)
                e = launch_grad<Cfg4w64>(grid, s, T, d, p, a16, g16, items, nd, P, scratch);
            else
                e = launch_grad<Cfg8w64>(grid, s, T, d, p, a16, g16, items, nd, P, scratch);
        } else if (mode == GRAM) {
            gram_tile_f32<<<grid, THREADS, 0, s>>>(T, d, p, (const float *)ab, (const float *)gb, items, P, scratch);
            e = cudaGetLastError();
        } else {
            grad_tile_f32<<<grid, THREADS, 0, s>>>(T, d, p, (const float *)ab, (const float *)gb, items, nd, P,
                                                   scratch);
            e = cudaGetLastError();
        }
        if (e != cudaSuccess) return e;
        e = launch_finish(s, nb, P, scratch, alpha, out + b0, accumulate);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

template <class C>
cudaError_t launch_tied(dim3 grid, cudaStream_t s, int64_t T, int64_t d, int64_t V, const bf16 *g, const int32_t *ids,
                        const bf16 *a, int64_t nd, float *r) {
    cudaError_t e = allow_smem((const void *)tied_rows_bf16<C>, pipeline_bytes<C>());
    if (e != cudaSuccess) return e;
    tied_rows_bf16<C><<<grid, C::NT, pipeline_bytes<C>(), s>>>(T, d, V, g, ids, a, nd, r);
    return cudaGetLastError();
}

} // namespace dpk_flash

using namespace dpk_flash;

extern "C" cudaError_t dpk_dp_gram_tile_sumsq(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t p,
                                              const void *a, const void *g, float alpha, float *out, int accumulate,
                                              float *scratch, size_t scratch_elems) {
    return tile_sumsq(GRAM, s, dtype, B, T, d, p, a, g, alpha, out, accumulate, scratch, scratch_elems);
}

extern "C" cudaError_t dpk_dp_grad_tile_sumsq(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t p,
                                              const void *a, const void *g, float alpha, float *out, int accumulate,
                                              float *scratch, size_t scratch_elems) {
    return tile_sumsq(GRAD, s, dtype, B, T, d, p, a, g, alpha, out, accumulate, scratch, scratch_elems);
}

extern "C" cudaError_t dpk_dp_tied_rows(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t V,
                                        const void *g, const int32_t *ids, const void *a, float *r) {
    if (B <= 0 || T <= 0 || d <= 0) return cudaSuccess;
    const int64_t nu = (T + TILE - 1) / TILE, nd = (d + TILE - 1) / TILE;
    const size_t es = dtype == DPK_BF16 ? 2 : 4;
    for (int64_t b0 = 0; b0 < B; b0 += 65535) {
        const int64_t nb = B - b0 < 65535 ? B - b0 : 65535;
        const dim3 grid((unsigned)(nu * nd), (unsigned)nb);
        const char *gb = (const char *)g + (size_t)(b0 * T * V) * es, *ab = (const char *)a + (size_t)(b0 * T * d) * es;
        cudaError_t e;
        if (dtype == DPK_BF16 && grad_variant == 1)
            e = launch_tied<Cfg8w>(grid, s, T, d, V, (const bf16 *)gb, ids + b0 * T, (const bf16 *)ab, nd,
                                   r + b0 * T * d);
        else if (dtype == DPK_BF16)
            e = launch_tied<Cfg8w64>(grid, s, T, d, V, (const bf16 *)gb, ids + b0 * T, (const bf16 *)ab, nd,
                                     r + b0 * T * d);
        else {
            tied_rows_f32<<<grid, THREADS, 0, s>>>(T, d, V, (const float *)gb, ids + b0 * T, (const float *)ab, nd,
                                                   r + b0 * T * d);
            e = cudaGetLastError();
        }
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" void dpk_dp_flash_select(int gram, int grad) {
    gram_variant = gram;
    grad_variant = grad;
}
