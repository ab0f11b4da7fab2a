-- sweep.lua: the sweep tests/slurm/run_cluster_test.sh submits to its one-node Slurm cluster: six
-- small CPU experiments (two methods x three sequence lengths) through dp.experiment, the default
-- run. A point named by a marker file <DPPROF_TEST_MARKERS>/<point>.slow sleeps once its model is
-- loaded (the test cancels one such task and lets Slurm time out another); without markers, every
-- point finishes in well under a second.
local dp = require("dpprof")
local markers = assert(os.getenv("DPPROF_TEST_MARKERS"), "DPPROF_TEST_MARKERS is not set")

local function slow_if_marked(ctx)
  local f = io.open(markers .. "/" .. ctx.config.name .. ".slow", "r")
  if f then
    f:close()
    dp.sleep(600)
  end
end

dp.sweep{
  base = { model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2 },
           device = "cpu", iters = 1, warmup = 0, on = { model_loaded = slow_if_marked } },
  vary = { method = { "vanilla", "ghost" }, seq_len = { 8, 16, 32 } },
  out = dp.args.out,
  backend = "slurm",
  slurm = { time = 1 },
}
