/* attention_fwd.cu: causal self-attention forward, FlashAttention-2 style (layer_ops.h): no
 * T x T matrix in memory; per (sample, head) query block an online softmax over key blocks.
 *
 * Cost per layer (causal, B samples, H heads of hd, d = H hd): 2 B H T^2 hd flops for S = QK^T
 * and PV each over the lower triangle, i.e. ~2 B T^2 d in total (4 B T^2 d without the mask);
 * bytes: read q, k, v once each from L2's point of view (3 N d es), write out (N d es) and lse.
 * Compute-bound at any T of interest.
 *
 * Tensor-core kernel (bf16, hd 64 or 128), desk check:
 *  - grid (T / 128 query blocks, B H); block x runs query block nqb - 1 - x, so the longest
 *    (diagonal-far) blocks start first and the short ones fill the tail.
 *  - 8 warps; warp w owns query rows q0 + 16w .. + 15 (one m16 tile); Q is loaded once into
 *    registers (HD/16 A fragments).
 *  - key blocks of 64, kb = 0 .. last key block that holds a key <= the block's last row
 *    (keys past that are masked for every row: skipped). K and V tiles are double-buffered
 *    with cp.async: the copy of block kb + 1 is in flight while block kb is computed.
 *    Group accounting: group 0 = Q + KV(0); iteration kb commits group kb + 1 (KV(kb + 1), or
 *    empty on the last) and waits for all but one group, so KV(kb) has landed; the barrier
 *    after the wait publishes every thread's copies; the barrier at the end of the iteration
 *    keeps buffer kb & 1 alive until every warp is done with it (it is refilled at kb + 1).
 *  - a warp skips a key block with k0 > its last row (all masked); since k0 and the warp's
 *    first row are multiples of 16, a block it does compute has k0 <= its first row, so every
 *    row keeps at least key k0 < T unmasked: the running max is finite after the first block.
 *  - S = Q K^T (16 x 64 per warp, f32), scaled by scale*log2(e); masked (key > row, or
 *    key >= T) to -inf only in blocks that reach the diagonal or the end.
 *  - online softmax per row (g and g + 8 of the fragment): max over the quad (shfl_xor 1, 2),
 *    p = exp2(s - m), the per-thread partial l and O rescaled by exp2(m_old - m_new); l is
 *    summed over the quad once at the end (the rescale factor is uniform across it).
 *  - O += P V: P re-packed from the S accumulators as A fragments, V by ldmatrix.trans.
 *  - rows >= T (padding of the last block) compute harmlessly on zero-filled Q and are never
 *    stored; warps whose rows are all >= T skip the work.
 *  - out row i = O / l (bf16 pairs, 4-byte stores); lse = (m + log2 l) ln 2.
 *
 * SIMT kernel (f32, and bf16 with other head dims up to 256): the same blocking with f32 tiles
 * in shared memory and 256 threads of 4 x 4 (or 2 x 2) micro-tiles (attention_common.cuh). */
#include "attention_common.cuh"
#include "layer_kernels.h"

/* ---- tensor cores ---------------------------------------------------------------------------- */

#define FWD_BR 128
#define FWD_BC 64
#define FWD_THREADS 256

template <int HD> static constexpr size_t fwd_mma_smem() { return (size_t)(FWD_BR + 4 * FWD_BC) * (HD + 8) * 2; }

