-- sweep_seqlen.lua: how peak memory and step time grow with sequence length, per method (CPU: T = 64..512; preset=large on a GPU: T = 1024..16384).
-- Change it: dpprof run experiments/sweep_seqlen.lua [preset=large] [seq_lens=256,1024] [methods=a,b | all=1] [device=] [profile=ops] [threads=N] [clipping=S] [clip_fn=F] [parallel=N|gpus] [repeats=N] [out=DIR]
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("sweep_seqlen.lua", { presets.args_without("seq_len"), "seq_lens" })

local p = presets.choose(args)
local out = presets.out(args, "sweep_seqlen")
local swept = dp.sweep{ base = presets.base(p, args), out = out, timeout = p.timeout, parallel = args.parallel,
          repeats = args.repeats,
          vary = { method = presets.methods(args), seq_len = presets.list(args.seq_lens) or p.seq_lens } }
presets.finish(out, swept)
