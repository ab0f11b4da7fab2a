/* cpu_peak.h: the CPU's peak flop/s and memory bandwidth, measured (profile = "ops" rates
 * achieved figures against them). */
#ifndef DP_CPU_PEAK_H
#define DP_CPU_PEAK_H

#include "backend.h"

/* The backend table's `peak` entry: f32 only (the CPU backend computes bf16 in f32). Measured
 * once per process and cached: the best of 3 OpenBLAS SGEMMs of 1024x1024x1024 after one warm-up
 * (flop/s), and the best of 5 STREAM-style parallel copies of 64 MiB (bytes read + written per
 * second). */
int dp_cpu_peak(dp_device *dev, dp_dtype t, double *flops, double *bandwidth, char *how, size_t n);

#endif