template <int HD>
__global__ void __launch_bounds__(FWD_THREADS, 1)
    attn_fwd_mma_kernel(bf16 *__restrict__ out, float *__restrict__ lse, const bf16 *__restrict__ q,
                        const bf16 *__restrict__ k, const bf16 *__restrict__ v, int64_t ld_q, int64_t ld_kv, int T,
                        int H, int G, float scale_log2) {
    constexpr int BR = FWD_BR, BC = FWD_BC, LDS = HD + 8, KSTEPS = HD / 16, NT = BC / 8, OT = HD / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw); /* BR x LDS */
    bf16 *sK = sQ + BR * LDS;                      /* 2 buffers of BC x LDS */
    bf16 *sV = sK + 2 * BC * LDS;                  /* 2 buffers of BC x LDS */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nqb = (T + BR - 1) / BR, qb = nqb - 1 - (int)blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = qb * BR;
    const int64_t row0 = (int64_t)b * T; /* token row of (b, t = 0) */
    const bf16 *qg = q + row0 * ld_q + (int64_t)h * HD;
    const bf16 *kg = k + row0 * ld_kv + (int64_t)(h / G) * HD; /* the group's kv head */
    const bf16 *vg = v + row0 * ld_kv + (int64_t)(h / G) * HD;
    const int q_last = min(q0 + BR, T) - 1;
    const int nkb = q_last / BC + 1;

    cp_tile<HD, BR, FWD_THREADS>(sQ, qg, ld_q, q0, T);
    cp_tile<HD, BC, FWD_THREADS>(sK, kg, ld_kv, 0, T);
    cp_tile<HD, BC, FWD_THREADS>(sV, vg, ld_kv, 0, T);
    cp_async_commit();

    const int wq0 = q0 + warp * 16; /* first query row of this warp */
    const bool warp_active = wq0 < T;
    uint32_t qf[KSTEPS][4];
    float o[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int kb = 0; kb < nkb; kb++) {
        const int buf = kb & 1;
        if (kb + 1 < nkb) {
            cp_tile<HD, BC, FWD_THREADS>(sK + (buf ^ 1) * BC * LDS, kg, ld_kv, (kb + 1) * BC, T);
            cp_tile<HD, BC, FWD_THREADS>(sV + (buf ^ 1) * BC * LDS, vg, ld_kv, (kb + 1) * BC, T);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (kb == 0) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++)
                ldsm_x4(qf[kk], sQ + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
        }
        const int k0 = kb * BC;
        if (warp_active && k0 <= wq0 + 15) {
            const bf16 *Kt = sK + buf * BC * LDS, *Vt = sV + buf * BC * LDS;
            float s[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
#pragma unroll
                for (int n2 = 0; n2 < BC / 16; n2++) {
                    uint32_t bfr[4];
                    ldsm_x4(bfr, Kt + (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
                    mma_bf16(s[2 * n2], qf[kk], bfr[0], bfr[1]);
                    mma_bf16(s[2 * n2 + 1], qf[kk], bfr[2], bfr[3]);
                }
            }
            const bool need_mask = k0 + BC - 1 > wq0 || k0 + BC > T;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = s[j][e] * scale_log2;
                    if (need_mask) {
                        const int row = wq0 + (lane >> 2) + ((e >> 1) << 3);
                        const int col = k0 + j * 8 + (lane & 3) * 2 + (e & 1);
                        if (col > row || col >= T) x = -INFINITY;
                    }
                    s[j][e] = x;
                }
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                float mx = m[hf];
#pragma unroll
                for (int j = 0; j < NT; j++) mx = fmaxf(mx, fmaxf(s[j][2 * hf], s[j][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float base = mx == -INFINITY ? 0.0f : mx;
                const float corr = fast_exp2(m[hf] - base);
                m[hf] = mx;
                float rs = 0.0f;
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float p = fast_exp2(s[j][2 * hf + e] - base);
                        s[j][2 * hf + e] = p;
                        rs += p;
                    }
                l[hf] = l[hf] * corr + rs;
#pragma unroll
                for (int i = 0; i < OT; i++) {
                    o[i][2 * hf] *= corr;
                    o[i][2 * hf + 1] *= corr;
                }
            }
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                uint32_t a[4];
                acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
                for (int c2 = 0; c2 < HD / 16; c2++) {
                    uint32_t bfr[4];
                    ldsm_x4_trans(bfr, Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + c2 * 16 +
                                           (lane >> 4) * 8);
                    mma_bf16(o[2 * c2], a, bfr[0], bfr[1]);
                    mma_bf16(o[2 * c2 + 1], a, bfr[2], bfr[3]);
                }
            }
        }
        __syncthreads();
    }

    const int64_t ld_out = (int64_t)H * HD;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float lt = l[hf];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        const int row = wq0 + (lane >> 2) + hf * 8;
        if (row < T) {
            const float inv = 1.0f / lt;
            bf16 *orow = out + (row0 + row) * ld_out + (int64_t)h * HD;
#pragma unroll
            for (int i = 0; i < OT; i++) {
                const int col = i * 8 + (lane & 3) * 2;
                *reinterpret_cast<uint32_t *>(orow + col) = pack_bf16x2(o[i][2 * hf] * inv, o[i][2 * hf + 1] * inv);
            }
            if ((lane & 3) == 0) lse[(int64_t)bh * T + row] = (m[hf] + log2f(lt)) * ATT_LN2;
        }
    }
}

