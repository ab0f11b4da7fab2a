/* cuda_profile.c: CUDA events as op timers, and the device's theoretical peaks. */
#include "cuda_profile.h"
#include "cuda_stream.h"
#include "device.h"
#include "error.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

int dp_cuda_timer_mark(dp_device *dev, void **mark) {
    cudaEvent_t ev;
    *mark = NULL;
    cudaError_t e = cudaEventCreate(&ev);
    if (e != cudaSuccess) return dp_error_set(DP_EDEVICE, "cudaEventCreate failed: %s", cudaGetErrorString(e));
    e = cudaEventRecord(ev, dp_cuda_stream(dev));
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        return dp_error_set(DP_EDEVICE, "cudaEventRecord failed: %s", cudaGetErrorString(e));
    }
    *mark = ev;
    return DP_OK;
}

double dp_cuda_timer_ms(dp_device *dev, void *from, void *to) {
    (void)dev;
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to) != cudaSuccess) {
        cudaGetLastError();
        return -1.0;
    }
    return ms;
}

void dp_cuda_timer_release(dp_device *dev, void *mark) {
    (void)dev;
    if (mark) cudaEventDestroy((cudaEvent_t)mark);
}

/* Dense flops per SM per clock of dtype t on compute capability major.minor; 0 when unknown. */
static double flops_per_sm_clock(int major, int minor, dp_dtype t) {
    if (t == DP_F32) /* FMA = 2 flops; sm_80 has 64 FP32 lanes per SM, later ones 128 */
        return major == 8 && minor == 0 ? 128.0 : major >= 8 ? 256.0 : 0.0;
    if (t == DP_BF16) { /* tensor cores, dense, f32 accumulation */
        if (major == 8 && minor == 0) return 2048.0;
        if (major == 9 && minor == 0) return 4096.0;
    }
    return 0.0;
}

int dp_cuda_peak(dp_device *dev, dp_dtype t, double *flops, double *bandwidth, char *how, size_t n) {
    int sms = 0, clock_khz = 0, mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess) {
        cudaGetLastError();
        return dp_error_set(DP_EDEVICE, "cuda: cannot read the device's clocks");
    }
    double per = flops_per_sm_clock(dev->info.cc_major, dev->info.cc_minor, t);
    if (per <= 0)
        return dp_error_set(DP_ENOTSUP, "cuda: no peak rate known for %s on sm_%d%d", dp_dtype_name(t),
                            dev->info.cc_major, dev->info.cc_minor);
    *flops = (double)sms * (double)clock_khz * 1e3 * per;
    *bandwidth = (double)mem_khz * 1e3 * 2.0 * (double)bus_bits / 8.0;
    snprintf(how, n, "theoretical: %d SMs x %.0f MHz x %.0f %s flops per SM per clock; memory %.0f MHz x 2 x %d bits",
             sms, clock_khz / 1e3, per, dp_dtype_name(t), mem_khz / 1e3, bus_bits);
    return DP_OK;
}
