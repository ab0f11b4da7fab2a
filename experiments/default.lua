-- default.lua: peak memory and step time of vanilla vs ghost vs flash_clip (every preset with all=1), each run in its own process.
-- Change it: dpprof run experiments/default.lua [preset=large (GPU: V=32000 d=2048 L=20 H=16 T=16384 B=1)] [all=1] [methods=a,b] [device=] [iters=] [out=DIR]
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = dp.args or {}

local p = presets.choose(args)
local out = args.out or ("results/run_" .. os.date("%Y%m%d_%H%M%S")) -- the README's first command lands here
dp.sweep{ base = presets.base(p, args), vary = { method = presets.methods(args) }, out = out, timeout = p.timeout }
presets.finish(out)
