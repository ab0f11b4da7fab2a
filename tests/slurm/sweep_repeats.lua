-- sweep_repeats.lua: the repeated sweep tests/slurm/run_cluster_test.sh submits after the first:
-- two small CPU experiments, each run twice (repeats = 2), so four array tasks.
local dp = require("dpprof")

dp.sweep{
  base = { model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2 },
           device = "cpu", iters = 2, warmup = 0 },
  vary = { method = { "vanilla", "ghost" } },
  out = dp.args.out,
  backend = "slurm",
  repeats = 2,
  slurm = { time = 1 },
}
