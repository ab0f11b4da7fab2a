/* dp_reduce.cu: the memory-bound per-sample DP kernels: Frobenius products of per-sample
 * matrices (plain and with the token-equality mask), token sums (biases, norm gains), per-sample
 * scaling, the grouped embedding norm, scatters and gathers by token id. Every sum has a fixed
 * partition that depends on the sizes only (and, for the grouped norm, on the ids), f32 partials
 * in the scratch, and a second kernel adding them in order. */
#include "dp_common.cuh"
#include "dp_kernels.h"

using namespace dpk_dp;

#define RT 256         /* threads per block */
#define DOT_PART 16384 /* elements per partial, at least, in batched_dot */
#define ROW_GROUPS 8   /* token groups summed separately, then in order, in token sums */

/* ---- batched_dot ------------------------------------------------------------------------- */

__global__ void batched_dot_kernel(int64_t n, int64_t parts, int64_t part_len, int tx, const void *x, int ty,
                                   const void *y, float *partial) {
    const int64_t i = blockIdx.y, part = blockIdx.x;
    const int64_t begin = part * part_len, end = begin + part_len < n ? begin + part_len : n;
    const size_t esx = tx == DPK_BF16 ? 2 : 4, esy = ty == DPK_BF16 ? 2 : 4;
    const char *xi = (const char *)x + (size_t)(i * n) * esx, *yi = (const char *)y + (size_t)(i * n) * esy;
    float acc = 0.0f;
    for (int64_t j = begin + threadIdx.x; j < end; j += RT) acc = fmaf(dpk_load(tx, xi, j), dpk_load(ty, yi, j), acc);
    acc = block_sum<RT>(acc);
    if (threadIdx.x == 0) partial[i * parts + part] = acc;
}