template <int HD>
static cudaError_t fwd_mma_launch(cudaStream_t s, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                  int64_t ld_q, int64_t ld_kv, int B, int T, int H, int G, float scale) {
    const size_t smem = fwd_mma_smem<HD>();
    static bool limit_set = false;
    if (!limit_set) {
        cudaError_t e = att_smem_limit(attn_fwd_mma_kernel<HD>, smem);
        if (e != cudaSuccess) return e;
        limit_set = true;
    }
    dim3 grid((unsigned)((T + FWD_BR - 1) / FWD_BR), (unsigned)(B * H));
    attn_fwd_mma_kernel<HD><<<grid, FWD_THREADS, smem, s>>>(out, lse, q, k, v, ld_q, ld_kv, T, H, G, scale * ATT_LOG2E);
    return cudaGetLastError();
}

/* ---- SIMT ------------------------------------------------------------------------------------ */

template <int HD> struct FwdSimtCfg {
    static constexpr int BR = HD <= 128 ? 64 : 32, BC = HD <= 128 ? 64 : 32;
    static constexpr size_t smem = ((size_t)(BR + 2 * BC) * (HD + 4) + (size_t)BR * (BC + 4)) * sizeof(float);
};

template <typename T, int HD>
__global__ void __launch_bounds__(256, 1)
    attn_fwd_simt_kernel(T *__restrict__ out, float *__restrict__ lse, const T *__restrict__ q, const T *__restrict__ k,
                         const T *__restrict__ v, int64_t ld_q, int64_t ld_kv, int T_, int H, int G, int hd,
                         float scale_log2) {
    constexpr int BR = FwdSimtCfg<HD>::BR, BC = FwdSimtCfg<HD>::BC, LDF = HD + 4, LDP = BC + 4;
    constexpr int RM = BR / 16, RN = BC / 16, CO = HD / 64;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sQ = reinterpret_cast<float *>(smem_raw); /* BR x LDF */
    float *sK = sQ + BR * LDF;                       /* BC x LDF */
    float *sV = sK + BC * LDF;                       /* BC x LDF */
    float *sP = sV + BC * LDF;                       /* BR x LDP */

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int nqb = (T_ + BR - 1) / BR, qb = nqb - 1 - (int)blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = qb * BR;
    const int64_t row0 = (int64_t)b * T_;
    const T *qg = q + row0 * ld_q + (int64_t)h * hd;
    const T *kg = k + row0 * ld_kv + (int64_t)(h / G) * hd; /* the group's kv head */
    const T *vg = v + row0 * ld_kv + (int64_t)(h / G) * hd;
    const int nkb = (min(q0 + BR, T_) - 1) / BC + 1;

    simt_load_tile<T, HD>(sQ, qg, ld_q, q0, BR, T_, hd);
    float o[RM][CO][4], m[RM], l[RM];
#pragma unroll
    for (int i = 0; i < RM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int cc = 0; cc < CO; cc++) o[i][cc][0] = o[i][cc][1] = o[i][cc][2] = o[i][cc][3] = 0.0f;
    }
    for (int kb = 0; kb < nkb; kb++) {
        const int k0 = kb * BC;
        __syncthreads(); /* the previous block's sK, sV, sP are consumed */
        simt_load_tile<T, HD>(sK, kg, ld_kv, k0, BC, T_, hd);
        simt_load_tile<T, HD>(sV, vg, ld_kv, k0, BC, T_, hd);
        __syncthreads();
        float s[RM][RN];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) s[i][j] = 0.0f;
        simt_dot<HD, RM, RN>(s, sQ, sK, ty, tx);
        const bool need_mask = k0 + BC - 1 > q0 || k0 + BC > T_;
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int row = q0 + ty + 16 * i;
            float mx = m[i];
#pragma unroll
            for (int j = 0; j < RN; j++) {
                const int col = k0 + tx + 16 * j;
                float x = s[i][j] * scale_log2;
                if (need_mask && (col > row || col >= T_)) x = -INFINITY;
                s[i][j] = x;
                mx = fmaxf(mx, x);
            }
            mx = half_warp_max(mx);
            const float base = mx == -INFINITY ? 0.0f : mx;
            const float corr = fast_exp2(m[i] - base);
            m[i] = mx;
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < RN; j++) {
                const float p = fast_exp2(s[i][j] - base);
                sP[(ty + 16 * i) * LDP + tx + 16 * j] = p;
                rs += p;
            }
            l[i] = l[i] * corr + rs;
