/* attention_bwd.cu: causal self-attention backward, FlashAttention-2 style, deterministic: no
 * atomics. Three launches:
 *   delta   delta[bh, i] = rowsum(dout_i * out_i), one warp per (token, head);
 *   dK, dV  one block per key block of a kv head, walking the query blocks at or after it of
 *           each query head of its group in turn (grouped-query: H / Hkv heads per kv head):
 *             S^T = K Q^T, P^T = exp(scale S^T - lse), dV += P^T dO,
 *             dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += scale dS^T Q;
 *   dQ      one block per query block, walking the key blocks at or before it:
 *             S = Q K^T, P, dP = dO V^T, dS = P (dP - delta), dQ += scale dS K.
 * Each gradient row is owned by one block, so it is written once, in a fixed order (a kv head's
 * dK, dV sum its group's heads in increasing order in that block's registers). The price
 * is recomputing S and dP in the dQ pass: 7 instead of FA2's 5 block products, i.e. about
 * 3.5 B T^2 d flops per layer over the causal triangle (2.5 B T^2 d with atomics).
 *
 * Tensor-core kernels (bf16, hd 64/128), desk check:
 *  dK/dV: grid (T / 64 key blocks, B Hkv), 4 warps; warp w owns keys k0 + 16w .. + 15 as the
 *    m16 rows of S^T, dP^T, dK and dV (f32 accumulators for dK, dV stay in registers for the
 *    whole walk). Query tiles of BQ (32 at hd 128, 64 at hd 64) from the tile holding key k0
 *    to the end, for each query head of the kv head's group in turn (one flat walk of
 *    G x tiles steps); Q, dO, lse and delta tiles double-buffered with cp.async (same group
 *    accounting as the forward); K and V tiles are read by ldmatrix every tile (registers
 *    are spent on the accumulators). A warp skips a query tile whose last query precedes its
 *    first key. The mask (query < key, query >= T, key >= T) sets P to 0 exactly, and only in
 *    tiles that reach the diagonal or the end. lse and delta of rows >= T are zero-filled and
 *    masked. dK/dV rows >= T are not stored.
 *  dQ: grid (T / 64 query blocks, reversed: longest first, B H), 4 warps; warp w owns query
 *    rows q0 + 16w .. + 15; Q and dO fragments held in registers; key tiles of BK (32 at hd
 *    128, 64 at hd 64) double-buffered from key 0 to the last one <= the block's last row; a
 *    warp skips key tiles past its last row; lse and delta of its two fragment rows in
 *    registers.
 * SIMT kernels (f32, other head dims): the same walks over f32 tiles (attention_common.cuh),
 *    P^T and dS^T (or dS) staged in shared memory for the second product. */
#include "attention_common.cuh"
#include "layer_kernels.h"

/* ---- delta ----------------------------------------------------------------------------------- */

template <typename T>
__global__ void __launch_bounds__(256) attn_delta_kernel(float *__restrict__ delta, const T *__restrict__ dout,
                                                         const T *__restrict__ out, int64_t N, int T_, int H, int hd) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * 8;
    for (int64_t w = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); w < N * H; w += warps) {
        const int64_t n = w / H;
        const int h = (int)(w % H);
        const int64_t o = n * H * hd + (int64_t)h * hd;
        float s = 0.0f;
        for (int c = lane; c < hd; c += 32) s += ldf(dout + o + c) * ldf(out + o + c);
        s = warp_sum(s);
        if (lane == 0) {
            const int64_t b = n / T_, t = n % T_;
            delta[(b * H + h) * T_ + t] = s;
        }
    }
}

/* ---- tensor cores: dK, dV -------------------------------------------------------------------- */

#define BWD_THREADS 128
#define BWD_BK 64 /* keys per dK/dV block (4 warps x 16) */
#define BWD_BQ 64 /* queries per dQ block (4 warps x 16) */

template <int HD> struct BwdMma {
    static constexpr int TQ = HD == 128 ? 32 : 64; /* query tile of the dK/dV walk */
    static constexpr int TK = HD == 128 ? 32 : 64; /* key tile of the dQ walk */
    static constexpr int LDS = HD + 8;
    static constexpr size_t dkdv_smem = (size_t)(2 * BWD_BK + 4 * TQ) * LDS * 2 + (size_t)4 * TQ * sizeof(float);
    static constexpr size_t dq_smem = (size_t)(2 * BWD_BQ + 4 * TK) * LDS * 2;
};

