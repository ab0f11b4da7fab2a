/* model_io.h: saving and loading models as Hugging Face checkpoints, so that a model moves
 * between dpprof and PyTorch (transformers' from_pretrained / save_pretrained).
 *
 * A checkpoint is a directory holding
 *   config.json        HF's configuration (GPT2Config / LlamaConfig keys); the sizes come from it
 *   model.safetensors  the weights under their HF names and layouts (GPT-2's Conv1D weights are
 *                      in x out; a tied GPT-2 head is not stored, as HF does); F32 when written,
 *                      F32/BF16/F16 when read. A sharded checkpoint
 *                      (model.safetensors.index.json and its shards: bare file names in the
 *                      directory, regular files) is read too, in time near-linear in its map.
 * and, for a model with LoRA adapters, PEFT's files:
 *   adapter_config.json        peft_type LORA, r, lora_alpha, target_modules
 *   adapter_model.safetensors  base_model.model.<linear>.lora_A.weight (r x in) and
 *                              .lora_B.weight (out x r)
 * so that peft.PeftModel.from_pretrained(base, dir) finds them. The base weights are saved in
 * model.safetensors as they are (frozen); adapter_config.json's base_model_name_or_path names the
 * checkpoint the base was loaded from (absolute), or for a model made from a shape the saved
 * directory itself (its config.json and model.safetensors are the base), so that
 * peft.AutoPeftModelForCausalLM.from_pretrained(dir) finds a base.
 * A save also writes what generation needs from the source checkpoint (dp_model_origin):
 * config.json's bos_token_id, eos_token_id and pad_token_id as the source gives them (null where it
 * gives none, or for a model made from a shape: never transformers' own defaults, GPT-2's 50256,
 * whatever the vocabulary), and generation_config.json: the source's, else one holding those ids.
 * A PEFT adapter folder (adapter_config.json and adapter_model.safetensors alone, as PEFT writes
 * it) loads onto its base: dp_model_load_opts.adapter. */
#ifndef DP_MODEL_IO_H
#define DP_MODEL_IO_H

#include "model.h"

/* The largest seq_len a load takes from the checkpoint when none is given: T is the checkpoint's
 * maximum positions up to this (a file's 131072 or 2^31 positions are no default to run). */
#define DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX 4096

/* What a checkpoint does not say: runtime choices of the loaded model. */
typedef struct dp_model_load_opts {
    int64_t seq_len;       /* T; 0 = the checkpoint's maximum positions (n_positions, max_position_embeddings),
                            * at most DP_MODEL_LOAD_SEQ_LEN_DEFAULT_MAX */
    int64_t batch;         /* maximum batch size; 0 = 1 */
    dp_dtype dtype;        /* compute dtype: DP_F32 (default) or DP_BF16 */
    uint64_t seed;         /* seeds fresh LoRA adapters (lora_rank > 0 without saved adapters) */
    int lora_rank;         /* 0: none, unless the directory holds adapters (then theirs are loaded) */
    float lora_alpha;      /* 0 = rank (scale 1) */
    unsigned lora_targets; /* DP_LORA_* bits; 0 = qkv */
    int master_weights;    /* bf16: f32 masters for trainable parameters (1, default) */
    int checkpoint;        /* activation checkpointing (dp_model_config.checkpoint): 0 off (default) */
    int64_t parts_world;   /* build in parts (dp_model_config.parts_world): each tensor read whole into a
                            * `temp`, rank parts_rank's part cut from it, the temporary freed; 0 or 1 = whole */
    int64_t parts_rank;
    const char *adapter; /* a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) to
                          * load onto dir's base; NULL: dir's own adapters, if it has them */
    float rope_theta;    /* rope's base in place of config.json's (longer-context studies); 0 = the file's */
} dp_model_load_opts;

/* Fills opts with the defaults (all zero but dtype DP_F32 and master_weights 1). */
void dp_model_load_opts_default(dp_model_load_opts *opts);

/* Token ids a save writes that the model's origin does not give (or that replace its): each a
 * token id in [0, vocab), or -1 to keep the origin's (null for a model made from a shape). */
typedef struct dp_model_save_opts {
    int64_t bos_token_id, eos_token_id, pad_token_id;
} dp_model_save_opts;

/* Fills opts with the defaults (every id -1: the origin's). */
void dp_model_save_opts_default(dp_model_save_opts *opts);

/* Writes m as a checkpoint into dir (created if missing; its parent must exist): config.json,
 * generation_config.json, model.safetensors and, with LoRA, adapter_config.json and
 * adapter_model.safetensors. Files are replaced atomically. DP_EIO naming the file, DP_ENOTSUP on
 * the plan device (no values). */
int dp_model_save(dp_model *m, const char *dir);

/* dp_model_save with token ids of the caller's (opts NULL: the defaults); DP_EINVAL naming the
 * key and the vocabulary's range for an id outside it. */
int dp_model_save_with(dp_model *m, const char *dir, const dp_model_save_opts *opts);

/* Reads dir/config.json into cfg (arch, sizes, key/value heads and head_dim, eps, rope theta and
 * scaling, tie, init std); runtime fields (seq_len, batch, dtype, LoRA) keep cfg's defaults. DP_EIO
 * when missing, DP_EINVAL naming the key when malformed (a value of the wrong type included),
 * DP_ENOTSUP naming what dpprof does not model (another rope type, another activation, biases in
 * Llama linears). */
int dp_model_config_read(const char *dir, dp_model_config *cfg);

/* Reads the PEFT adapter in dir (adapter_config.json, the header of adapter_model.safetensors) for
 * the base cfg describes: its rank, alpha and targets into cfg's lora fields, as dp_model_load
 * reads them. DP_EIO when dir holds no adapter_config.json, the errors of dp_model_load's adapter
 * checks otherwise. */
int dp_model_adapter_read(const char *dir, dp_model_config *cfg);

/* Builds a model on dev from the checkpoint in dir: sizes from config.json, runtime choices from
 * opts (NULL = defaults), every parameter from model.safetensors (missing or misshapen tensors are
 * errors naming them; unknown tensors too, except HF's non-parameter buffers such as GPT-2's
 * attn.bias masks; so are non-finite values). Every tensor's header is checked against the config,
 * and the parameters' bytes against dev's memory (its allocator's limit, else its size: DP_EOOM
 * naming both), before anything is allocated. Adapters: adapter_config.json's keys are honoured
 * as PEFT reads them or refused naming the key (peft_targets.h for target_modules; its targets
 * must be the adapter tensors present), and adapter_model.safetensors without
 * adapter_config.json is refused. On the plan device config.json alone will do (no weights: no values to
 * hold); weights that are there are checked against it. With opts->adapter the adapters are that
 * folder's (dir must then hold none of its own). A dir holding a PEFT adapter but no config.json is
 * refused saying so and how to load it (with its base; base_model_name_or_path when it names a
 * local folder). The model's origin (dp_model_origin) is dir's: its path, token ids and
 * generation_config.json (a malformed one refused naming the file). Returns DP_OK and *out, or a
 * status with a message naming the file. */
int dp_model_load(dp_device *dev, const char *dir, const dp_model_load_opts *opts, dp_model **out);

#endif
