/* cpu_attention.c: causal self-attention on the CPU, FlashAttention-2 style, as blocked GEMMs.
 *
 * The scores of one (sample, head) are visited in blocks of ATT_BQ query rows by ATT_BK key rows:
 * each block's scores S = scale Q K^T and products with V come from OpenBLAS (single-threaded
 * inside the team's tasks), with an online softmax (running max m and sum l per row) between
 * them. Memory beyond the inputs and outputs is per-thread host scratch: the block of scores and
 * its gradient (ATT_BQ x ATT_BK), the accumulators of one head (at most 3 T x hd in the backward)
 * and, for bf16, widened copies of the blocks: never a T x T matrix, let alone B x H x T x T.
 *
 * Determinism: the forward's tasks are (sample, head, query block), each one thread's; the
 * backward's are (sample, kv head): one thread walks the key blocks in order and, for each, the
 * query blocks after it, accumulating dK and dV of the key block and dQ of every query block in
 * that fixed order (no second pass recomputing the scores for dQ, no atomics). Results do not
 * depend on the thread count or the schedule.
 *
 * Grouped-query attention: query head h reads kv head kv_head(h, H, Hkv); the backward's task for
 * kv head g walks the H / Hkv query heads of its group in increasing order, so dK and dV sum them
 * without atomics and the repeat is never materialised.
 *
 * bf16 follows the rounding points of CUDA's tensor-core attention (kernels/attention_*.cu, taken
 * for head dims 64 and 128 with rows of a multiple of 8 elements: mma_rounding): P, and in the
 * backward dS, are rounded to bf16 before their products with V, dO, Q and K (the mma operands);
 * sums stay f32. Elsewhere (f32, other head dims: the SIMT kernels) nothing is rounded between. */
#include "cpu_attention.h"

#include "cpu_util.h"
#include "cpu_vmath.h"
#include "error.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BQ 64             /* query rows per block */
#define ATT_BK 64             /* key rows per block */
#define ATT_PAR_MIN (1 << 17) /* multiply-adds of q.k below which attention runs on one thread (~60 us) */

/* The kv head query head h reads: H / Hkv consecutive query heads share one (transformers'
 * repeat_kv order). The one place a head's K and V are found. */
static int64_t kv_head(int64_t h, int64_t H, int64_t Hkv) { return h / (H / Hkv); }

/* Query heads in groups of Hkv key/value heads, or DP_EINVAL naming both counts. */
static int check_groups(const char *op, int64_t H, int64_t Hkv) {
    if (Hkv > 0 && H % Hkv == 0) return DP_OK;
    return dp_error_set(DP_EINVAL, "%s: %lld query heads are not groups of %lld key/value heads", op, (long long)H,
                        (long long)Hkv);
}

/* Whether P and dS are rounded to bf16 before their GEMMs, as CUDA's tensor-core kernels do. */
static int mma_rounding(dp_dtype t, int64_t hd, int64_t ld_q, int64_t ld_kv) {
    return t == DP_BF16 && (hd == 64 || hd == 128) && ld_q % 8 == 0 && ld_kv % 8 == 0;
}

/* x rounded to bf16 and back */
static inline float bf16_round(float x) { return dp_bf16_to_f32(dp_f32_to_bf16(x)); }

/* Element offset of row i of sample b in head h of a B*T x (heads * hd) view with row stride ld. */
static int64_t head_row(int64_t ld, int64_t b, int64_t T, int64_t i, int64_t h, int64_t hd) {
    return (b * T + i) * ld + h * hd;
}

/* nrows x hd block of head h from row row0 of sample b, as f32 with row stride *ld_out: a
 * pointer into x when t is f32, else widened into buf (nrows x hd). */
static const float *head_block(dp_dtype t, const void *x, int64_t ld, int64_t b, int64_t T, int64_t h, int64_t hd,
                               int64_t row0, int64_t nrows, float *buf, int64_t *ld_out) {
    return dp_cpu_f32_block(t, x, ld, head_row(ld, b, T, row0, h, hd), nrows, hd, buf, ld_out);
}

/* writes an nrows x hd f32 block (row stride hd) into head h of dst from row row0 of sample b */
static void store_head_block(dp_dtype t, void *dst, int64_t ld, int64_t b, int64_t T, int64_t h, int64_t hd,
                             int64_t row0, int64_t nrows, const float *src) {
    for (int64_t r = 0; r < nrows; r++) {
        int64_t o = head_row(ld, b, T, row0 + r, h, hd);
        for (int64_t c = 0; c < hd; c++) dp_cpu_st(t, dst, o + c, src[r * hd + c]);
    }
}

