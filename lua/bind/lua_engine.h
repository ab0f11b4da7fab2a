/* lua_engine.h: the engine's Lua bindings. Each dpl_open_* adds its functions to the module
 * table on top of the stack (dpprof_openlib in openlib.c assembles the module); lua_util.h has
 * the conventions they share. */
#ifndef DP_LUA_ENGINE_H
#define DP_LUA_ENGINE_H

#include "dpsgd_dist.h"
#include "model.h"
#include "tensor.h"

#include <lua.h>

/* Adds dpprof.tokenizer (lua_tokenizer.c: Hugging Face tokenizer.json, encode and decode). */
void dpl_open_tokenizer(lua_State *L);
/* Adds dpprof.dataset (lua_dataset.c: data sets of text read as a stream of records). */
void dpl_open_dataset(lua_State *L);

/* Adds dpprof.tensor, dpprof.matmul and the tensor metatable. */
void dpl_open_tensor(lua_State *L);
/* Adds dpprof.memory (stats, snapshots, scopes, events, timeline, limits, OOM details). */
void dpl_open_memory(lua_State *L);
/* Pushes the OOM record, the one shape memory.last_oom, oom_details and a result's `oom` share:
 * {requested_bytes, category, module, live_bytes={category=bytes}, total_live_bytes, limit_bytes,
 * device} (docs/results.md). */
void dpl_push_oom(lua_State *L, const dp_oom_info *o, const char *device);
/* The most CPU threads dpprof.threads, a forked child's 'threads' and an experiment's threads take
 * (dpprof.MAX_THREADS). */
#define DPL_MAX_THREADS 4096
/* Adds device selection and information, sync, the ledger, the clock, the version, the device
 * names a configuration may give (dpprof.DEVICES) and the CPU backend's thread count
 * (dpprof.threads). */
void dpl_open_device(lua_State *L);
/* Adds dpprof.profile (per-op timing: enable, collect, calls, overhead, the device's peak),
 * dpprof.clock_model and dpprof.host_memory (lua_profile.c). */
void dpl_open_profile(lua_State *L);
/* Adds dpprof.isolate (run a function in a forked child), isolate_start, isolate_wait,
 * oom_details, cuda_initialised and testing_crash (lua_process.c). */
void dpl_open_process(lua_State *L);
/* Adds the host's dpprof.time, sleep, pid, environment and executable (lua_host.c). */
void dpl_open_host(lua_State *L);
/* Adds dpprof.read_file, write_file, writable, lock, name_max and remove_stale_temps (files named
 * by scripts, through common/safe_file), mkdir_p and list_dir (lua_files.c). */
void dpl_open_files(lua_State *L);
/* Adds dpprof.json: encode, decode, null, array, object, is_null (lua_json.c). */
void dpl_open_json(lua_State *L);
/* Adds dpprof.results_schema: the result JSON's one description (common/results_schema.h) as
 * tables, which lua/dpprof/results.lua validates by (lua_results_schema.c). */
void dpl_open_results_schema(lua_State *L);

/* Adds dpprof.options_schema: every option a configuration takes (common/options_schema.h) as
 * Lua tables, and its keys(section, filter) (lua_options_schema.c). */
void dpl_open_options_schema(lua_State *L);
/* Adds dpprof.model (a callable table: dpprof.model{...} builds a model, dpprof.model.check{...}
 * checks its options without a device; other bindings add fields such as dpprof.model.load) and
 * the model metatable (lua_model.c). */
void dpl_open_model(lua_State *L);
/* The live model at idx, or an argument error (also for a freed model). */
dp_model *dpl_check_model(lua_State *L, int idx);
/* The model at idx (an argument error when it is no model), or NULL when it was freed. */
dp_model *dpl_model_or_freed(lua_State *L, int idx);
/* Pushes a model userdata owning m (freed with it, or at once if pushing fails). */
void dpl_push_model(lua_State *L, dp_model *m);
/* Checks the batch table at idx (live tensors batch.inputs and batch.targets, else an error
 * naming fname), sets *inputs and *targets, and pushes what dpl_model_hold_batch takes; returns
 * its index. Call before the forward: holding after it then allocates nothing. */
int dpl_batch_prepare(lua_State *L, int idx, const char *fname, dp_tensor **inputs, dp_tensor **targets);
/* After a successful forward of the model at idx (by any binding) on the batch prepared at
 * prepared: the model holds that batch, pinned (dpl_tensor_pin) until its state goes. */
void dpl_model_hold_batch(lua_State *L, int idx, int prepared);
/* After any engine call that may change the saved state of the model at idx (forward, backward,
 * release, free, a DP phase): unpins the batch it held when the engine no longer holds its
 * forward. */
void dpl_model_sync_batch(lua_State *L, int idx);
/* Adds m:save(dir) to the model's methods and dpprof.model.load(dir, {...}) (lua_model_io.c);
 * call after dpl_open_model. */
void dpl_open_model_io(lua_State *L);
/* The `distributed` option the model userdata at idx was made with (dp.model{distributed=}):
 * non-zero with it in *cfg, or 0 when it has none. */
