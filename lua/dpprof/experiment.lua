-- dpprof.experiment: one experiment, measured. Builds the model, wraps it with a DP method, runs
-- warm-up and timed iterations through the DP phases, takes snapshots, and returns a result table
-- exactly as docs/results.md describes (validated by dpprof.results.validate).
--
--   dp.experiment{ name=, model={...dp.model keys...} | {path="DIR", adapter="DIR", ...},
--                  method="ghost" | norms=, clip=,
--                  optimizer={name="adamw"|"sgd", lr=, ...}, dp={max_grad_norm=, noise_multiplier=,
--                  sample_rate=, max_physical_batch_size=, delta=, poisson=, dataset_size=,
--                  flash_impl="tiles"|"strips", accountant="prv"|"rdp"|"pld"}, iters=3, warmup=2,
--                  device="auto", seed=0, snapshots="default"|"none"|{names...}, on={callbacks},
--                  memory_limit=bytes, data={file=, file_dtype=, ...}, trace=path, profile="none"|"ops", threads=n,
--                  device_model="h100"|"h200"|"h100-calibrated"|"FILE.json"|{...} (device="plan" only),
--                  distributed={strategy="ddp", world_size=N, rank=r (plan only)}, save="DIR" }
--
-- save: the trained model written to DIR as Hugging Face files (m:save) after the last step, by
-- rank 0 alone in a distributed run (fsdp's parts gathered first); the result's save_dir names it.
-- A model built without a checkpoint's weights (a shape, or weights = "random") trained on
-- documents (data with eos) is saved with that eos as its eos_token_id; a checkpoint's model keeps
-- the checkpoint's token ids.
--
-- distributed: this process is one rank of a data-parallel run (docs/lua.md "Distributed runs"):
-- model.batch is the global batch, of which the rank holds its slice; the gradients are summed
-- across the ranks in the phase `comm`. On the plan device a simulated world of world_size.
--
-- data: token windows of seq_len from a file (file=, file_dtype=; order="sequential" takes them in
-- file order, not at random offsets), synthetic ones without; or samples of their own lengths
-- (dpprof.data's grammar: lengths=, lengths_file=, length_distribution=, tokens= (the samples' ids),
-- or file= with eos=, each document a sample; pad_to=, group_by_length=, too_long=): each step's
-- drawn samples are split into physical batches of at most
-- max_physical_batch_size (Opacus's BatchMemoryManager), each padded to its longest sample with
-- pads of target -100, and the result records steps[] and data (docs/results.md).
--
-- A checkpoint as the model: model = { path = "DIR", seq_len=, batch=, lora=, dtype=, ... }. The
-- sizes come from DIR/config.json (dpprof.model.read_config); any dp.model key given beside path
-- overrides the file's by name (layers = 2 for a short study). The weights are DIR's
-- (dpprof.model.load, sharded too) unless weights = "random" (built from config.json alone, for
-- memory and time studies where values do not matter); on the plan device only config.json is
-- read, whatever weights says. With the file's weights, only runtime keys may differ from it
-- (seq_len, batch, dtype, master_weights, seed, lora, checkpoint): others change the shapes the weights have.
-- adapter = "DIR" adds a PEFT adapter folder (adapter_config.json, adapter_model.safetensors, as
-- PEFT saves it apart from its base) to path's base: its rank, alpha and targets are the model's lora.
--
-- Callbacks on={name=function(ctx, i, k) ... end}: model_loaded, wrapped, optimizer_created,
-- after_warmup and finished run once; before_forward, after_forward, after_backward, after_clip
-- (per physical batch k) and after_noise, after_step run in each timed iteration i (1-based), not
-- in warm-up. ctx has model, optimizer, priv, config, device, iter, and ctx:snapshot(name); what a
-- callback stores in ctx.extra comes back as the result's `extra`. `snapshots` keeps the default
-- schedule ("default"), drops it ("none"), or keeps the listed names or patterns.
--
-- It runs in the calling process; dp.sweep (or dp.isolate(dp.experiment, cfg)) runs it in a clean
-- child. A failure while it runs (out of memory, an engine error, a callback's error) does not
-- raise: the result has status "oom" or "error", a message, and what was measured up to the
-- failure. A bad configuration raises before anything is built: unknown keys, wrong types, and
-- what dpprof.model and dpprof.dpsgd.wrap would refuse (checked without a device), including a
-- sample_rate x dataset_size that disagrees with the batch; what only building can tell (bf16 on
-- the CPU) raises too. The configuration's keys, defaults and checks are dpprof.config's
-- (lua/dpprof/config.lua); experiment.config is its config.check.
--
-- threads: the CPU backend's thread count for the run (default: dpprof.threads(), i.e.
-- OMP_NUM_THREADS or the CPU count); the count used is recorded as environment.threads, and the
-- process's own count is restored afterwards.
--
-- Timing: every phase is bracketed by dp.sync() and dp.clock(), so it is device time; an
-- iteration's time is the sum of its phases (batch creation, snapshots and callbacks excluded).
-- With model.checkpoint, the recomputation of checkpointed blocks (in the backward, and in bk's
-- clip) is the phase `recompute`, taken out of the phase it ran in.
-- Peaks are reset after warm-up, so memory.peak_bytes describes the timed iterations; the warm-up
-- peak is kept as memory.warmup_peak_bytes. The ledger is reset after warm-up too. Each phase
-- also has its own peak (memory.phases: what was live at it and at the phase's end), and the
-- process's peak resident memory since the experiment started is memory.host_peak_rss_bytes.
-- profile="ops" times every engine op of the timed iterations (lua/dpprof/ops.lua): the result's
-- `profile`, and op slices in the trace.
--
-- device="plan" (accounting only, see lua/dpprof/plan.lua): the result is marked predicted; the
-- memory figures are exact; the engine clock is modelled for the run (each op recorded advances
-- it by its roofline time on device_model, default h100, or by its calibrated time with a device
-- model file, device_model = "FILE.json": lua/dpprof/devmodel.lua), so phase times, spans, snapshots and
-- the memory timeline are on the modelled device's time; the result gains the budget view `plan`.
-- The run loop is dpprof.experiment_run's, the result's assembly (privacy, ranks, the document)
-- dpprof.experiment_result's; this module is their public face.
local dp = require("dpprof")
local config = require("dpprof.config")
local experiment_run = require("dpprof.experiment_run")
local result = require("dpprof.experiment_result")

local experiment = {}

-- The configuration (its keys, defaults and checks) is dpprof.config's; its public names stay
-- reachable here, where scripts and the other modules have always found them.
experiment.config = config.check
experiment.check_recorded = config.check_recorded
experiment.model_options = config.model_options
experiment.wrap_options = config.wrap_options
experiment.DEFAULTS = config.DEFAULTS
experiment.DEFAULT_SNAPSHOTS = config.DEFAULT_SNAPSHOTS
experiment.PROFILES = config.PROFILES
experiment.DEVICES = config.DEVICES
experiment.MAX_WORLD = config.MAX_WORLD
experiment.SAVE_FILES = config.SAVE_FILES

-- The ranks of a distributed run (dpprof.experiment_result).
experiment.rank_summary = result.rank_summary
experiment.combine = result.combine
experiment.combine_ranks = result.combine_ranks
experiment.RANK_FILES = result.RANK_FILES
experiment.agree_ranks = result.agree_ranks

---------------------------------------------------------------------------------------------
-- The run

-- Runs one experiment (see the top of this file). In a launched world of several ranks an
-- interrupt (SIGINT: Ctrl-C through srun, scancel --signal=INT) is held back while the experiment
-- runs and voted on at the ranks' next common point (before a collective, or at the end), so that
-- no rank is stopped inside a collective the others wait in; one that arrives after the last vote
-- raises when the experiment returns, and the job is then aborted.
local run_config = experiment_run.run_config
-- run_config, and the hold it began (dp.memory.hold) ended whichever way it ends
local function run_held(c)
  local r = table.pack(pcall(run_config, c))
  pcall(dp.memory.end_hold)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function experiment.run(cfg_in)
  local c = config.check(cfg_in)
  if not (c.distributed and c.device ~= "plan" and dp.interrupts and dp.dist.world_size() > 1) then
    return run_held(c)
  end
  dp.interrupts.hold(true)
  local r = table.pack(pcall(run_held, c))
  -- an interrupt that came meanwhile raises at the next instruction (the vote's message, if it was voted)
  dp.interrupts.hold(false, not r[1] and dp.interrupts.pending() and tostring(r[2]) or nil)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

return experiment
