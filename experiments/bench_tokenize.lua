-- bench_tokenize.lua: the C tokenizer's throughput against Hugging Face tokenizers on a fixed corpus, and the data
-- set reader's memory on a file too large to hold (issue 41.4), written to DIR/bench_tokenize.json.
-- Change it: dpprof run experiments/bench_tokenize.lua [tokenizers=gpt2,llama3,spm] [rounds=5]
--            [hf="/tmp/venv-tok/bin/python tests/baselines/hf_tokenize.py"] [big_mb=0] [out=DIR]
--
-- The corpus: experiments/data/kjv_genesis.jsonl's 1533 verses, encoded `rounds` times without special tokens, by each
-- tokenizer of tests/fixtures/tokenizer named, on one thread (tokenizer:count) and on every core (tokenizer:count_many,
-- dp.threads() of them: what dpprof.text uses to count a data set). hf=CMD runs the baseline (tests/baselines/hf_tokenize.py: encode_batch
-- with one thread and with every core, each its own process) right after dpprof's runs, so both see the same load;
-- the ratios are dpprof's tokens per second over HF's. Target: at least 1.0x HF's single-threaded throughput.
-- big_mb=N also writes a JSONL file of N MiB (the corpus repeated) and tokenizes every record of it through
-- dpprof.text.each in a child process (counting, keeping nothing), whose peak resident memory is recorded: bounded by
-- the reader's buffer, not the file's size.
local dp = require("dpprof")
local text = require("dpprof.text")

local KEYS = { "tokenizers", "rounds", "hf", "big_mb", "out" }
if dp.args and dp.args.help then
  print("bench_tokenize.lua: dpprof's C tokenizer against Hugging Face tokenizers (tokens per second on the Book of\n"
        .. "Genesis, one thread and all), and the data set reader's memory on a large file; writes DIR/bench_tokenize.json.\n"
        .. "keys (dpprof run experiments/bench_tokenize.lua KEY=VALUE ...): " .. table.concat(KEYS, ", ") .. "\n"
        .. "  tokenizers  tokenizers=gpt2,llama3,spm: fixtures of tests/fixtures/tokenizer (default: those three)\n"
        .. "  rounds      rounds=N: encodings of the corpus a run (default 5)\n"
        .. "  hf          hf=CMD: the baseline command (tests/baselines/hf_tokenize.py under a Python with tokenizers)\n"
        .. "  big_mb      big_mb=N: also read a JSONL file of N MiB, recording the child's peak memory (default 0: not)\n"
        .. "  out         out=DIR, where bench_tokenize.json goes (default results/bench_tokenize)\n"
        .. "  profile     not taken here: no training runs, no per-op profile\n"
        .. "  threads     not taken here: one thread and every core (dp.threads()) are each timed, as HF's\n"
        .. "  device      not taken here: tokenizing runs on the host\n"
        .. "  methods     not taken here: no DP method runs")
  return
end
local args = {}
for k, v in pairs(dp.args or {}) do
  if not dp.contains(KEYS, k) then
    dp.refuse(string.format("bench_tokenize.lua: unknown key '%s' (valid: %s)", tostring(k), table.concat(KEYS, ", ")))
  end
  args[k] = v