extern "C" cudaError_t dpk_dp_batched_dot(cudaStream_t s, int64_t B, int64_t n, int tx, const void *x, int ty,
                                          const void *y, float alpha, float *out, int accumulate, float *scratch,
                                          size_t scratch_elems) {
    if (B <= 0) return cudaSuccess;
    int64_t parts = (n + DOT_PART - 1) / DOT_PART;
    if (parts < 1) parts = 1;
    if (parts > 1024) parts = 1024;
    if ((size_t)parts > scratch_elems) parts = (int64_t)scratch_elems;
    const int64_t part_len = (n + parts - 1) / parts;
    const int64_t per = samples_per_launch(B, parts, scratch_elems);
    const size_t esx = tx == DPK_BF16 ? 2 : 4, esy = ty == DPK_BF16 ? 2 : 4;
    for (int64_t b0 = 0; b0 < B; b0 += per) {
        const int64_t nb = B - b0 < per ? B - b0 : per;
        batched_dot_kernel<<<dim3((unsigned)parts, (unsigned)nb), RT, 0, s>>>(
            n, parts, part_len > 0 ? part_len : 1, tx, (const char *)x + (size_t)(b0 * n) * esx, ty,
            (const char *)y + (size_t)(b0 * n) * esy, scratch);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        e = launch_finish(s, nb, parts, scratch, alpha, out + b0, accumulate);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- gram_dot_masked ------------------------------------------------------------------------ */

/* block (part, i): rows [part * rows_per, ...) of sample i's gram, masked by equal ids */
__global__ void gram_dot_masked_kernel(int64_t T, int64_t parts, int64_t rows_per, const float *gram,
                                       const int32_t *ids, float *partial) {
    const int64_t i = blockIdx.y, part = blockIdx.x;
    const int64_t r0 = part * rows_per, r1 = r0 + rows_per < T ? r0 + rows_per : T;
    const int32_t *id = ids + i * T;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const int32_t mine = id[r];
        const float *row = gram + (i * T + r) * T;
        for (int64_t t = threadIdx.x; t < T; t += RT)
            if (id[t] == mine) acc += row[t];
    }
    acc = block_sum<RT>(acc);
    if (threadIdx.x == 0) partial[i * parts + part] = acc;
}

extern "C" cudaError_t dpk_dp_gram_dot_masked(cudaStream_t s, int64_t B, int64_t T, const float *gram,
                                              const int32_t *ids, float alpha, float *out, int accumulate,
                                              float *scratch, size_t scratch_elems) {
    if (B <= 0) return cudaSuccess;
    int64_t rows_per = (DOT_PART + T - 1) / (T > 0 ? T : 1);
    if (rows_per < 1) rows_per = 1;
    int64_t parts = (T + rows_per - 1) / rows_per;
    if (parts < 1) parts = 1;
    if ((size_t)parts > scratch_elems) {
        parts = (int64_t)scratch_elems;
        rows_per = (T + parts - 1) / parts;
    }
    const int64_t per = samples_per_launch(B, parts, scratch_elems);
    for (int64_t b0 = 0; b0 < B; b0 += per) {
        const int64_t nb = B - b0 < per ? B - b0 : per;
        gram_dot_masked_kernel<<<dim3((unsigned)parts, (unsigned)nb), RT, 0, s>>>(T, parts, rows_per, gram + b0 * T * T,
                                                                                  ids + b0 * T, scratch);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        e = launch_finish(s, nb, parts, scratch, alpha, out + b0, accumulate);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- token sums: biases and norm gains ------------------------------------------------------ */

/* Block (column chunk, sample): 32 columns x ROW_GROUPS token groups; group k sums tokens
 * t = k, k + ROW_GROUPS, ... in order, then the groups are added in order. With x != NULL it is
 * a norm layer: dw sums g * xhat (xhat from mean (NULL: RMSNorm) and rstd) and db sums g. */
__global__ void token_sum_kernel(int dtype, int64_t T, int64_t p, const void *g, const void *x, const float *mean,
                                 const float *rstd, float *dw, float *db) {
    __shared__ float part_w[ROW_GROUPS][32], part_b[ROW_GROUPS][32];
    const int64_t i = blockIdx.y, c = blockIdx.x * 32 + (threadIdx.x & 31);
    const int grp = threadIdx.x >> 5;
    float sw = 0.0f, sb = 0.0f;
    if (c < p)
        for (int64_t t = grp; t < T; t += ROW_GROUPS) {
            const int64_t n = i * T + t;
            const float gv = dpk_load(dtype, g, (size_t)(n * p + c));
            sb += gv;
            if (x) {
                const float xv = dpk_load(dtype, x, (size_t)(n * p + c));
                const float xhat = mean ? (xv - mean[n]) * rstd[n] : xv * rstd[n];
                sw = fmaf(gv, xhat, sw);
            }
        }
    part_w[grp][threadIdx.x & 31] = sw;
    part_b[grp][threadIdx.x & 31] = sb;
    __syncthreads();
    if (grp == 0 && c < p) {
        float w = 0.0f, b = 0.0f;
        for (int k = 0; k < ROW_GROUPS; k++) {
            w += part_w[k][threadIdx.x];
            b += part_b[k][threadIdx.x];
        }
        if (x) {
            dw[i * p + c] = w;
            if (db) db[i * p + c] = b;
        } else {
            db[i * p + c] = b;
        }
    }
}

extern "C" cudaError_t dpk_dp_token_sum(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t p, const void *g,
                                        float *out) {
    for (int64_t b0 = 0; b0 < B; b0 += 65535) {
        const int64_t nb = B - b0 < 65535 ? B - b0 : 65535;
        const size_t es = dtype == DPK_BF16 ? 2 : 4;
        token_sum_kernel<<<dim3((unsigned)((p + 31) / 32), (unsigned)nb), 32 * ROW_GROUPS, 0, s>>>(
            dtype, T, p, (const char *)g + (size_t)(b0 * T * p) * es, NULL, NULL, NULL, NULL, out + b0 * p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t dpk_dp_norm_grads(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, const void *x,
                                         const float *mean, const float *rstd, const void *g, float *dw, float *db) {
    for (int64_t b0 = 0; b0 < B; b0 += 65535) {
        const int64_t nb = B - b0 < 65535 ? B - b0 : 65535;
        const size_t es = dtype == DPK_BF16 ? 2 : 4, off = (size_t)(b0 * T * d) * es;
        token_sum_kernel<<<dim3((unsigned)((d + 31) / 32), (unsigned)nb), 32 * ROW_GROUPS, 0, s>>>(
            dtype, T, d, (const char *)g + off, (const char *)x + off, mean ? mean + b0 * T : NULL, rstd + b0 * T,
            dw + b0 * d, db ? db + b0 * d : NULL);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- scale_samples ------------------------------------------------------------------------ */

__global__ void scale_samples_kernel(int dtype, int64_t B, int64_t n, void *x, const float *c) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < B * n; k += (int64_t)gridDim.x * blockDim.x)
        dpk_store(dtype, x, (size_t)k, dpk_load(dtype, x, (size_t)k) * c[k / n]);
}

extern "C" cudaError_t dpk_dp_scale_samples(cudaStream_t s, int dtype, int64_t B, int64_t n, void *x, const float *c) {
    if (B * n <= 0) return cudaSuccess;
    scale_samples_kernel<<<dpk_blocks((size_t)(B * n)), RT, 0, s>>>(dtype, B, n, x, c);
    return cudaGetLastError();
}

/* ---- grouped embedding norm ----------------------------------------------------------------- */

/* Block (column chunk, segment, sample). The sorted keys of sample i are cut into `segs`
 * segments at run boundaries: segment k starts at the first run that starts at or after
 * k * T / segs, so a run is never split. Each thread walks its column through the segment's
 * runs in order: the run's sum of g rows, squared, added to its total. */
__global__ void grouped_sumsq_kernel(int dtype, int64_t T, int64_t d, const void *g, const uint64_t *keys, int64_t segs,
                                     int64_t chunks, float *partial) {
    const int64_t i = blockIdx.z, seg = blockIdx.y, c = blockIdx.x * (int64_t)RT + threadIdx.x;
    const uint64_t *k = keys + i * T;
    /* the segment's [begin, end): both boundaries moved forward to a run start */
    int64_t begin = seg * T / segs, end = (seg + 1) * T / segs;
    while (begin > 0 && begin < T && (k[begin] >> 32) == (k[begin - 1] >> 32)) begin++;
    while (end < T && end > 0 && (k[end] >> 32) == (k[end - 1] >> 32)) end++;
    float total = 0.0f;
    if (c < d && begin < end) {
        float run = 0.0f;
        for (int64_t j = begin; j < end; j++) {
            const int64_t row = i * T + (int64_t)(uint32_t)k[j];
            run += dpk_load(dtype, g, (size_t)(row * d + c));
            if (j + 1 == end || (k[j + 1] >> 32) != (k[j] >> 32)) {
                total = fmaf(run, run, total);
                run = 0.0f;
            }
        }
    }
    total = block_sum<RT>(total);
    if (threadIdx.x == 0) partial[(i * segs + seg) * chunks + blockIdx.x] = total;
}

extern "C" cudaError_t dpk_dp_grouped_sumsq(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, const void *g,
                                            const uint64_t *keys, float alpha, float *out, int accumulate,
                                            float *scratch, size_t scratch_elems) {
    if (B <= 0) return cudaSuccess;
    int64_t segs = (T + 255) / 256;
    if (segs < 1) segs = 1;
    if (segs > 64) segs = 64;
    const int64_t chunks = (d + RT - 1) / RT > 0 ? (d + RT - 1) / RT : 1;
    while (segs > 1 && (size_t)(segs * chunks) > scratch_elems) segs /= 2;
    const int64_t parts = segs * chunks, per = samples_per_launch(B, parts, scratch_elems);
    const size_t es = dtype == DPK_BF16 ? 2 : 4;
    for (int64_t b0 = 0; b0 < B; b0 += per) {
        const int64_t nb = B - b0 < per ? B - b0 : per;
        grouped_sumsq_kernel<<<dim3((unsigned)chunks, (unsigned)segs, (unsigned)nb), RT, 0, s>>>(
            dtype, T, d, (const char *)g + (size_t)(b0 * T * d) * es, keys + b0 * T, segs, chunks, scratch);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        e = launch_finish(s, nb, parts, scratch, alpha, out + b0, accumulate);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- scatter and gather by token id --------------------------------------------------------- */

/* thread (column c, sample i): psg[i, ids[t], c] += alpha g[i, t, c] for t in order */
__global__ void scatter_rows_kernel(int dtype, int64_t B, int64_t T, int64_t d, int64_t V, const void *g,
                                    const int32_t *ids, float alpha, float *psg) {
    const int64_t i = blockIdx.y, c = blockIdx.x * (int64_t)RT + threadIdx.x;
    if (c >= d) return;
    for (int64_t t = 0; t < T; t++) {
        const int32_t id = ids[i * T + t];
        if (id < 0 || id >= V) continue;
        psg[(i * V + id) * d + c] += alpha * dpk_load(dtype, g, (size_t)((i * T + t) * d + c));
    }
}

extern "C" cudaError_t dpk_dp_scatter_rows(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t d, int64_t V,
                                           const void *g, const int32_t *ids, float alpha, float *psg) {
    for (int64_t b0 = 0; b0 < B; b0 += 65535) {
        const int64_t nb = B - b0 < 65535 ? B - b0 : 65535;
        const size_t es = dtype == DPK_BF16 ? 2 : 4;
        scatter_rows_kernel<<<dim3((unsigned)((d + RT - 1) / RT), (unsigned)nb), RT, 0, s>>>(
            dtype, nb, T, d, V, (const char *)g + (size_t)(b0 * T * d) * es, ids + b0 * T, alpha, psg + b0 * V * d);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

__global__ void gather_cols_kernel(int dtype, int64_t B, int64_t T, int64_t V, const void *g, const int32_t *ids,
                                   void *h) {
    const int64_t n = B * T * T;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t u = k % T, is = k / T, i = is / T;
        const int32_t id = ids[i * T + u];
        const float v = id >= 0 && id < V ? dpk_load(dtype, g, (size_t)(is * V + id)) : 0.0f;
        dpk_store(dtype, h, (size_t)k, v);
    }
}

extern "C" cudaError_t dpk_dp_gather_cols(cudaStream_t s, int dtype, int64_t B, int64_t T, int64_t V, const void *g,
                                          const int32_t *ids, void *h) {
    if (B * T <= 0) return cudaSuccess;
    gather_cols_kernel<<<dpk_blocks((size_t)(B * T * T)), RT, 0, s>>>(dtype, B, T, V, g, ids, h);
    return cudaGetLastError();
}
