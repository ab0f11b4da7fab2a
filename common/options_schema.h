/* options_schema.h: every option a configuration takes, section by section, described once: its
 * key, type, range, default, valid words and the line that documents it.
 *
 * The readers of options take their key lists from here: the bindings (lua/bind: dpprof.model's
 * KEYS and LOAD_KEYS, dpprof.dpsgd.WRAP_KEYS, dpprof.dist.KEYS), the experiment's configuration
 * (lua/dpprof/config.lua: its top keys, its model's, dp's, data's and optimizer's, which keys are
 * integers), `dpprof fit`'s and `dpprof risk`'s command-line words and their types, dp.sweep's
 * vary keys, and the options table of docs/lua.md (`dpprof options --markdown` prints it; the test
 * options_doc checks the page holds it). All of them see it through dpprof.options_schema
 * (lua/bind/lua_options_schema.c). An option is added, renamed or retyped here, once, and then used
 * where it takes effect.
 *
 * Sections: experiment (an experiment's top level, with the device section's keys), model (dpprof.model's table),
 * checkpoint (a Hugging Face checkpoint an experiment's model reads), dp (the DP-SGD wrapper's options), distributed,
 * data, optimizer, device (an experiment's top-level keys of where it runs and what a plan run models) and sweep
 * (dp.sweep's own options; its vary keys are the SWEEP rows of the others).
 *
 * type: INTEGER (an integer; an integral float is one), NUMBER, BOOLEAN, STRING, WORD (one of
 * `choices`, a comma-separated list; NULL: a list the engine holds, named in the doc), TABLE, LIST,
 * SETTING (several types: the doc line says which), FUNCTION, ANY.
 * min, max: an INTEGER's or NUMBER's range, both ends included (DPO_UNBOUNDED: none); the readers'
 * own checks name the key when a value is outside it.
 * def: the default as the docs write it (a value, or how it is derived: "heads"); NULL: none
 * (absent means off, or the option is required).
 * flags: REQUIRED; ZERO_DEFAULT (0 is had by leaving the key out: it means `def`, so a command line
 * refuses 0 typed for it); FIT (a word of dpprof fit's and dpprof risk's command lines, as it is);
 * SWEEP (a vary key of dp.sweep by its bare name: {section, key}); LOAD (dpprof.model.load takes
 * it beside a checkpoint's files: a runtime choice the files leave to the caller); SET_ELSEWHERE
 * (a dp row an experiment sets at its top level or derives, not in its dp table); EXPERIMENT (a
 * row an experiment reads that the engine's reader of the section does not: dp.accountant);
 * ADAMW, SGD (an optimizer row that only that optimizer takes); RISK (a fit word dpprof risk takes). */
#ifndef DPPROF_OPTIONS_SCHEMA_H
#define DPPROF_OPTIONS_SCHEMA_H

#include <stddef.h>

#define DPO_UNBOUNDED 1e300

/* The sections, in the order the docs give them, as X(ID, "name"). */
/* clang-format off */
#define DPO_SECTIONS(X)                                                                                               \
    X(EXPERIMENT, "experiment")                                                                                       \
    X(MODEL, "model")                                                                                                 \
    X(CHECKPOINT, "checkpoint")                                                                                       \
    X(DP, "dp")                                                                                                           \
    X(DISTRIBUTED, "distributed")                                                                                     \
    X(DATA, "data")                                                                                                   \
    X(OPTIMIZER, "optimizer")                                                                                         \
    X(DEVICE, "device")                                                                                               \
    X(SWEEP, "sweep")                                                                                                 \
    X(FIT, "fit")                                                                                                     \
    X(RISK, "risk")
/* clang-format on */

typedef enum {
#define DPO_ENUM(id, name) DPO_S_##id,
    DPO_SECTIONS(DPO_ENUM)
#undef DPO_ENUM
        DPO_N_SECTIONS
} dpo_section;

typedef enum {
    DPO_T_INTEGER,
    DPO_T_NUMBER,
    DPO_T_BOOLEAN,
    DPO_T_STRING,
    DPO_T_WORD,
    DPO_T_TABLE,
    DPO_T_LIST,
    DPO_T_SETTING,
    DPO_T_FUNCTION,
    DPO_T_ANY
} dpo_type;