end
local REPO = (arg and arg[0] and arg[0]:match("^(.*)/experiments/[^/]*$")) or "."
local CORPUS = REPO .. "/experiments/data/kjv_genesis.jsonl"
local out = args.out or "results/bench_tokenize"
local rounds = math.tointeger(args.rounds or 5) or dp.refuse("bench_tokenize.lua: rounds must be a whole number")
local names = {}
for w in tostring(args.tokenizers or "gpt2,llama3,spm"):gmatch("[^,]+") do names[#names + 1] = w end

local verses = {}
for line in io.lines(CORPUS) do verses[#verses + 1] = dp.json.decode(line).text end
local bytes = 0
for _, v in ipairs(verses) do bytes = bytes + #v end

local rows = {}
for _, name in ipairs(names) do
  local path = REPO .. "/tests/fixtures/tokenizer/" .. name
  local tok = dp.tokenizer(path)
  local t0, n = dp.clock(), 0
  for _ = 1, rounds do
    for _, v in ipairs(verses) do n = n + tok:count(v, { special = false }) end
  end
  local s = dp.clock() - t0
  local row = { tokenizer = name, tokens = n, seconds = s, tokens_per_s = n / s, mb_per_s = rounds * bytes / s / 1e6 }
  local threads = dp.threads() -- every core: tokenizer:count_many, as dpprof.text counts a data set's records
  t0 = dp.clock()
  local m = 0
  for _ = 1, rounds do
    for _, c in ipairs(tok:count_many(verses, { special = false, threads = threads })) do m = m + c end
  end
  local sa = dp.clock() - t0
  if m ~= n then row.threads_mismatch = string.format("%d tokens on %d threads, %d on one", m, threads, n) end
  row.all = { threads = threads, tokens_per_s = m / sa, mb_per_s = rounds * bytes / sa / 1e6 }
  if args.hf then
    local p = io.popen(string.format("%s --corpus %q --tokenizer %q --rounds %d", args.hf, CORPUS,
                                     path .. "/tokenizer.json", rounds))
    for line in p:lines() do
      local ok, h = pcall(dp.json.decode, line)
      if ok and type(h) == "table" and h.tokens then
        if h.tokens ~= n then row.hf_mismatch = string.format("HF counted %d tokens, dpprof %d", h.tokens, n) end
        local key = h.threads == 1 and "hf_1" or "hf_all"
        row[key] = { threads = h.threads, tokens_per_s = h.tokens / h.seconds, version = h.version }
        row[key .. "_ratio"] = (h.threads == 1 and row.tokens_per_s or row.all.tokens_per_s) / (h.tokens / h.seconds)
      end
    end
    p:close()
  end
  rows[#rows + 1] = row
end

local big
local big_mb = math.tointeger(args.big_mb or 0) or 0
if big_mb > 0 then
  local path = string.format("%s/bench_tokenize_big.jsonl", out)
  assert(dp.mkdir_p(out))
  local f = assert(io.open(path, "w"))
  local chunk = table.concat((function()
    local t = {}
    for i, v in ipairs(verses) do t[i] = dp.json.encode({ text = v }) end
    return t
  end)(), "\n") .. "\n"
  local written = 0
  while written < big_mb * 2 ^ 20 do
    f:write(chunk)
    written = written + #chunk
  end
  f:close()
  local r, info = dp.isolate(function() -- every record tokenized and counted, none kept
    local i = text.each({ dataset = path, tokenizer = REPO .. "/tests/fixtures/tokenizer/llama3" }, function() end,
                        { ids = false })
    return { samples = i.records, bad = i.bad, tokens = i.tokens }
  end)
  os.remove(path)
  big = { file_bytes = written, samples = r.samples, bad = r.bad, tokens = r.tokens, status = r.status,
          child_peak_rss_bytes = info and info.max_rss_bytes, seconds = info and info.wall_s }
end

local blas = dp.environment().blas or {}
assert(dp.mkdir_p(out))
assert(dp.write_file(out .. "/bench_tokenize.json", dp.json.encode({
  benchmark = "bench_tokenize", corpus = CORPUS, corpus_bytes = bytes, rounds = rounds, rows = rows, big = big,
  host = { cpus = dp.cpu_count and dp.cpu_count() or nil, blas_core = blas.core } }, { indent = true }) .. "\n"))

print(string.format("corpus: %d verses, %.2f MB, %d rounds", #verses, bytes / 1e6, rounds))
print(string.format("%-10s %10s %14s %12s %8s %14s %12s %8s", "tokenizer", "tokens", "dpprof 1 thr", "HF 1 thread",
                    "x HF", "dpprof all", "HF all", "x HF"))
for _, r in ipairs(rows) do
  print(string.format("%-10s %10d %14.0f %12s %8s %14.0f %12s %8s", r.tokenizer, r.tokens, r.tokens_per_s,
                      r.hf_1 and string.format("%.0f", r.hf_1.tokens_per_s) or "-",
                      r.hf_1_ratio and string.format("%.2f", r.hf_1_ratio) or "-", r.all.tokens_per_s,
                      r.hf_all and string.format("%.0f", r.hf_all.tokens_per_s) or "-",
                      r.hf_all_ratio and string.format("%.2f", r.hf_all_ratio) or "-"))
  if r.hf_mismatch then print("  MISMATCH: " .. r.hf_mismatch) end
  if r.threads_mismatch then print("  MISMATCH: " .. r.threads_mismatch) end
  if r.hf_1_ratio then
    print(string.format("  target: at least 1.0x HF's single-threaded throughput: %.2fx %s", r.hf_1_ratio,
                        r.hf_1_ratio >= 1 and "met" or "MISSED"))
  end
end
if big then
  print(string.format("big file: %.0f MiB, %s samples, %s bad, child's peak RSS %.1f MiB in %.1f s (%s)",
                      big.file_bytes / 2 ^ 20, tostring(big.samples), tostring(big.bad),
                      (big.child_peak_rss_bytes or 0) / 2 ^ 20, big.seconds or 0, tostring(big.status)))
end
print("results: " .. out .. "/bench_tokenize.json")