int dpl_model_distributed(lua_State *L, int idx, dpsgd_dist_config *cfg);
/* Reads the `distributed` table at idx ({strategy=, world_size=, rank=}, dpprof.dist.KEYS) into
 * cfg: ddp when no strategy is named, DPSGD_DIST_UNSET for a size or rank not given; raises
 * naming fname for a value of the wrong type, an unknown key or strategy (lua_dist.c). */
void dpl_dist_read(lua_State *L, int idx, const char *fname, dpsgd_dist_config *cfg);
/* dpprof.dist: rank(), world_size(), barrier(), launcher(), check(), STRATEGIES, KEYS, mpi_compiled. */
void dpl_open_dist(lua_State *L);
/* The keys of a `distributed` table (dpprof.dist.KEYS), NULL-terminated: the one list of them. */
extern const char *dpl_dist_keys[];

/* Adds dpprof.optim.adamw / dpprof.optim.sgd and the optimizer metatable (lua_optim.c). */
void dpl_open_optim(lua_State *L);
/* The live optimizer at idx (its model checked alive too), or an argument error. */
struct dp_optimizer *dpl_check_optim(lua_State *L, int idx);

/* Adds dpprof.dpsgd.wrap, dpprof.dpsgd.check and the DP wrapper's metatable (lua_dp.c). */
void dpl_open_dp(lua_State *L);
/* Reads wrap's clipping options of the table at idx (clipping, clip_fn, gamma, a per_layer
 * max_grad_norm table's default) into cfg and checks that groups come with the groups style and
 * only with it; raises naming fname (lua_dp_clipping.c). */
void dpl_dp_read_clipping(lua_State *L, int idx, const char *fname, dpsgd_config *cfg);
/* Reads the table at idx's per_layer bounds or groups (cfg's style) into the engine's specs and
 * gives them to dp (NULL: only reads them, raising what it refuses); raises the engine's refusal. */
void dpl_dp_set_groups(lua_State *L, int idx, const char *fname, const dpsgd_config *cfg, dpsgd *dp);
/* Pushes dp's clipping: {style, clip_fn, gamma (automatic), noise_norm, groups = {{name,
 * max_grad_norm, tensors}...}}. */
void dpl_dp_push_clipping(lua_State *L, const dpsgd *dp);
/* Adds dpprof.privacy: epsilon and noise_multiplier by the RDP, PRV or PLD accountant
 * (lua_privacy.c). */
void dpl_open_privacy(lua_State *L);

/* The live tensor at idx, or an argument error (also for a freed tensor). */
dp_tensor *dpl_check_tensor(lua_State *L, int idx);
/* Adds delta (+1 or -1) to the pins of the tensor at idx: while pinned (a batch whose ids a
 * pending backward reads), its writing methods and :free() raise an error naming why. */
void dpl_tensor_pin(lua_State *L, int idx, int delta);
/* Pushes a new tensor userdata allocated on dev, or raises the engine's error. */
dp_tensor *dpl_push_new_tensor(lua_State *L, dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape,
                               dp_category cat);

/* dpprof.model's options (dpprof.model.KEYS, in order), NULL-terminated: the schema's model
 * section, filled by dpl_open_model (lua_model_options.c). */
extern const char *dpl_model_keys[];
/* Reads dpprof.model's option table at idx into cfg (all but the device), raising what it refuses. */
void dpl_model_read_options(lua_State *L, int idx, dp_model_config *cfg);
/* dpl_model_read_options, then the device the table at idx names (else the current one). */
dp_device *dpl_model_read_config(lua_State *L, int idx, dp_model_config *cfg);
/* The `distributed` option of the table at idx into cfg (dpl_dist_read) and checked as the plan
 * device takes it (dpsgd_dist_config_check; the device's own checks come when it is placed):
 * non-zero when there is one, 0 (cfg untouched) when not; an error naming fname for a bad one. */
int dpl_model_distributed_option(lua_State *L, int idx, const char *fname, dpsgd_dist_config *cfg);
/* Adds checkpoint_parse, checkpoint_format and checkpoint_name to the table on top (lua_checkpoint.c). */
void dpl_add_checkpoint_grammar(lua_State *L);
/* Adds dpprof.batch, dpprof.documents and dpprof.free_batch (lua_batch.c). */
void dpl_open_batch(lua_State *L);
/* The LoRA target bits named by the list at idx, or an error naming fname and the valid names. */
unsigned dpl_lora_targets(lua_State *L, int idx, const char *fname);
/* The checkpoint option (false | "blocks" | N) of the table at idx as dp_model_config.checkpoint
 * (absent: 0); an error naming fname and the valid values otherwise. */
int dpl_checkpoint_option(lua_State *L, int idx, const char *fname);
/* The parts option ({world_size = N, rank = r}) of the table at idx into *world, *rank (absent: 0,
 * 0: whole); an error naming fname and the valid values otherwise (lua_model_options.c). */
void dpl_parts_option(lua_State *L, int idx, const char *fname, int64_t *world, int64_t *rank);
/* Pushes a checkpoint setting as scripts write it: false, "blocks" (1) or N. */
void dpl_push_checkpoint(lua_State *L, int n);
/* Pushes c as the table dpprof.model takes (its keys; zero sizes left out) (lua_model_options.c). */
void dpl_push_model_config(lua_State *L, const dp_model_config *c);

#endif