template <int HD>
__global__ void __launch_bounds__(BWD_THREADS)
    attn_bwd_dkdv_mma_kernel(bf16 *__restrict__ dk, bf16 *__restrict__ dv, int64_t ld_dkv,
                             const bf16 *__restrict__ dout, const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                             const bf16 *__restrict__ v, int64_t ld_q, int64_t ld_kv, const float *__restrict__ lse,
                             const float *__restrict__ delta, int T, int H, int G, float scale, float scale_log2) {
    constexpr int BK = BWD_BK, TQ = BwdMma<HD>::TQ, LDS = BwdMma<HD>::LDS, KSTEPS = HD / 16, NQ = TQ / 8, OT = HD / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_raw);            /* BK x LDS */
    bf16 *sV = sK + BK * LDS;                                 /* BK x LDS */
    bf16 *sQ = sV + BK * LDS;                                 /* 2 x TQ x LDS */
    bf16 *sO = sQ + 2 * TQ * LDS;                             /* dO: 2 x TQ x LDS */
    float *sL = reinterpret_cast<float *>(sO + 2 * TQ * LDS); /* 2 x TQ: lse */
    float *sD = sL + 2 * TQ;                                  /* 2 x TQ: delta */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int Hkv = H / G, b = blockIdx.y / Hkv, kvh = blockIdx.y % Hkv;
    const int k0 = blockIdx.x * BK;
    const int64_t row0 = (int64_t)b * T, ld_out = (int64_t)H * HD;
    const bf16 *kg = k + row0 * ld_kv + (int64_t)kvh * HD;
    const bf16 *vg = v + row0 * ld_kv + (int64_t)kvh * HD;
    const int qt0 = k0 / TQ, nqt = (T + TQ - 1) / TQ, nper = nqt - qt0;

    /* step it of the walk: query tile qt0 + it % nper of the group's head it / nper */
    auto load_q_tile = [&](int it, int buf) {
        const int h = kvh * G + it / nper, qs = (qt0 + it % nper) * TQ;
        const bf16 *qg = q + row0 * ld_q + (int64_t)h * HD;
        const bf16 *og = dout + row0 * ld_out + (int64_t)h * HD;
        const float *Lg = lse + ((int64_t)b * H + h) * T, *Dg = delta + ((int64_t)b * H + h) * T;
        cp_tile<HD, TQ, BWD_THREADS>(sQ + buf * TQ * LDS, qg, ld_q, qs, T);
        cp_tile<HD, TQ, BWD_THREADS>(sO + buf * TQ * LDS, og, ld_out, qs, T);
        for (int i = threadIdx.x; i < TQ; i += BWD_THREADS) {
            const bool ok = qs + i < T;
            cp_async4(sL + buf * TQ + i, ok ? Lg + qs + i : Lg, ok);
            cp_async4(sD + buf * TQ + i, ok ? Dg + qs + i : Dg, ok);
        }
    };

    cp_tile<HD, BK, BWD_THREADS>(sK, kg, ld_kv, k0, T);
    cp_tile<HD, BK, BWD_THREADS>(sV, vg, ld_kv, k0, T);
    load_q_tile(0, 0);
    cp_async_commit();

    const int wk0 = k0 + warp * 16; /* first key of this warp */
    float dK[OT][4], dV[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dK[i][e] = dV[i][e] = 0.0f;

    for (int it = 0; it < G * nper; it++) {
        const int buf = it & 1;
        if (it + 1 < G * nper) load_q_tile(it + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int qs = (qt0 + it % nper) * TQ;
        if (wk0 < T && qs + TQ - 1 >= wk0) {
            const bf16 *Qt = sQ + buf * TQ * LDS, *Ot = sO + buf * TQ * LDS;
            const float *Lt = sL + buf * TQ, *Dt = sD + buf * TQ;
            float s[NQ][4], dp[NQ][4];
#pragma unroll
            for (int j = 0; j < NQ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                uint32_t ka[4], va[4];
                ldsm_x4(ka, sK + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
                ldsm_x4(va, sV + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int n2 = 0; n2 < TQ / 16; n2++) {
                    const int off = (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + kk * 16 + ((lane >> 3) & 1) * 8;
                    uint32_t qb[4], ob[4];
                    ldsm_x4(qb, Qt + off);
                    ldsm_x4(ob, Ot + off);
                    mma_bf16(s[2 * n2], ka, qb[0], qb[1]);
                    mma_bf16(s[2 * n2 + 1], ka, qb[2], qb[3]);
                    mma_bf16(dp[2 * n2], va, ob[0], ob[1]);
                    mma_bf16(dp[2 * n2 + 1], va, ob[2], ob[3]);
                }
            }
            const bool need_mask = qs < wk0 + 15 || qs + TQ > T || wk0 + 16 > T;
#pragma unroll
            for (int j = 0; j < NQ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int ql = j * 8 + (lane & 3) * 2 + (e & 1);
                    float p = fast_exp2(s[j][e] * scale_log2 - Lt[ql] * ATT_LOG2E);
                    if (need_mask) {
                        const int key = wk0 + (lane >> 2) + ((e >> 1) << 3), qi = qs + ql;
                        if (qi < key || qi >= T || key >= T) p = 0.0f;
                    }
                    s[j][e] = p;                        /* P^T */
                    dp[j][e] = p * (dp[j][e] - Dt[ql]); /* dS^T */
                }
#pragma unroll
            for (int kk = 0; kk < TQ / 16; kk++) {
                uint32_t pa[4], sa[4];
                acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
                acc_to_a(sa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
                for (int c2 = 0; c2 < HD / 16; c2++) {
                    const int off = (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + c2 * 16 + (lane >> 4) * 8;
                    uint32_t ob[4], qb[4];
                    ldsm_x4_trans(ob, Ot + off);
                    ldsm_x4_trans(qb, Qt + off);
                    mma_bf16(dV[2 * c2], pa, ob[0], ob[1]);
                    mma_bf16(dV[2 * c2 + 1], pa, ob[2], ob[3]);
                    mma_bf16(dK[2 * c2], sa, qb[0], qb[1]);
                    mma_bf16(dK[2 * c2 + 1], sa, qb[2], qb[3]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int key = wk0 + (lane >> 2) + hf * 8;
        if (key < T) {
            bf16 *dkr = dk + (row0 + key) * ld_dkv + (int64_t)kvh * HD;
            bf16 *dvr = dv + (row0 + key) * ld_dkv + (int64_t)kvh * HD;
#pragma unroll
            for (int i = 0; i < OT; i++) {
                const int col = i * 8 + (lane & 3) * 2;
                *reinterpret_cast<uint32_t *>(dkr + col) =
                    pack_bf16x2(dK[i][2 * hf] * scale, dK[i][2 * hf + 1] * scale);
                *reinterpret_cast<uint32_t *>(dvr + col) = pack_bf16x2(dV[i][2 * hf], dV[i][2 * hf + 1]);
            }
        }
    }
}

/* ---- tensor cores: dQ ------------------------------------------------------------------------ */

template <int HD>
__global__ void __launch_bounds__(BWD_THREADS)
    attn_bwd_dq_mma_kernel(bf16 *__restrict__ dq, int64_t ld_dq, const bf16 *__restrict__ dout,
                           const bf16 *__restrict__ q, const bf16 *__restrict__ k, const bf16 *__restrict__ v,
                           int64_t ld_q, int64_t ld_kv, const float *__restrict__ lse, const float *__restrict__ delta,
                           int T, int H, int G, float scale, float scale_log2) {
    constexpr int BQ = BWD_BQ, TK = BwdMma<HD>::TK, LDS = BwdMma<HD>::LDS, KSTEPS = HD / 16, NK = TK / 8, OT = HD / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw); /* BQ x LDS */
    bf16 *sO = sQ + BQ * LDS;                      /* dO: BQ x LDS */
    bf16 *sK = sO + BQ * LDS;                      /* 2 x TK x LDS */
    bf16 *sV = sK + 2 * TK * LDS;                  /* 2 x TK x LDS */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nqb = (T + BQ - 1) / BQ, qb = nqb - 1 - (int)blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = qb * BQ;
    const int64_t row0 = (int64_t)b * T, ld_out = (int64_t)H * HD;
    const bf16 *qg = q + row0 * ld_q + (int64_t)h * HD;
    const bf16 *kg = k + row0 * ld_kv + (int64_t)(h / G) * HD; /* the group's kv head */
    const bf16 *vg = v + row0 * ld_kv + (int64_t)(h / G) * HD;
    const bf16 *og = dout + row0 * ld_out + (int64_t)h * HD;
    const int nkt = (min(q0 + BQ, T) - 1) / TK + 1;

    cp_tile<HD, BQ, BWD_THREADS>(sQ, qg, ld_q, q0, T);
    cp_tile<HD, BQ, BWD_THREADS>(sO, og, ld_out, q0, T);
    cp_tile<HD, TK, BWD_THREADS>(sK, kg, ld_kv, 0, T);
    cp_tile<HD, TK, BWD_THREADS>(sV, vg, ld_kv, 0, T);
    cp_async_commit();

    const int wq0 = q0 + warp * 16;
    float L2[2], Dl[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int row = wq0 + (lane >> 2) + hf * 8;
        L2[hf] = row < T ? lse[(int64_t)bh * T + row] * ATT_LOG2E : 0.0f;
        Dl[hf] = row < T ? delta[(int64_t)bh * T + row] : 0.0f;
    }
    uint32_t qf[KSTEPS][4], of[KSTEPS][4];
    float dQ[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++) dQ[i][0] = dQ[i][1] = dQ[i][2] = dQ[i][3] = 0.0f;

    for (int kt = 0; kt < nkt; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < nkt) {
            cp_tile<HD, TK, BWD_THREADS>(sK + (buf ^ 1) * TK * LDS, kg, ld_kv, (kt + 1) * TK, T);
            cp_tile<HD, TK, BWD_THREADS>(sV + (buf ^ 1) * TK * LDS, vg, ld_kv, (kt + 1) * TK, T);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (kt == 0) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                ldsm_x4(qf[kk], sQ + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
                ldsm_x4(of[kk], sO + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
            }
        }
        const int ks = kt * TK;
        if (wq0 < T && ks <= wq0 + 15) {
            const bf16 *Kt = sK + buf * TK * LDS, *Vt = sV + buf * TK * LDS;
            float s[NK][4], dp[NK][4];
#pragma unroll
            for (int j = 0; j < NK; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
#pragma unroll
                for (int n2 = 0; n2 < TK / 16; n2++) {
                    const int off = (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + kk * 16 + ((lane >> 3) & 1) * 8;
                    uint32_t kb[4], vb[4];
                    ldsm_x4(kb, Kt + off);
                    ldsm_x4(vb, Vt + off);
                    mma_bf16(s[2 * n2], qf[kk], kb[0], kb[1]);
                    mma_bf16(s[2 * n2 + 1], qf[kk], kb[2], kb[3]);
                    mma_bf16(dp[2 * n2], of[kk], vb[0], vb[1]);
                    mma_bf16(dp[2 * n2 + 1], of[kk], vb[2], vb[3]);
                }
            }
            const bool need_mask = ks + TK - 1 > wq0 || ks + TK > T || wq0 + 16 > T;
#pragma unroll
            for (int j = 0; j < NK; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hf = e >> 1;
                    float p = fast_exp2(s[j][e] * scale_log2 - L2[hf]);
                    if (need_mask) {
                        const int row = wq0 + (lane >> 2) + hf * 8, key = ks + j * 8 + (lane & 3) * 2 + (e & 1);
                        if (key > row || key >= T || row >= T) p = 0.0f;
                    }
                    dp[j][e] = p * (dp[j][e] - Dl[hf]); /* dS */
                }
#pragma unroll
            for (int kk = 0; kk < TK / 16; kk++) {
                uint32_t sa[4];
                acc_to_a(sa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
                for (int c2 = 0; c2 < HD / 16; c2++) {
                    uint32_t kb[4];
                    ldsm_x4_trans(kb, Kt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + c2 * 16 +
                                          (lane >> 4) * 8);
                    mma_bf16(dQ[2 * c2], sa, kb[0], kb[1]);
                    mma_bf16(dQ[2 * c2 + 1], sa, kb[2], kb[3]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int row = wq0 + (lane >> 2) + hf * 8;
        if (row < T) {
            bf16 *dqr = dq + (row0 + row) * ld_dq + (int64_t)h * HD;
#pragma unroll
            for (int i = 0; i < OT; i++) {
                const int col = i * 8 + (lane & 3) * 2;
                *reinterpret_cast<uint32_t *>(dqr + col) =
                    pack_bf16x2(dQ[i][2 * hf] * scale, dQ[i][2 * hf + 1] * scale);
            }
        }
    }
}

/* ---- SIMT: dK, dV ---------------------------------------------------------------------------- */

template <int HD> struct BwdSimt {
    static constexpr int BK = HD <= 128 ? 64 : 32; /* dK/dV block: keys (rows) */
    static constexpr int TQ = HD == 64 ? 64 : 32;  /* its query tile (columns) */
    static constexpr int BQ = HD <= 128 ? 64 : 32; /* dQ block: queries (rows) */
    static constexpr int TK = HD == 64 ? 64 : 32;  /* its key tile (columns) */
    static constexpr size_t dkdv_smem =
        ((size_t)(2 * BK + 2 * TQ) * (HD + 4) + (size_t)2 * BK * (TQ + 4) + 2 * TQ) * sizeof(float);
    static constexpr size_t dq_smem = ((size_t)(2 * BQ + 2 * TK) * (HD + 4) + (size_t)BQ * (TK + 4)) * sizeof(float);
};

template <typename T, int HD>
__global__ void __launch_bounds__(256, 1)
    attn_bwd_dkdv_simt_kernel(T *__restrict__ dk, T *__restrict__ dv, int64_t ld_dkv, const T *__restrict__ dout,
                              const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, int64_t ld_q,
                              int64_t ld_kv, const float *__restrict__ lse, const float *__restrict__ delta, int T_,
                              int H, int G, int hd, float scale, float scale_log2) {
    constexpr int BK = BwdSimt<HD>::BK, TQ = BwdSimt<HD>::TQ, LDF = HD + 4, LDP = TQ + 4;
    constexpr int RM = BK / 16, RN = TQ / 16, CO = HD / 64;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sK = reinterpret_cast<float *>(smem_raw); /* BK x LDF */
    float *sV = sK + BK * LDF;                       /* BK x LDF */
    float *sQ = sV + BK * LDF;                       /* TQ x LDF */
    float *sO = sQ + TQ * LDF;                       /* dO: TQ x LDF */
    float *sP = sO + TQ * LDF;                       /* P^T: BK x LDP */
    float *sS = sP + BK * LDP;                       /* dS^T: BK x LDP */
    float *sL = sS + BK * LDP;                       /* TQ: lse * log2(e) */
    float *sD = sL + TQ;                             /* TQ: delta */

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int Hkv = H / G, b = blockIdx.y / Hkv, kvh = blockIdx.y % Hkv;
    const int k0 = blockIdx.x * BK;
    const int64_t row0 = (int64_t)b * T_, ld_out = (int64_t)H * hd;
    const T *kg = k + row0 * ld_kv + (int64_t)kvh * hd;
    const T *vg = v + row0 * ld_kv + (int64_t)kvh * hd;

    simt_load_tile<T, HD>(sK, kg, ld_kv, k0, BK, T_, hd);
    simt_load_tile<T, HD>(sV, vg, ld_kv, k0, BK, T_, hd);
    float dK[RM][CO][4], dV[RM][CO][4];
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int cc = 0; cc < CO; cc++)
#pragma unroll
            for (int e = 0; e < 4; e++) dK[i][cc][e] = dV[i][cc][e] = 0.0f;

    const int nqt = (T_ + TQ - 1) / TQ, qt0 = k0 / TQ, nper = nqt - qt0;
    for (int it = 0; it < G * nper; it++) { /* the group's heads in turn, each over its query tiles */
        const int h = kvh * G + it / nper, qs = (qt0 + it % nper) * TQ;
        const T *qg = q + row0 * ld_q + (int64_t)h * hd;
        const T *og = dout + row0 * ld_out + (int64_t)h * hd;
        const float *Lg = lse + ((int64_t)b * H + h) * T_, *Dg = delta + ((int64_t)b * H + h) * T_;
        __syncthreads(); /* the previous tile is consumed */
        simt_load_tile<T, HD>(sQ, qg, ld_q, qs, TQ, T_, hd);
        simt_load_tile<T, HD>(sO, og, ld_out, qs, TQ, T_, hd);
        for (int i = threadIdx.x; i < TQ; i += 256) {
            const bool ok = qs + i < T_;
            sL[i] = ok ? Lg[qs + i] * ATT_LOG2E : 0.0f;
            sD[i] = ok ? Dg[qs + i] : 0.0f;
        }
        __syncthreads();
        float s[RM][RN], dp[RM][RN];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) s[i][j] = dp[i][j] = 0.0f;
        simt_dot<HD, RM, RN>(s, sK, sQ, ty, tx);
        simt_dot<HD, RM, RN>(dp, sV, sO, ty, tx);
        const bool need_mask = qs < k0 + BK - 1 || qs + TQ > T_ || k0 + BK > T_;
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) {
                const int key = k0 + ty + 16 * i, ql = tx + 16 * j, qi = qs + ql;
                float p = fast_exp2(s[i][j] * scale_log2 - sL[ql]);
                if (need_mask && (qi < key || qi >= T_ || key >= T_)) p = 0.0f;
                sP[(ty + 16 * i) * LDP + ql] = p;
                sS[(ty + 16 * i) * LDP + ql] = p * (dp[i][j] - sD[ql]);
            }
        __syncthreads();
        simt_pm<HD, TQ, RM>(dV, sP, sO, ty, tx);
        simt_pm<HD, TQ, RM>(dK, sS, sQ, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int key = k0 + ty + 16 * i;
        if (key < T_) {
            T *dkr = dk + (row0 + key) * ld_dkv + (int64_t)kvh * hd;
            T *dvr = dv + (row0 + key) * ld_dkv + (int64_t)kvh * hd;
#pragma unroll
            for (int cc = 0; cc < CO; cc++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 4 * tx + 64 * cc + e;
                    if (c < hd) {
                        stf(dkr + c, dK[i][cc][e] * scale);
                        stf(dvr + c, dV[i][cc][e]);
                    }
                }
        }
    }
}

/* ---- SIMT: dQ -------------------------------------------------------------------------------- */

template <typename T, int HD>
__global__ void __launch_bounds__(256, 1)
    attn_bwd_dq_simt_kernel(T *__restrict__ dq, int64_t ld_dq, const T *__restrict__ dout, const T *__restrict__ q,
                            const T *__restrict__ k, const T *__restrict__ v, int64_t ld_q, int64_t ld_kv,
                            const float *__restrict__ lse, const float *__restrict__ delta, int T_, int H, int G,
                            int hd, float scale, float scale_log2) {
    constexpr int BQ = BwdSimt<HD>::BQ, TK = BwdSimt<HD>::TK, LDF = HD + 4, LDP = TK + 4;
    constexpr int RM = BQ / 16, RN = TK / 16, CO = HD / 64;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sQ = reinterpret_cast<float *>(smem_raw); /* BQ x LDF */
    float *sO = sQ + BQ * LDF;                       /* dO: BQ x LDF */
    float *sK = sO + BQ * LDF;                       /* TK x LDF */
    float *sV = sK + TK * LDF;                       /* TK x LDF */
    float *sS = sV + TK * LDF;                       /* dS: BQ x LDP */

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int nqb = (T_ + BQ - 1) / BQ, qb = nqb - 1 - (int)blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = qb * BQ;
    const int64_t row0 = (int64_t)b * T_, ld_out = (int64_t)H * hd;
    const T *qg = q + row0 * ld_q + (int64_t)h * hd;
    const T *kg = k + row0 * ld_kv + (int64_t)(h / G) * hd; /* the group's kv head */
    const T *vg = v + row0 * ld_kv + (int64_t)(h / G) * hd;
    const T *og = dout + row0 * ld_out + (int64_t)h * hd;

    simt_load_tile<T, HD>(sQ, qg, ld_q, q0, BQ, T_, hd);
    simt_load_tile<T, HD>(sO, og, ld_out, q0, BQ, T_, hd);
    float L2[RM], Dl[RM], dQ[RM][CO][4];
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int row = q0 + ty + 16 * i;
        L2[i] = row < T_ ? lse[(int64_t)bh * T_ + row] * ATT_LOG2E : 0.0f;
        Dl[i] = row < T_ ? delta[(int64_t)bh * T_ + row] : 0.0f;
#pragma unroll
        for (int cc = 0; cc < CO; cc++) dQ[i][cc][0] = dQ[i][cc][1] = dQ[i][cc][2] = dQ[i][cc][3] = 0.0f;
    }
    const int nkt = (min(q0 + BQ, T_) - 1) / TK + 1;
    for (int kt = 0; kt < nkt; kt++) {
        const int ks = kt * TK;
        __syncthreads();
        simt_load_tile<T, HD>(sK, kg, ld_kv, ks, TK, T_, hd);
        simt_load_tile<T, HD>(sV, vg, ld_kv, ks, TK, T_, hd);
        __syncthreads();
        float s[RM][RN], dp[RM][RN];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) s[i][j] = dp[i][j] = 0.0f;
        simt_dot<HD, RM, RN>(s, sQ, sK, ty, tx);
        simt_dot<HD, RM, RN>(dp, sO, sV, ty, tx);
        const bool need_mask = ks + TK - 1 > q0 || ks + TK > T_ || q0 + BQ > T_;
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) {
                const int row = q0 + ty + 16 * i, key = ks + tx + 16 * j;
                float p = fast_exp2(s[i][j] * scale_log2 - L2[i]);
                if (need_mask && (key > row || key >= T_ || row >= T_)) p = 0.0f;
                sS[(ty + 16 * i) * LDP + tx + 16 * j] = p * (dp[i][j] - Dl[i]);
            }
        __syncthreads();
        simt_pm<HD, TK, RM>(dQ, sS, sK, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int row = q0 + ty + 16 * i;
        if (row < T_) {
            T *dqr = dq + (row0 + row) * ld_dq + (int64_t)h * hd;
#pragma unroll
            for (int cc = 0; cc < CO; cc++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 4 * tx + 64 * cc + e;
                    if (c < hd) stf(dqr + c, dQ[i][cc][e] * scale);
                }
        }
    }
}

/* ---- launches -------------------------------------------------------------------------------- */

struct BwdArgs {
    void *dq, *dk, *dv;
    int64_t ld_dq, ld_dkv;
    const void *dout, *q, *k, *v;
    int64_t ld_q, ld_kv;
    const float *lse, *delta;
    int B, T, H, G, hd;
    float scale;
};

template <int HD> static cudaError_t bwd_mma(cudaStream_t s, const BwdArgs &a) {
    typedef BwdMma<HD> C;
    static bool limit_set = false;
    if (!limit_set) {
        cudaError_t e = att_smem_limit(attn_bwd_dkdv_mma_kernel<HD>, C::dkdv_smem);
        if (e == cudaSuccess) e = att_smem_limit(attn_bwd_dq_mma_kernel<HD>, C::dq_smem);
        if (e != cudaSuccess) return e;
        limit_set = true;
    }
    const float sl2 = a.scale * ATT_LOG2E;
    dim3 g1((unsigned)((a.T + BWD_BK - 1) / BWD_BK), (unsigned)(a.B * (a.H / a.G)));
    attn_bwd_dkdv_mma_kernel<HD><<<g1, BWD_THREADS, C::dkdv_smem, s>>>(
        (bf16 *)a.dk, (bf16 *)a.dv, a.ld_dkv, (const bf16 *)a.dout, (const bf16 *)a.q, (const bf16 *)a.k,
        (const bf16 *)a.v, a.ld_q, a.ld_kv, a.lse, a.delta, a.T, a.H, a.G, a.scale, sl2);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    dim3 g2((unsigned)((a.T + BWD_BQ - 1) / BWD_BQ), (unsigned)(a.B * a.H));
    attn_bwd_dq_mma_kernel<HD><<<g2, BWD_THREADS, C::dq_smem, s>>>(
        (bf16 *)a.dq, a.ld_dq, (const bf16 *)a.dout, (const bf16 *)a.q, (const bf16 *)a.k, (const bf16 *)a.v, a.ld_q,
        a.ld_kv, a.lse, a.delta, a.T, a.H, a.G, a.scale, sl2);
    return cudaGetLastError();
}

template <typename T, int HD> static cudaError_t bwd_simt(cudaStream_t s, const BwdArgs &a) {
    typedef BwdSimt<HD> C;
    static bool limit_set = false;
    if (!limit_set) {
        cudaError_t e = att_smem_limit(attn_bwd_dkdv_simt_kernel<T, HD>, C::dkdv_smem);
        if (e == cudaSuccess) e = att_smem_limit(attn_bwd_dq_simt_kernel<T, HD>, C::dq_smem);
        if (e != cudaSuccess) return e;
        limit_set = true;
    }
    const float sl2 = a.scale * ATT_LOG2E;
    dim3 g1((unsigned)((a.T + C::BK - 1) / C::BK), (unsigned)(a.B * (a.H / a.G)));
    attn_bwd_dkdv_simt_kernel<T, HD><<<g1, 256, C::dkdv_smem, s>>>(
        (T *)a.dk, (T *)a.dv, a.ld_dkv, (const T *)a.dout, (const T *)a.q, (const T *)a.k, (const T *)a.v, a.ld_q,
        a.ld_kv, a.lse, a.delta, a.T, a.H, a.G, a.hd, a.scale, sl2);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    dim3 g2((unsigned)((a.T + C::BQ - 1) / C::BQ), (unsigned)(a.B * a.H));
    attn_bwd_dq_simt_kernel<T, HD><<<g2, 256, C::dq_smem, s>>>((T *)a.dq, a.ld_dq, (const T *)a.dout, (const T *)a.q,
                                                               (const T *)a.k, (const T *)a.v, a.ld_q, a.ld_kv, a.lse,
                                                               a.delta, a.T, a.H, a.G, a.hd, a.scale, sl2);
    return cudaGetLastError();
}

template <typename T> static cudaError_t bwd_simt_any(cudaStream_t s, const BwdArgs &a) {
    switch (att_simt_hd(a.hd)) {
    case 64: return bwd_simt<T, 64>(s, a);
    case 128: return bwd_simt<T, 128>(s, a);
    case 256: return bwd_simt<T, 256>(s, a);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t dpk_attention_backward(cudaStream_t s, int dtype, void *dq, void *dk, void *dv, int64_t ld_dq,
                                              int64_t ld_dkv, const void *dout, const void *out, const float *lse,
                                              const void *q, const void *k, const void *v, int64_t ld_q, int64_t ld_kv,
                                              float *delta, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                                              float scale) {
    if (B <= 0 || T <= 0 || H <= 0) return cudaSuccess;
    if (hd <= 0 || hd > 256 || Hkv <= 0 || H % Hkv || ld_q < H * hd || ld_kv < Hkv * hd || ld_dq < H * hd ||
        ld_dkv < Hkv * hd || B * H > 65535 || B * T > INT32_MAX)
        return cudaErrorInvalidValue;
    const int64_t N = B * T;
    unsigned dblocks = (unsigned)((N * H + 7) / 8);
    if (dblocks > 65535u * 4u) dblocks = 65535u * 4u;
    if (dtype == DPK_BF16)
        attn_delta_kernel<bf16>
            <<<dblocks, 256, 0, s>>>(delta, (const bf16 *)dout, (const bf16 *)out, N, (int)T, (int)H, (int)hd);
    else
        attn_delta_kernel<float>
            <<<dblocks, 256, 0, s>>>(delta, (const float *)dout, (const float *)out, N, (int)T, (int)H, (int)hd);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    BwdArgs a = {dq,  dk,    dv,     ld_dq,  ld_dkv, dout,           q,       k,    v, ld_q, ld_kv,
                 lse, delta, (int)B, (int)T, (int)H, (int)(H / Hkv), (int)hd, scale};
    const bool grads_ok = ld_dq % 2 == 0 && ld_dkv % 2 == 0 && ((uintptr_t)dq & 3u) == 0 && ((uintptr_t)dk & 3u) == 0 &&
                          ((uintptr_t)dv & 3u) == 0;
    if (att_mma_ok(dtype, hd, ld_q, ld_kv, q, k, v) && dpk_aligned16(dout) && grads_ok)
        return hd == 64 ? bwd_mma<64>(s, a) : bwd_mma<128>(s, a);
    return dtype == DPK_BF16 ? bwd_simt_any<bf16>(s, a) : bwd_simt_any<float>(s, a);
}