static int64_t block_rows(int64_t T, int64_t start, int64_t block) { return T - start < block ? T - start : block; }

/* Keys of the block from j0 that row i0 + r may attend to (keys j <= i): 0 to nc. */
static int64_t visible(int64_t i0, int64_t r, int64_t j0, int64_t nc) {
    int64_t c = i0 + r - j0 + 1;
    return c < 0 ? 0 : c < nc ? c : nc;
}

/* S (nr x nc, row stride nc) = scale Q K^T */
static void scores(int64_t nr, int64_t nc, int64_t hd, float scale, const float *Q, int64_t ldq, const float *K,
                   int64_t ldk, float *S) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nr, (blasint)nc, (blasint)hd, scale, Q, (blasint)ldq,
                K, (blasint)ldk, 0.0f, S, (blasint)nc);
}

/* One block of the online softmax for the rows of a query block: folds the scores S of key block
 * j0 into the running max m and sum l, rescales the output accumulator acc (nr x hd) and turns S
 * into the block's probabilities (0 where a key is masked; rounded to bf16 after the sum when
 * round is set), ready for acc += P V. */
DP_CPU_CLONES static void online_softmax(float *S, int64_t nr, int64_t nc, int64_t i0, int64_t j0, float *m, float *l,
                                         float *acc, int64_t hd, int round) {
    for (int64_t r = 0; r < nr; r++) {
        float *s = S + r * nc;
        const int64_t cend = visible(i0, r, j0, nc);
        if (cend == 0) { /* a row before every key of the block: nothing to fold */
            memset(s, 0, sizeof(float) * (size_t)nc);
            continue;
        }
        float mx = m[r];
        for (int64_t c = 0; c < cend; c++) mx = s[c] > mx ? s[c] : mx;
        const float corr = dp_vexp(m[r] - mx); /* 0 on the first block (m = -inf) */
        float sum = 0.0f;
        for (int64_t c = 0; c < cend; c++) {
            s[c] = dp_vexp(s[c] - mx);
            sum += s[c];
        }
        if (round)
            for (int64_t c = 0; c < cend; c++) s[c] = bf16_round(s[c]);
        for (int64_t c = cend; c < nc; c++) s[c] = 0.0f;
        float *a = acc + r * hd;
        for (int64_t e = 0; e < hd; e++) a[e] *= corr;
        l[r] = l[r] * corr + sum;
        m[r] = mx;
    }
}

static int attention_forward(dp_dtype t, void *out, float *lse, const void *q, const void *k, const void *v,
                             int64_t ld_q, int64_t ld_kv, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                             float scale) {
    const int64_t nqb = (T + ATT_BQ - 1) / ATT_BQ, tasks = B * H * nqb, ld_out = H * hd;
    const int64_t work = B * H * T * (T + 1) / 2 * hd; /* multiply-adds of q.k alone */
    const int wide = t != DP_F32, round = mma_rounding(t, hd, ld_q, ld_kv);
    int failed = 0;
#pragma omp parallel if (tasks > 1 && work > ATT_PAR_MIN)
    {
        /* S, acc, m, l; for bf16 the widened Q, K and V blocks */
        size_t floats =
            (size_t)(ATT_BQ * ATT_BK + ATT_BQ * hd + 2 * ATT_BQ) + (wide ? (size_t)((ATT_BQ + 2 * ATT_BK) * hd) : 0);
        float *scratch = malloc(floats * sizeof(float));
        if (!scratch) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            if (!scratch) continue;
            float *S = scratch, *acc = S + ATT_BQ * ATT_BK, *m = acc + ATT_BQ * hd, *l = m + ATT_BQ;
            float *wq = l + ATT_BQ, *wk = wq + ATT_BQ * hd, *wv = wk + ATT_BK * hd;
            const int64_t qb = task % nqb, h = (task / nqb) % H, b = task / (nqb * H), g = kv_head(h, H, Hkv);
            const int64_t i0 = qb * ATT_BQ, nr = block_rows(T, i0, ATT_BQ);
            int64_t ldq, ldk, ldv;
            const float *Q = head_block(t, q, ld_q, b, T, h, hd, i0, nr, wq, &ldq);
            for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0f;
            memset(acc, 0, sizeof(float) * (size_t)(nr * hd));
            for (int64_t j0 = 0; j0 <= i0 + nr - 1; j0 += ATT_BK) {
                const int64_t nc = block_rows(T, j0, ATT_BK);
                const float *K = head_block(t, k, ld_kv, b, T, g, hd, j0, nc, wk, &ldk);
                const float *V = head_block(t, v, ld_kv, b, T, g, hd, j0, nc, wv, &ldv);
                scores(nr, nc, hd, scale, Q, ldq, K, ldk, S);
                online_softmax(S, nr, nc, i0, j0, m, l, acc, hd, round);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nr, (blasint)hd, (blasint)nc, 1.0f, S,
                            (blasint)nc, V, (blasint)ldv, 1.0f, acc, (blasint)hd);
            }
            for (int64_t r = 0; r < nr; r++) {
                const float inv = 1.0f / l[r];
                for (int64_t e = 0; e < hd; e++) acc[r * hd + e] *= inv;
                lse[(b * H + h) * T + i0 + r] = m[r] + logf(l[r]);
            }
            store_head_block(t, out, ld_out, b, T, h, hd, i0, nr, acc);
        }
        free(scratch);
    }
    if (failed) return dp_error_set(DP_EOOM, "attention_forward: out of host memory for block scratch");
    return DP_OK;
}

