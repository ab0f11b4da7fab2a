/* cpu_layers.h: the CPU implementation of the transformer layer ops (layer_ops.h). It is the
 * specification the CUDA kernels are compared against. */
#ifndef DP_CPU_LAYERS_H
#define DP_CPU_LAYERS_H

#include "layer_ops.h"

/* The CPU layer table (C + OpenMP; deterministic whatever the thread count). */
extern const dp_layer_ops dp_cpu_layer_ops;

#endif
