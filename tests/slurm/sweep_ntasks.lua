-- sweep_ntasks.lua: the sweep of N-task points tests/slurm/run_cluster_test.sh submits last: a
-- tiny GPT under ddp on the CPU at world_size 1 and 2, so two arrays, the second's task an
-- `srun --ntasks=2 --mpi=pmix` of two ranks (Open MPI through Slurm's PMIx).
local dp = require("dpprof")

dp.sweep{
  base = { model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 4 },
           method = "ghost", device = "cpu", threads = 1, iters = 1, warmup = 0, snapshots = "none",
           distributed = { strategy = "ddp" } },
  vary = { world_size = { 1, 2 } },
  out = dp.args.out,
  backend = "slurm",
  slurm = { time = 2, cpus_per_task = 1 },
}