/* The gradient of the scores of one block, from its probabilities: P (nr x nc) = exp(S - lse)
 * (0 where masked) in place of S, and dS = scale P (dP - delta) in place of dP; with round, P and
 * P (dP - delta) are rounded to bf16 (after dS took the unrounded P), as CUDA's mma operands. */
DP_CPU_CLONES static void score_grads(float *S, float *dP, int64_t nr, int64_t nc, int64_t i0, int64_t j0,
                                      const float *L, const float *D, float scale, int round) {
    for (int64_t r = 0; r < nr; r++) {
        float *s = S + r * nc, *dp = dP + r * nc;
        const int64_t cend = visible(i0, r, j0, nc);
        const float li = L[i0 + r], di = D[i0 + r];
        if (round)
            for (int64_t c = 0; c < cend; c++) {
                const float p = dp_vexp(s[c] - li);
                dp[c] = scale * bf16_round(p * (dp[c] - di));
                s[c] = bf16_round(p);
            }
        else
            for (int64_t c = 0; c < cend; c++) {
                s[c] = dp_vexp(s[c] - li);
                dp[c] = scale * (s[c] * (dp[c] - di));
            }
        for (int64_t c = cend; c < nc; c++) s[c] = 0.0f, dp[c] = 0.0f;
    }
}

static int attention_backward(dp_dtype t, void *dq, void *dk, void *dv, int64_t ld_dq, int64_t ld_dkv, const void *dout,
                              const void *out, const float *lse, const void *q, const void *k, const void *v,
                              int64_t ld_q, int64_t ld_kv, float *delta, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                              int64_t hd, float scale) {
    const int64_t ld_out = H * hd, group = H / Hkv, tasks = B * Hkv;
    /* delta = rowsum(dout * out), per (sample, head, row) */
#pragma omp parallel for schedule(static) if (B * T * ld_out > ATT_PAR_MIN)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, h = bh % H;
        for (int64_t i = 0; i < T; i++) {
            const int64_t o = head_row(ld_out, b, T, i, h, hd);
            float s = 0;
            for (int64_t e = 0; e < hd; e++) s += dp_cpu_ld(t, dout, o + e) * dp_cpu_ld(t, out, o + e);
            delta[bh * T + i] = s;
        }
    }
    const int64_t work = B * H * T * (T + 1) / 2 * hd;
    const int wide = t != DP_F32, round = mma_rounding(t, hd, ld_q, ld_kv);
    int failed = 0;
