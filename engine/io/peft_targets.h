/* peft_targets.h: which linears an adapter_config.json's `target_modules` selects, matched as
 * PEFT matches them (peft.tuners.tuners_utils.check_target_module_exists) against the base
 * model's module names ("model.layers.3.self_attn.q_proj", "transformer.h.0.attn.c_attn"):
 *   - a list of names: a module matches a name it equals or ends with after a dot;
 *   - a string: "all-linear" (every linear but the LM head), else a regular expression the
 *     whole module name must match (PEFT's re.fullmatch: POSIX extended syntax with Python's
 *     \d \w \s and (?:...); at most 1024 characters and no {m,n} counts, which glibc compiles
 *     by copying: nested ones take gigabytes);
 *   - null: PEFT's default for the model type (llama q_proj, v_proj; gpt2 c_attn).
 * dpprof adapts the same linears in every block: a selection that differs between blocks, that
 * takes a module dpprof cannot adapt (embeddings, the LM head) or that selects nothing is
 * refused, naming the field. */
#ifndef DP_PEFT_TARGETS_H
#define DP_PEFT_TARGETS_H

#include "model.h"

#include <cjson/cJSON.h>

/* The DP_LORA_* bits that target_modules (v, NULL when absent) selects in a model of arch with
 * `layers` blocks. DP_EINVAL (a bad value: an empty list, a non-string entry, a name that
 * matches no module, a regex that does not compile) or DP_ENOTSUP (a selection dpprof cannot
 * train), with a message naming path and the field. */
int dp_peft_targets(const char *path, const cJSON *v, dp_arch arch, int64_t layers, unsigned *bits);

/* The DP_LORA_* bits of the linear a module name ends in (".self_attn.q_proj", ".attn.c_attn"),
 * 0 when it is none of arch's linears. */
unsigned dp_peft_target_of(dp_arch arch, const char *module);

/* Writes the linears of bits as PEFT names them ("q_proj, v_proj"; gpt's "c_attn, mlp.c_proj")
 * into out. */
void dp_peft_targets_text(dp_arch arch, unsigned bits, char *out, size_t n);

#endif
