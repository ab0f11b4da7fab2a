-- Run by tests/blas/run_blas_test.sh: prints the BLAS the process runs, then does one CPU GEMM
-- (the CPU backend warns there when a generic kernel runs).
local dp = require("dpprof")
local b = dp.environment().blas
print(string.format("blas library=%s version=%s core=%s chosen_by=%s generic=%s guard=%s", b.library, b.version,
                    b.core, b.chosen_by, tostring(b.generic), os.getenv("DPPROF_BLAS_CORETYPE") or "-"))
dp.device("cpu")
local a = dp.tensor({ shape = { 2, 2 }, fill = 1 })
local c = dp.tensor({ shape = { 2, 2 } })
dp.matmul(c, a, a)
assert(c:sumsq() == 16, "a CPU GEMM of ones: every element 2")
