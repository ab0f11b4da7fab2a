/* cuda_profile.h: the CUDA backend's timers (events on its stream) and peak figures, for
 * profile = "ops" (core/profile.h). Only compiled with DPPROF_HAVE_CUDA. */
#ifndef DP_CUDA_PROFILE_H
#define DP_CUDA_PROFILE_H

#include "backend.h"

/* Records a new event on the device's stream into *mark. */
int dp_cuda_timer_mark(dp_device *dev, void **mark);
/* Milliseconds between two recorded events (after a sync); -1 when they cannot be read. */
double dp_cuda_timer_ms(dp_device *dev, void *from, void *to);
/* Destroys an event made by dp_cuda_timer_mark. */
void dp_cuda_timer_release(dp_device *dev, void *mark);
/* Theoretical peaks from the device's attributes: SMs x peak clock x flops per SM per clock
 * (f32: the CUDA cores' FMAs; bf16: dense tensor cores, known for sm_80 and sm_90) and
 * memory clock x 2 (double data rate) x bus width. DP_ENOTSUP for an architecture or dtype whose
 * rate this table does not know. */
int dp_cuda_peak(dp_device *dev, dp_dtype t, double *flops, double *bandwidth, char *how, size_t n);

#endif
