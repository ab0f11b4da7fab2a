/* cpu_peak.c: measuring the CPU's peak flop/s and bandwidth (see cpu_peak.h). The buffers are
 * the host's own (malloc), not tagged device memory: the calibration is not part of a run. */
#include "cpu_peak.h"

#include "clock.h"
#include "error.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_N 1024
#define COPY_FLOATS (16u << 20) /* 64 MiB per array */

static int measured;
static double peak_flops, peak_bandwidth;

static double gemm_rate(void) {
    size_t n = GEMM_N;
    float *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b), *c = malloc(n * n * sizeof *c);
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f;
        for (int rep = 0; rep < 4; rep++) {
            int64_t t0 = dp_clock_ns();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)n, (blasint)n, 1.0f, a,
                        (blasint)n, b, (blasint)n, 0.0f, c, (blasint)n);
            double s = (double)(dp_clock_ns() - t0) * 1e-9;
            double rate = 2.0 * (double)n * (double)n * (double)n / s;
            if (rep > 0 && s > 0 && rate > best) best = rate; /* rep 0 warms OpenBLAS's threads up */
        }
    }
    free(a), free(b), free(c);
    return best;
}

static double copy_rate(void) {
    size_t n = COPY_FLOATS;
    float *src = malloc(n * sizeof *src), *dst = malloc(n * sizeof *dst);
    double best = 0;
    if (src && dst) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) src[i] = (float)i, dst[i] = 0.0f; /* first touch, in parallel */
        for (int rep = 0; rep < 5; rep++) {
            int64_t t0 = dp_clock_ns();
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < n; i++) dst[i] = src[i];
            double s = (double)(dp_clock_ns() - t0) * 1e-9;
            double rate = 2.0 * (double)(n * sizeof *src) / s;
            if (s > 0 && rate > best) best = rate;
        }
    }
    free(src), free(dst);
    return best;
}

int dp_cpu_peak(dp_device *dev, dp_dtype t, double *flops, double *bandwidth, char *how, size_t n) {
    (void)dev;
    if (t != DP_F32) return dp_error_set(DP_ENOTSUP, "cpu: no peak for dtype %s (f32 only)", dp_dtype_name(t));
    if (!measured) {
        peak_flops = gemm_rate();
        peak_bandwidth = copy_rate();
        measured = peak_flops > 0 && peak_bandwidth > 0;
        if (!measured) return dp_error_set(DP_EOOM, "cpu: no host memory to measure the peak");
    }
    *flops = peak_flops;
    *bandwidth = peak_bandwidth;
    snprintf(how, n,
             "measured: best of 3 OpenBLAS SGEMMs %dx%dx%d (flop/s), best of 5 parallel copies of %u MiB "
             "(bytes read + written per second)",
             GEMM_N, GEMM_N, GEMM_N, (unsigned)(COPY_FLOATS * sizeof(float) >> 20));
    return DP_OK;
}