#pragma omp parallel if (tasks > 1 && work > ATT_PAR_MIN)
    {
        /* S and dP blocks; dQ of one query head, dK and dV of its kv head (T x hd each); for bf16
         * the widened Q, dO, K and V blocks */
        size_t floats =
            (size_t)(2 * ATT_BQ * ATT_BK + 3 * T * hd) + (wide ? (size_t)((2 * ATT_BQ + 2 * ATT_BK) * hd) : 0);
        float *scratch = malloc(floats * sizeof(float));
        if (!scratch) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            if (!scratch) continue;
            float *S = scratch, *dP = S + ATT_BQ * ATT_BK, *dQ = dP + ATT_BQ * ATT_BK, *dK = dQ + T * hd,
                  *dV = dK + T * hd;
            float *wq = dV + T * hd, *wo = wq + ATT_BQ * hd, *wk = wo + ATT_BQ * hd, *wv = wk + ATT_BK * hd;
            const int64_t b = task / Hkv, g = task % Hkv;
            memset(dK, 0, sizeof(float) * (size_t)(2 * T * hd)); /* dK and dV */
            for (int64_t h = g * group; h < (g + 1) * group; h++) {
                const float *L = lse + (b * H + h) * T, *D = delta + (b * H + h) * T;
                memset(dQ, 0, sizeof(float) * (size_t)(T * hd));
                for (int64_t j0 = 0; j0 < T; j0 += ATT_BK) {
                    const int64_t nc = block_rows(T, j0, ATT_BK);
                    int64_t ldk, ldv, ldq, ldo;
                    const float *K = head_block(t, k, ld_kv, b, T, g, hd, j0, nc, wk, &ldk);
                    const float *V = head_block(t, v, ld_kv, b, T, g, hd, j0, nc, wv, &ldv);
                    float *dKb = dK + j0 * hd, *dVb = dV + j0 * hd;
                    for (int64_t i0 = j0 / ATT_BQ * ATT_BQ; i0 < T; i0 += ATT_BQ) {
                        const int64_t nr = block_rows(T, i0, ATT_BQ);
                        if (i0 + nr - 1 < j0) continue; /* every key of the block is after every query */
                        const float *Q = head_block(t, q, ld_q, b, T, h, hd, i0, nr, wq, &ldq);
                        const float *dO = head_block(t, dout, ld_out, b, T, h, hd, i0, nr, wo, &ldo);
                        scores(nr, nc, hd, scale, Q, ldq, K, ldk, S);
                        /* dP = dO V^T */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nr, (blasint)nc, (blasint)hd,
                                    1.0f, dO, (blasint)ldo, V, (blasint)ldv, 0.0f, dP, (blasint)nc);
                        score_grads(S, dP, nr, nc, i0, j0, L, D, scale, round);
                        /* dV += P^T dO, dK += dS^T Q, dQ += dS K */
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)nc, (blasint)hd, (blasint)nr,
                                    1.0f, S, (blasint)nc, dO, (blasint)ldo, 1.0f, dVb, (blasint)hd);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)nc, (blasint)hd, (blasint)nr,
                                    1.0f, dP, (blasint)nc, Q, (blasint)ldq, 1.0f, dKb, (blasint)hd);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nr, (blasint)hd, (blasint)nc,
                                    1.0f, dP, (blasint)nc, K, (blasint)ldk, 1.0f, dQ + i0 * hd, (blasint)hd);
                    }
                }
                store_head_block(t, dq, ld_dq, b, T, h, hd, 0, T, dQ);
            }
            store_head_block(t, dk, ld_dkv, b, T, g, hd, 0, T, dK);
            store_head_block(t, dv, ld_dkv, b, T, g, hd, 0, T, dV);
        }
        free(scratch);
    }
    if (failed) return dp_error_set(DP_EOOM, "attention_backward: out of host memory for block scratch");
    return DP_OK;
}

int dp_cpu_attention_forward(dp_device *dev, dp_dtype t, void *out, float *lse, const void *q, const void *k,
                             const void *v, int64_t ld_q, int64_t ld_kv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                             int64_t hd, float scale) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "attention_forward"));
    DP_TRY(check_groups("attention_forward", H, Hkv));
    return attention_forward(t, out, lse, q, k, v, ld_q, ld_kv, B, T, H, Hkv, hd, scale);
}

int dp_cpu_attention_backward(dp_device *dev, dp_dtype t, void *dq, void *dk, void *dv, int64_t ld_dq, int64_t ld_dkv,
                              const void *dout, const void *out, const float *lse, const void *q, const void *k,
                              const void *v, int64_t ld_q, int64_t ld_kv, float *delta, int64_t B, int64_t T, int64_t H,
                              int64_t Hkv, int64_t hd, float scale) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "attention_backward"));
    DP_TRY(check_groups("attention_backward", H, Hkv));
    return attention_backward(t, dq, dk, dv, ld_dq, ld_dkv, dout, out, lse, q, k, v, ld_q, ld_kv, delta, B, T, H, Hkv,
                              hd, scale);
}
