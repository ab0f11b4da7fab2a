/* cuda_layers.h: the CUDA implementation of the transformer layer ops (layer_ops.h), mapping
 * each entry to its kernel launcher in kernels/layer_kernels.h. Only compiled with DPPROF_HAVE_CUDA. */
#ifndef DP_CUDA_LAYERS_H
#define DP_CUDA_LAYERS_H

#include "layer_ops.h"

/* The CUDA layer table (kernels on the backend's stream; deterministic run to run).
 * With DPPROF_CUDA_SYNC_CHECK=1 in the environment every launch is followed by a stream
 * synchronisation and an error check, so a failing kernel is named by its op. */
extern const dp_layer_ops dp_cuda_layer_ops;

#endif
