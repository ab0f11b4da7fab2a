/* cuda_flash_variant.h: the CUDA backend's benchmark knob DPPROF_FLASH_VARIANT, which picks the
 * configuration of the bf16 flash tile kernels (kernels/dp_kernels.h, dpk_dp_flash_select).
 * Plain C, compiled in every build so that its test runs without CUDA. */
#ifndef DP_CUDA_FLASH_VARIANT_H
#define DP_CUDA_FLASH_VARIANT_H

/* Gram 0..3, gradient 0..2; 0 is the default, the others exist to be benchmarked. */
#define DP_CUDA_FLASH_GRAM_VARIANTS 4
#define DP_CUDA_FLASH_GRAD_VARIANTS 3

/* Parses "GRAM[,GRAD]" (NULL or "": 0, 0) into *gram, *grad; DP_EINVAL naming the valid ranges. */
int dp_cuda_flash_variant_parse(const char *text, int *gram, int *grad);

#endif
