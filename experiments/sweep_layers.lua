-- sweep_layers.lua: how peak memory and step time grow with depth, per method (CPU: 1..8 layers; preset=large on a GPU: 4..20 layers at T = 16384).
-- Change it: dpprof run experiments/sweep_layers.lua [preset=large] [layer_counts=2,4,8] [methods=a,b | all=1] [device=] [profile=ops] [threads=N] [clipping=S] [clip_fn=F] [parallel=N|gpus] [repeats=N] [out=DIR]
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("sweep_layers.lua", { presets.args_without("layers"), "layer_counts" })

local p = presets.choose(args)
local out = presets.out(args, "sweep_layers")
local swept = dp.sweep{ base = presets.base(p, args), out = out, timeout = p.timeout, parallel = args.parallel,
          repeats = args.repeats,
          vary = { method = presets.methods(args), layers = presets.list(args.layer_counts) or p.layers } }
presets.finish(out, swept)