enum {
    DPO_REQUIRED = 1,
    DPO_ZERO_DEFAULT = 2,
    DPO_FIT = 4,
    DPO_SWEEP = 8,
    DPO_LOAD = 16,
    DPO_SET_ELSEWHERE = 32,
    DPO_EXPERIMENT = 64,
    DPO_ADAMW = 128,
    DPO_SGD = 256,
    DPO_RISK = 512
};

#define DPO_U DPO_UNBOUNDED
#define DPO_INT_MAX 2147483647.0

/* X(SECTION, "key", TYPE, min, max, default, choices, flags, "doc") per option, each section's rows
 * in its order (the order its key lists and refusals give). A row a line or two: kept as written. */
/* clang-format off */
#define DPO_OPTIONS(X)                                                                                                \
    X(EXPERIMENT, "name", STRING, 0, 0, "the method", NULL, 0, "the result's name")                                   \
    X(EXPERIMENT, "model", TABLE, 0, 0, NULL, NULL, DPO_REQUIRED, "the model: the model section below")               \
    X(EXPERIMENT, "method", WORD, 0, 0, "ghost", NULL, DPO_SWEEP,                                                     \
      "the DP method: vanilla or a preset of dpprof.dpsgd.METHODS (norms and clip together)")                         \
    X(EXPERIMENT, "norms", WORD, 0, 0, NULL, NULL, DPO_SWEEP,                                                         \
      "the per-sample norms' formulation, with clip instead of method (dpprof.dpsgd.FORMULATIONS)")                   \
    X(EXPERIMENT, "clip", WORD, 0, 0, NULL, "twopass, bk", DPO_SWEEP, "the clipped gradient's pass, with norms")      \
    X(EXPERIMENT, "optimizer", TABLE, 0, 0, "{name = \"adamw\", lr = 1e-4, weight_decay = 0.01}", NULL, 0,            \
      "the optimizer: the optimizer section below")                                                                   \
    X(EXPERIMENT, "dp", TABLE, 0, 0, NULL, NULL, 0, "DP-SGD's options: the dp section below")                         \
    X(EXPERIMENT, "iters", INTEGER, 1, DPO_U, "3", NULL, DPO_SWEEP, "timed iterations")                               \
    X(EXPERIMENT, "warmup", INTEGER, 0, DPO_U, "2", NULL, DPO_SWEEP, "untimed iterations before them")                \
    X(EXPERIMENT, "seed", INTEGER, 0, DPO_U, "0", NULL, DPO_SWEEP, "seeds the weights, the data and the noise")       \
    X(EXPERIMENT, "snapshots", SETTING, 0, 0, "default", NULL, 0,                                                     \
      "\"default\", \"none\" or a list of snapshot names ({i}: the timed iteration)")                                 \
    X(EXPERIMENT, "on", TABLE, 0, 0, NULL, NULL, 0, "callbacks by event name (model_loaded, ..., finished)")          \
    X(EXPERIMENT, "data", TABLE, 0, 0, NULL, NULL, 0, "the samples: the data section below (absent: random tokens)")  \
    X(EXPERIMENT, "trace", STRING, 0, 0, NULL, NULL, 0, "a Chrome trace file to write")                               \
    X(EXPERIMENT, "profile", WORD, 0, 0, "none", "none, ops", 0, "ops: time every op (the result's profile)")         \
    X(EXPERIMENT, "distributed", TABLE, 0, 0, NULL, NULL, 0, "across ranks: the distributed section below")           \
    X(EXPERIMENT, "save", STRING, 0, 0, NULL, NULL, 0, "a directory the trained model is saved to (HF format)")       \
    X(MODEL, "arch", WORD, 0, 0, "gpt", "gpt, llama", DPO_FIT | DPO_SWEEP,                                            \
      "GPT-2 (LayerNorm, GELU, learned positions) or Llama (RMSNorm, SwiGLU, rope, grouped-query attention)")         \
    X(MODEL, "vocab", INTEGER, 1, DPO_INT_MAX, NULL, NULL, DPO_REQUIRED | DPO_FIT | DPO_SWEEP,                        \
      "the vocabulary's size")                                                                                        \
    X(MODEL, "hidden", INTEGER, 1, DPO_U, NULL, NULL, DPO_REQUIRED | DPO_FIT | DPO_SWEEP, "the hidden size d")        \
    X(MODEL, "layers", INTEGER, 1, DPO_U, NULL, NULL, DPO_REQUIRED | DPO_FIT | DPO_SWEEP, "transformer blocks")       \
    X(MODEL, "heads", INTEGER, 1, DPO_U, NULL, NULL, DPO_REQUIRED | DPO_FIT | DPO_SWEEP, "attention heads")           \
    X(MODEL, "kv_heads", INTEGER, 0, DPO_U, "heads", NULL, DPO_ZERO_DEFAULT | DPO_FIT | DPO_SWEEP,                    \
      "key and value heads (grouped-query attention; heads divides by it)")                                           \
    X(MODEL, "head_dim", INTEGER, 0, DPO_U, "hidden / heads", NULL, DPO_ZERO_DEFAULT | DPO_FIT | DPO_SWEEP,           \
      "a head's size")                                                                                                \
    X(MODEL, "seq_len", INTEGER, 1, DPO_U, NULL, NULL, DPO_REQUIRED | DPO_FIT | DPO_SWEEP | DPO_LOAD,                 \
      "tokens a sample (a loaded checkpoint's default: its max_position_embeddings, at most 4096)")                   \
    X(MODEL, "batch", INTEGER, 1, DPO_U, "1", NULL, DPO_FIT | DPO_SWEEP | DPO_LOAD, "samples a (logical) batch")      \
    X(MODEL, "mlp_ratio", NUMBER, 0, DPO_U, "4 (gpt), 8/3 (llama)", NULL, DPO_FIT | DPO_SWEEP,                        \
      "the MLP's width over hidden, when ffn is not given")                                                           \
    X(MODEL, "ffn", INTEGER, 0, DPO_U, "mlp_ratio x hidden", NULL, DPO_ZERO_DEFAULT | DPO_FIT | DPO_SWEEP,            \
      "the MLP's width (Llama's intermediate_size)")                                                                  \
    X(MODEL, "max_positions", INTEGER, 0, DPO_U, "seq_len", NULL, DPO_ZERO_DEFAULT,                                   \
      "positions the model holds (GPT's position table; rope scaling's reference)")                                   \
    X(MODEL, "tie_head", BOOLEAN, 0, 0, "true (gpt), false (llama)", NULL, DPO_FIT,                                   \
      "the head shares the token embedding's weights")                                                                \
    X(MODEL, "dtype", WORD, 0, 0, "f32", "f32, bf16", DPO_FIT | DPO_SWEEP | DPO_LOAD,                                 \
      "the weights' precision (bf16: LoRA's frozen base in bf16 only)")                                               \
    X(MODEL, "norm_eps", NUMBER, 0, DPO_U, "1e-05", NULL, 0, "the norms' epsilon")                                    \
    X(MODEL, "rope_theta", NUMBER, 0, DPO_U, "10000", NULL, DPO_FIT | DPO_SWEEP | DPO_LOAD,                           \
      "rope's base (Llama; with a checkpoint: in place of its config.json's)")                                        \
    X(MODEL, "rope_scaling", TABLE, 0, 0, NULL, NULL, 0,                                                              \
      "transformers' rope_scaling: {rope_type = \"llama3\", factor =, low_freq_factor =, high_freq_factor =, "        \
      "original_max_position_embeddings =}")                                                                          \
    X(MODEL, "init_std", NUMBER, 0, DPO_U, "0.02", NULL, 0, "the random weights' standard deviation")                 \
    X(MODEL, "seed", INTEGER, 0, DPO_U, "0", NULL, DPO_LOAD, "the random weights' seed (an experiment's: its seed)")  \
    X(MODEL, "device", WORD, 0, 0, "the current device", "cpu, cuda, plan, auto", DPO_LOAD,                           \
      "where the model lives (an experiment names it at its top level)")                                              \
    X(MODEL, "lora", TABLE, 0, 0, NULL, NULL, DPO_LOAD,                                                               \
      "LoRA adapters {rank =, alpha = rank, targets = {\"qkv\"}} (dpprof's groups or PEFT's module names)")           \
    X(MODEL, "master_weights", BOOLEAN, 0, 0, "true", NULL, DPO_FIT | DPO_LOAD,                                       \
      "a bf16 model's trained weights keep an f32 master copy")                                                       \
    X(MODEL, "checkpoint", SETTING, 0, 0, "false", NULL, DPO_SWEEP | DPO_LOAD,                                        \
      "activation checkpointing: false, \"blocks\" (every block) or N (every N-th block)")                            \
    X(MODEL, "distributed", TABLE, 0, 0, NULL, NULL, 0,                                                               \
      "the distributed section's table (fsdp: the model is built in parts for its rank)")                             \
    X(MODEL, "parts", TABLE, 0, 0, NULL, NULL, DPO_LOAD,                                                              \
      "{world_size = N, rank = r}: only rank r's part of every tensor (an fsdp rank's)")                              \
    X(CHECKPOINT, "path", STRING, 0, 0, NULL, NULL, 0,                                                                \
      "a Hugging Face checkpoint's directory: config.json's model, its weights unless weights = \"random\"")          \
    X(CHECKPOINT, "weights", WORD, 0, 0, "file", "file, random", 0, "read the checkpoint's weights, or random ones")  \
    X(CHECKPOINT, "adapter", STRING, 0, 0, NULL, NULL, 0, "a PEFT adapter's directory for the checkpoint (its LoRA)") \
    X(DP, "method", WORD, 0, 0, NULL, NULL, DPO_SET_ELSEWHERE, "a preset of dpprof.dpsgd.METHODS")                        \
    X(DP, "norms", WORD, 0, 0, NULL, NULL, DPO_SET_ELSEWHERE, "the per-sample norms' formulation")                        \
    X(DP, "clip", WORD, 0, 0, NULL, "twopass, bk", DPO_SET_ELSEWHERE, "the clipped gradient's pass")                      \
    X(DP, "max_grad_norm", NUMBER, 0, DPO_U, "1", NULL, DPO_SWEEP, "the clipping bound C (each group's unless given)")    \
    X(DP, "clipping", WORD, 0, 0, "flat", NULL, DPO_SWEEP | DPO_FIT,                                                      \
      "which tensors share a bound (dpprof.dpsgd.STYLES: flat, per_layer, per_block, groups)")                            \
    X(DP, "clip_fn", WORD, 0, 0, "abadi", NULL, DPO_SWEEP | DPO_FIT,                                                      \
      "a group's factor: abadi min(1, C / (norm + 1e-6)), automatic C / (norm + gamma)")                                  \
    X(DP, "gamma", NUMBER, 0, DPO_U, "0.01", NULL, 0, "automatic clipping's gamma")                                       \
    X(DP, "adaptive", TABLE, 0, 0, NULL, NULL, 0,                                                                         \
      "adaptive clipping (Opacus's AdaClip): {target_unclipped_quantile =, clipbound_learning_rate =, "                   \
      "max_clipbound =, min_clipbound =, unclipped_num_std =}, every one given")                                          \
    X(DP, "bounds", TABLE, 0, 0, NULL, NULL, 0,                                                                           \
      "per_layer: {[\"pattern\"] = bound, ...}, the bounds of the tensors a Hugging Face name pattern names")             \
    X(DP, "groups", LIST, 0, 0, NULL, NULL, 0,                                                                            \
      "clipping = groups: {{name =, patterns = {...}, max_grad_norm =}, ...}, each trainable tensor in one")              \
    X(DP, "noise_multiplier", NUMBER, 0, DPO_U, "1", NULL, DPO_SWEEP,                                                     \
      "sigma: the noise's std is sigma x C (x ||C||_2 over the groups)")                                                  \
    X(DP, "sample_rate", NUMBER, 0, 1, "0.01", NULL, DPO_SWEEP, "q, each sample's chance to be in a batch (Poisson)")     \
    X(DP, "dataset_size", INTEGER, 1, DPO_U, NULL, NULL, 0, "N: the sample rate is batch / N")                            \
    X(DP, "expected_batch_size", INTEGER, 1, DPO_U, NULL, NULL, DPO_SET_ELSEWHERE,                                        \
      "the batch the loss is averaged over (an experiment's: model.batch)")                                               \
    X(DP, "max_physical_batch_size", INTEGER, 1, DPO_U, NULL, NULL, DPO_SWEEP,                                            \
      "the largest batch one forward takes (micro-batching)")                                                             \
    X(DP, "poisson", BOOLEAN, 0, 0, "false", NULL, 0, "Poisson sampling: batches of a random size")                       \
    X(DP, "seed", INTEGER, 0, DPO_U, "0", NULL, DPO_SET_ELSEWHERE, "the noise's and sampling's seed")                     \
    X(DP, "delta", NUMBER, 0, 1, "1e-05", NULL, 0, "the delta epsilon is reported for")                                   \
    X(DP, "flash_impl", WORD, 0, 0, "tiles", NULL, 0, "flash clipping's kernel (dpprof.dpsgd.FLASH_IMPLS)")               \
    X(DP, "accountant", WORD, 0, 0, "prv", NULL, DPO_SWEEP | DPO_EXPERIMENT,                                              \
      "the accountant epsilon is reported by (dpprof.privacy.ACCOUNTANTS)")                                               \
    X(DISTRIBUTED, "strategy", WORD, 0, 0, "ddp", "ddp, zero2, fsdp", DPO_SWEEP,                                      \
      "ddp: gradients all-reduced; zero2: gradients and optimizer states sharded; fsdp: parameters too")              \
    X(DISTRIBUTED, "world_size", INTEGER, 1, 1048576, "the launched world's", NULL, DPO_SWEEP,                        \
      "ranks (a plan run: the world it models)")                                                                      \
    X(DISTRIBUTED, "rank", INTEGER, 0, 1048575, "the launched rank", NULL, 0, "the rank a plan run plays")            \
    X(DATA, "file", STRING, 0, 0, NULL, NULL, 0, "a token file (little-endian ids)")                                  \
    X(DATA, "file_dtype", WORD, 0, 0, "uint16", "uint16, uint32", 0, "the token file's id type")                      \
    X(DATA, "eos", INTEGER, 0, DPO_U, NULL, NULL, 0, "the id that ends a document: the file's documents are samples") \
    X(DATA, "order", WORD, 0, 0, "random", "random, sequential", 0, "the samples' order")                             \
    X(DATA, "tokens", LIST, 0, 0, NULL, NULL, 0, "the samples themselves: lists of token ids")                        \
    X(DATA, "lengths", LIST, 0, 0, NULL, NULL, 0, "samples of these lengths (random tokens)")                         \
    X(DATA, "lengths_file", STRING, 0, 0, NULL, NULL, 0, "the lengths, one a line")                                   \
    X(DATA, "length_distribution", TABLE, 0, 0, NULL, NULL, 0,                                                        \
      "lengths drawn: {kind = \"lognormal\", median =, p99 =}, {kind = \"uniform\", min =, max =} or {kind = "        \
      "\"fixed\", length =}")                                                                                         \
    X(DATA, "dataset", STRING, 0, 0, NULL, NULL, 0, "a data set of text: JSONL, a JSON array or plain text")          \
    X(DATA, "tokenizer", STRING, 0, 0, "the model's path", NULL, 0, "the tokenizer.json (or its folder) of dataset")  \
    X(DATA, "field", STRING, 0, 0, "text", NULL, 0, "the record's field holding its text (chat: its messages)")       \
    X(DATA, "text", FUNCTION, 0, 0, NULL, NULL, 0, "record -> its text, or {prompt =, completion =}")                 \
    X(DATA, "chat", STRING, 0, 0, NULL, NULL, 0, "llama3: the records' messages in Llama-3's chat format")            \
    X(DATA, "format", WORD, 0, 0, "auto", "auto, jsonl, json, text, windows", 0, "how dataset is read")               \
    X(DATA, "window", INTEGER, 1, DPO_U, NULL, NULL, 0, "format windows: bytes of text a sample")                     \
    X(DATA, "max_records", INTEGER, 1, DPO_U, NULL, NULL, 0, "read at most this many records of dataset")             \
    X(DATA, "pad_to", INTEGER, 1, DPO_U, NULL, NULL, 0, "a batch's length rounded up to a multiple of this")          \
    X(DATA, "group_by_length", BOOLEAN, 0, 0, "false", NULL, 0, "batches of samples of like lengths")                 \
    X(DATA, "too_long", WORD, 0, 0, "cut", "cut, error", 0, "a sample longer than seq_len: cut to it, or refused")    \
    X(OPTIMIZER, "name", WORD, 0, 0, "adamw", "adamw, sgd", DPO_ADAMW | DPO_SGD, "the optimizer")                     \
    X(OPTIMIZER, "lr", NUMBER, 0, DPO_U, "1e-4", NULL, DPO_SWEEP | DPO_ADAMW | DPO_SGD,                               \
      "the learning rate (dpprof.optim's own default: 1e-3)")                                                         \
    X(OPTIMIZER, "betas", LIST, 0, 0, "{0.9, 0.999}", NULL, DPO_ADAMW, "AdamW's two moments' decay")                  \
    X(OPTIMIZER, "eps", NUMBER, 0, DPO_U, "1e-08", NULL, DPO_ADAMW, "AdamW's epsilon")                                \
    X(OPTIMIZER, "weight_decay", NUMBER, 0, DPO_U, "0.01", NULL, DPO_ADAMW | DPO_SGD, "decoupled weight decay")       \
    X(OPTIMIZER, "momentum", NUMBER, 0, DPO_U, "0", NULL, DPO_SGD, "SGD's momentum")                                  \
    X(DEVICE, "device", WORD, 0, 0, "auto", "cpu, cuda, plan, auto", DPO_SWEEP,                                       \
      "cpu, cuda (when built with CUDA), plan (exact accounting, no memory, no arithmetic) or auto (cuda if "         \
      "present)")                                                                                                     \
    X(DEVICE, "device_model", ANY, 0, 0, "h100", NULL, 0,                                                             \
      "a plan run's device: h100, h200, h100-calibrated, a FILE.json dpprof calibrate wrote, or such a table")        \
    X(DEVICE, "memory_limit", INTEGER, 0, DPO_U, "the device's memory", NULL, 0,                                      \
      "the allocator's limit in bytes (0: none)")                                                                     \
    X(DEVICE, "threads", INTEGER, 1, DPO_U, "the machine's cores", NULL, 0, "CPU threads")                            \
    X(SWEEP, "base", TABLE, 0, 0, NULL, NULL, DPO_REQUIRED, "the experiment every point starts from")                 \
    X(SWEEP, "vary", TABLE, 0, 0, NULL, NULL, DPO_REQUIRED,                                                           \
      "key = {values...}: every combination is a point (keys: the SWEEP ones, or dotted paths like model.hidden)")    \
    X(SWEEP, "out", STRING, 0, 0, "results/run_<timestamp>", NULL, 0,                                                 \
      "the directory the points' results and the summary go to")                                                      \
    X(SWEEP, "name", STRING, 0, 0, NULL, NULL, 0, "the sweep's name")                                                 \
    X(SWEEP, "timeout", NUMBER, 0, DPO_U, NULL, NULL, 0, "seconds a point may run")                                   \
    X(SWEEP, "resume", BOOLEAN, 0, 0, "true", NULL, 0, "skip the points whose results are in out")                    \
    X(SWEEP, "retry_failed", BOOLEAN, 0, 0, "true", NULL, 0, "with resume: run failed points again")                  \
    X(SWEEP, "trace", BOOLEAN, 0, 0, "false", NULL, 0, "each point writes a Chrome trace")                            \
    X(SWEEP, "order", LIST, 0, 0, NULL, NULL, 0, "the vary keys' order in the points' names")                         \
    X(SWEEP, "run", FUNCTION, 0, 0, "dp.experiment", NULL, 0, "what runs a point")                                    \
    X(SWEEP, "isolate", BOOLEAN, 0, 0, "true", NULL, 0, "each point in a fresh process")                              \
    X(SWEEP, "quiet", BOOLEAN, 0, 0, "false", NULL, 0, "no progress lines")                                           \
    X(SWEEP, "parallel", SETTING, 0, 0, "1", NULL, 0, "N points run side by side, or \"gpus\": one a GPU")            \
    X(SWEEP, "backend", WORD, 0, 0, "local", "local, slurm", 0, "where the points run")                               \
    X(SWEEP, "slurm", TABLE, 0, 0, NULL, NULL, 0, "the Slurm job array's options (docs/cluster.md)")                  \
    X(SWEEP, "repeats", INTEGER, 1, DPO_U, "1", NULL, 0, "runs of every point (the result gives their spread)")       \
    X(SWEEP, "combined", BOOLEAN, 0, 0, "false", NULL, 0, "also every result in memory_profile_results.json")         \
    X(FIT, "vary", WORD, 0, 0, "seq_len", "seq_len, batch, layers", 0, "what to search over")                         \
    X(FIT, "method", STRING, 0, 0, "every preset", NULL, DPO_RISK, "NAME[,NAME...]: the methods, each a row")         \
    X(FIT, "methods", STRING, 0, 0, "every preset", NULL, DPO_RISK, "the same as method=")                            \
    X(FIT, "budget_gb", NUMBER, 0, DPO_U, "the device model's", NULL, DPO_RISK, "the card's memory in GiB")           \
    X(FIT, "device_model", STRING, 0, 0, "h100", NULL, DPO_RISK, "h100, h200, h100-calibrated or FILE.json")          \
    X(FIT, "context_mb", NUMBER, 0, DPO_U, "the device model's", NULL, DPO_RISK,                                      \
      "the CUDA context and libraries outside the pool, MiB")                                                         \
    X(FIT, "reserve_overhead", NUMBER, 0, DPO_U, "the device model's", NULL, DPO_RISK,                                \
      "reserved-but-unused bytes as a fraction of the peak")                                                          \
    X(FIT, "workspace", BOOLEAN, 0, 0, "true", NULL, DPO_RISK, "model cuBLAS's workspace and the kernels' scratch")   \
    X(FIT, "lo", INTEGER, 1, DPO_U, "64 (seq_len), 1", NULL, 0, "the search's lowest value")                          \
    X(FIT, "hi", INTEGER, 1, DPO_U, "1048576 (seq_len), 65536 (batch), 1024 (layers)", NULL, 0,                       \
      "the search's highest value")                                                                                   \
    X(FIT, "granularity", INTEGER, 1, DPO_U, "64 (seq_len), 1", NULL, 0, "the search's step")                         \
    X(FIT, "preset", WORD, 0, 0, "large", "large, small", DPO_RISK, "the base model")                                 \
    X(FIT, "path", STRING, 0, 0, NULL, NULL, DPO_RISK, "a Hugging Face checkpoint's config.json instead of a preset") \
    X(FIT, "lora_rank", INTEGER, 1, DPO_U, NULL, NULL, DPO_RISK, "LoRA adapters of this rank")                        \
    X(FIT, "lora_alpha", NUMBER, 0, DPO_U, "lora_rank", NULL, DPO_RISK, "LoRA's alpha")                               \
    X(FIT, "lora_targets", STRING, 0, 0, "qkv", NULL, DPO_RISK, "N[,N...]: dpprof's groups or PEFT's module names")   \
    X(FIT, "physical", INTEGER, 1, DPO_U, NULL, NULL, 0, "the largest physical batch (micro-batching)")               \
    X(FIT, "optimizer", WORD, 0, 0, "adamw", "adamw, sgd", DPO_RISK, "the optimizer")                                 \
    X(FIT, "checkpoint", STRING, 0, 0, "off,blocks", NULL, 0,                                                         \
      "S[,S...]: activation checkpointing settings, each its own row (off, blocks or N)")                             \
    X(FIT, "out", STRING, 0, 0, NULL, NULL, DPO_RISK, "also write the answer as JSON")                                \
    X(FIT, "world_size", INTEGER, 1, 1048576, NULL, NULL, 0, "plan one rank of this many")                            \
    X(FIT, "strategy", WORD, 0, 0, "ddp", "ddp, zero2, fsdp", 0, "the planned world's strategy")                      \
    X(RISK, "lengths_file", STRING, 0, 0, NULL, NULL, 0, "one length a line, or a little-endian uint32 array")        \
    X(RISK, "lengths", STRING, 0, 0, NULL, NULL, 0, "L[,L...]: the samples' lengths")                                 \
    X(RISK, "distribution", WORD, 0, 0, NULL, "lognormal, uniform, fixed", 0, "synthetic lengths")                    \
    X(RISK, "median", NUMBER, 0, DPO_U, NULL, NULL, 0, "lognormal's median")                                          \
    X(RISK, "p99", NUMBER, 0, DPO_U, NULL, NULL, 0, "lognormal's 99th percentile")                                    \
    X(RISK, "min", INTEGER, 1, DPO_U, NULL, NULL, 0, "uniform's shortest")                                            \
    X(RISK, "max", INTEGER, 1, DPO_U, NULL, NULL, 0, "uniform's longest")                                             \
    X(RISK, "length", INTEGER, 1, DPO_U, NULL, NULL, 0, "fixed's length")                                             \
    X(RISK, "dataset", STRING, 0, 0, NULL, NULL, 0, "the lengths of a data set of text, tokenized")                   \
    X(RISK, "tokenizer", STRING, 0, 0, "path", NULL, 0, "the tokenizer.json (or its folder) of dataset")              \
    X(RISK, "field", STRING, 0, 0, "text", NULL, 0, "the record's field holding its text (chat: messages)")           \
    X(RISK, "chat", STRING, 0, 0, NULL, NULL, 0, "llama3: the records' messages in Llama-3's chat format")            \
    X(RISK, "format", WORD, 0, 0, "auto", "auto, jsonl, json, text, windows", 0, "how dataset is read")               \
    X(RISK, "window", INTEGER, 1, DPO_U, NULL, NULL, 0, "format windows: bytes of text a sample")                     \
    X(RISK, "max_records", INTEGER, 1, DPO_U, NULL, NULL, 0, "read at most this many records of dataset")             \
    X(RISK, "pad_to", INTEGER, 1, DPO_U, "1", NULL, 0, "pad a physical batch to a multiple of this many tokens")      \
    X(RISK, "group_by_length", BOOLEAN, 0, 0, "false", NULL, 0, "sort a logical batch by length before splitting it") \
    X(RISK, "too_long", WORD, 0, 0, "cut", "cut, error", 0, "a sample longer than seq_len: cut or refused")           \
    X(RISK, "sample_rate", NUMBER, 0, 1, NULL, NULL, DPO_REQUIRED, "Poisson sampling's rate")                         \
    X(RISK, "steps", INTEGER, 1, DPO_U, NULL, NULL, DPO_REQUIRED, "the run's steps")                                  \
    X(RISK, "dataset_size", INTEGER, 1, 10000000, NULL, NULL, 0, "the data set's samples")                            \
    X(RISK, "max_physical_batch_size", INTEGER, 1, DPO_U, "the logical batch", NULL, 0, "BatchMemoryManager's bound") \
    X(RISK, "target", NUMBER, 0, 1, "0.001", NULL, 0, "the run's acceptable probability")                             \
    X(RISK, "seed", INTEGER, 0, DPO_U, "0", NULL, 0, "the draws' seed")                                               \
    X(RISK, "simulate", INTEGER, 1, DPO_U, NULL, NULL, 0, "also draw this many steps as the engine's sampler does")   \
    X(RISK, "exhaustive", BOOLEAN, 0, 0, "false", NULL, 0, "plan every padded length of every row")                   \
    X(RISK, "chart", STRING, 0, 0, NULL, NULL, 0, "also draw the per-step peak's CDF per method (PNG)")