#pragma unroll
            for (int cc = 0; cc < CO; cc++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[i][cc][e] *= corr;
        }
        __syncthreads();
        simt_pm<HD, BC, RM>(o, sP, sV, ty, tx);
    }
    const int64_t ld_out = (int64_t)H * hd;
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const float lt = half_warp_sum(l[i]);
        const int row = q0 + ty + 16 * i;
        if (row < T_) {
            const float inv = 1.0f / lt;
            T *orow = out + (row0 + row) * ld_out + (int64_t)h * hd;
#pragma unroll
            for (int cc = 0; cc < CO; cc++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 4 * tx + 64 * cc + e;
                    if (c < hd) stf(orow + c, o[i][cc][e] * inv);
                }
            if (tx == 0) lse[(int64_t)bh * T_ + row] = (m[i] + log2f(lt)) * ATT_LN2;
        }
    }
}

template <typename T, int HD>
static cudaError_t fwd_simt_launch(cudaStream_t s, T *out, float *lse, const T *q, const T *k, const T *v, int64_t ld_q,
                                   int64_t ld_kv, int B, int T_, int H, int G, int hd, float scale) {
    const size_t smem = FwdSimtCfg<HD>::smem;
    static bool limit_set = false;
    if (!limit_set) {
        cudaError_t e = att_smem_limit(attn_fwd_simt_kernel<T, HD>, smem);
        if (e != cudaSuccess) return e;
        limit_set = true;
    }
    dim3 grid((unsigned)((T_ + FwdSimtCfg<HD>::BR - 1) / FwdSimtCfg<HD>::BR), (unsigned)(B * H));
    attn_fwd_simt_kernel<T, HD>
        <<<grid, 256, smem, s>>>(out, lse, q, k, v, ld_q, ld_kv, T_, H, G, hd, scale * ATT_LOG2E);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t fwd_simt(cudaStream_t s, T *out, float *lse, const T *q, const T *k, const T *v, int64_t ld_q,
                            int64_t ld_kv, int B, int T_, int H, int G, int hd, float scale) {
    switch (att_simt_hd(hd)) {
    case 64: return fwd_simt_launch<T, 64>(s, out, lse, q, k, v, ld_q, ld_kv, B, T_, H, G, hd, scale);
    case 128: return fwd_simt_launch<T, 128>(s, out, lse, q, k, v, ld_q, ld_kv, B, T_, H, G, hd, scale);
    case 256: return fwd_simt_launch<T, 256>(s, out, lse, q, k, v, ld_q, ld_kv, B, T_, H, G, hd, scale);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" int dpk_attention_uses_mma(int dtype, int64_t hd, int64_t ld_q, int64_t ld_kv, const void *q, const void *k,
                                      const void *v) {
    return att_mma_ok(dtype, hd, ld_q, ld_kv, q, k, v);
}

extern "C" cudaError_t dpk_attention_forward(cudaStream_t s, int dtype, void *out, float *lse, const void *q,
                                             const void *k, const void *v, int64_t ld_q, int64_t ld_kv, int64_t B,
                                             int64_t T, int64_t H, int64_t Hkv, int64_t hd, float scale) {
    if (B <= 0 || T <= 0 || H <= 0) return cudaSuccess;
    if (hd <= 0 || hd > 256 || Hkv <= 0 || H % Hkv || ld_q < H * hd || ld_kv < Hkv * hd || B * H > 65535 ||
        B * T > INT32_MAX)
        return cudaErrorInvalidValue;
    const int G = (int)(H / Hkv);
    if (att_mma_ok(dtype, hd, ld_q, ld_kv, q, k, v) && ((uintptr_t)out & 3u) == 0) {
        if (hd == 64)
            return fwd_mma_launch<64>(s, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, ld_q,
                                      ld_kv, (int)B, (int)T, (int)H, G, scale);
        return fwd_mma_launch<128>(s, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, ld_q, ld_kv,
                                   (int)B, (int)T, (int)H, G, scale);
    }
    if (dtype == DPK_BF16)
        return fwd_simt<bf16>(s, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, ld_q, ld_kv,
                              (int)B, (int)T, (int)H, G, (int)hd, scale);
    return fwd_simt<float>(s, (float *)out, lse, (const float *)q, (const float *)k, (const float *)v, ld_q, ld_kv,
                           (int)B, (int)T, (int)H, G, (int)hd, scale);
}
