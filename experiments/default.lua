-- default.lua: peak memory and step time of vanilla vs ghost vs flash_clip (every preset with all=1), each run in its own process.
-- Change it: dpprof run experiments/default.lua [preset=large (GPU: V=32000 d=2048 L=20 H=16 T=16384 B=1)] [all=1] [methods=a,b] [device=] [iters=] [out=DIR]
--   also: the preset's model (arch= vocab= hidden= layers= heads= seq_len= batch= dtype=), warmup=, seed=, profile=ops, threads=N,
--   physical= (max physical batch), clipping= clip_fn= (the clipping style: docs/lua.md), timeout= (seconds a point), parallel=N|gpus (points at once: dp.sweep's
--   parallel), repeats=N (runs of each point, for the spread of its time); any other key is refused.
--   Exit status 1 when a point errored, crashed or timed out (an out-of-memory point is a result).
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("default.lua", presets.ARGS)

local p = presets.choose(args)
local out = args.out or ("results/run_" .. os.date("%Y%m%d_%H%M%S")) -- the README's first command lands here
local swept = dp.sweep{ base = presets.base(p, args), vary = { method = presets.methods(args) }, out = out, timeout = p.timeout,
                       parallel = args.parallel, repeats = args.repeats }
presets.finish(out, swept)
