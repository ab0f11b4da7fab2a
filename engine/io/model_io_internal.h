/* model_io_internal.h: what model_io.c (config.json, saving) and model_load.c (loading) share:
 * paths in a checkpoint directory, JSON files and keys read with messages naming the file and
 * the key, PEFT's tensor names. */
#ifndef DP_MODEL_IO_INTERNAL_H
#define DP_MODEL_IO_INTERNAL_H

#include "model.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#define PEFT_PREFIX "base_model.model."

/* dir/name into out (n bytes); DP_EINVAL naming both when it does not fit. */
int dpio_join(char *out, size_t n, const char *dir, const char *name);
/* Whether anything is at path: a file, a link (dangling too), a directory, a device. */
int dpio_name_taken(const char *path);
/* Reads path (a regular file) as a JSON object; DP_EINVAL naming the line and column of a
 * syntax error, or the key of a number out of a double's range (1e999). */
int dpio_read_json(const char *path, cJSON **out);
/* A positive integer key; absent is an error when required, else *out is kept. */
int dpio_cfg_int(const char *path, const cJSON *root, const char *key, int required, int64_t *out);
/* A positive number key; absent keeps *out. */
int dpio_cfg_num(const char *path, const cJSON *root, const char *key, float *out);
/* A boolean key; absent keeps *out. */
int dpio_cfg_bool(const char *path, const cJSON *root, const char *key, int *out);
/* A string key; absent (or null) gives def. */
int dpio_cfg_str(const char *path, const cJSON *root, const char *key, const char *def, const char **out);

/* Reads dir's origin (dp_model_origin): its absolute path, config.json's token ids, its
 * generation_config.json (DP_EINVAL naming it when malformed). On failure o holds nothing. */
int dpio_origin_read(const char *dir, dp_model_origin *o);
/* Frees o's strings and zeroes it. */
void dpio_origin_clear(dp_model_origin *o);

/* Whether p is a LoRA adapter's A or B. */
static inline int dpio_is_lora(const dp_param *p) { return p->kind == DP_PARAM_LORA_A || p->kind == DP_PARAM_LORA_B; }

/* PEFT's key for a LoRA parameter: base_model.model.<linear>.lora_A.weight. */
static inline void dpio_peft_key(const dp_param *p, char *out, size_t n) { snprintf(out, n, PEFT_PREFIX "%s", p->name); }

#endif