/* clang-format on */

typedef struct dpo_option {
    dpo_section section;
    const char *key;
    dpo_type type;
    double min, max;
    const char *def;     /* the default as the docs write it, or NULL */
    const char *choices; /* "a, b, c" for a WORD, or NULL */
    unsigned flags;
    const char *doc;
} dpo_option;

#define DPO_COUNT(sec, key, type, min, max, def, choices, flags, doc) +1
enum { DPO_N_OPTIONS = 0 DPO_OPTIONS(DPO_COUNT) };
#undef DPO_COUNT

/* Option i (0 <= i < DPO_N_OPTIONS), in the table's order. */
static inline const dpo_option *dpo_option_at(int i) {
#define DPO_ROW(sec, key, type, min, max, def, choices, flags, doc)                                                    \
    {DPO_S_##sec, key, DPO_T_##type, min, max, def, choices, flags, doc},
    static const dpo_option options[DPO_N_OPTIONS] = {DPO_OPTIONS(DPO_ROW)};
#undef DPO_ROW
    return i >= 0 && i < DPO_N_OPTIONS ? &options[i] : NULL;
}

/* The section's name ("model"). */
static inline const char *dpo_section_name(dpo_section s) {
#define DPO_NAME(id, name) name,
    static const char *const names[] = {DPO_SECTIONS(DPO_NAME)};
#undef DPO_NAME
    return (unsigned)s < DPO_N_SECTIONS ? names[s] : "?";
}

/* The type's name ("integer", "word", ...). */
static inline const char *dpo_type_name(dpo_type t) {
    static const char *const names[] = {"integer", "number", "boolean", "string",   "word",
                                        "table",   "list",   "setting", "function", "any"};
    return (unsigned)t <= DPO_T_ANY ? names[t] : "?";
}

/* Fills keys (room for n, NULL-terminated) with the keys of section s having every flag of
 * `with` and none of `without`, in order; returns how many (-1 when they do not fit). */
static inline int dpo_keys(dpo_section s, unsigned with, unsigned without, const char **keys, int n) {
    int k = 0;
    for (int i = 0; i < DPO_N_OPTIONS; i++) {
        const dpo_option *o = dpo_option_at(i);
        if (o->section != s || (o->flags & with) != with || (o->flags & without)) continue;
        if (k + 1 >= n) return -1;
        keys[k++] = o->key;
    }
    keys[k] = NULL;
    return k;
}

#endif
