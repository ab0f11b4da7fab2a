-- dpprof.cli_data: `dpprof data FILE key=value ...` (dpprof.cli.data): a data set of text read as an
-- experiment would train on it (dpprof.text: its records made text, tokenized by the model's
-- tokenizer) and how long its samples are: count, tokens, percentiles, the longest, how many are
-- longer than a seq_len, the bad records; a histogram PNG of the lengths with the percentiles
-- marked (chart=), the summary as JSON (out=), the lengths one a line (lengths_out=, what dpprof
-- risk's lengths_file= reads). Returns the process exit status.
local dp = require("dpprof")
local text = require("dpprof.text")
local results = require("dpprof.results")
local util = require("dpprof.cli_util")

local eprint = util.eprint

local cli = {}

local USAGE = [[
usage: dpprof data FILE [key=value ...]

Reads a data set of text as an experiment with data = {dataset = FILE, ...} trains on it: each
record made text (a field, prompt and completion, or chat messages), tokenized by the model's own
tokenizer (Hugging Face's tokenizer.json, no Python), and says how long its samples are. Streams
the file (bounded memory); bad records (not JSON, no text field, fewer than 2 tokens, not UTF-8)
are counted and listed by line, never skipped in silence.

  tokenizer=DIR|FILE.json     the tokenizer (a checkpoint folder holding tokenizer.json, or the
                              file); or path=DIR, a checkpoint folder (the same)
  field=NAME                  the record's field holding its text (default text; a record with
                              prompt and completion strings is both, only the completion
                              carrying loss)
  chat=llama3                 the records' messages (field, default messages) in Llama-3's chat
                              format
  format=auto|jsonl|json|text|windows   how FILE is read (default auto: by its name; text: one
                              record a line; windows: the whole file cut into window=BYTES)
  window=BYTES                format=windows: bytes of text a sample
  max_records=N               read at most N records
  seq_len=T                   also count the samples longer than T positions (T + 1 tokens)
  chart=FILE.png              a histogram of the samples' tokens, the percentiles marked
  out=FILE.json               the summary (kind "dpprof.data") as JSON
  lengths_out=FILE            the samples' lengths (tokens less one), one a line: dpprof risk
                              lengths_file=FILE reads it

A sample of N tokens trains N - 1 positions: its length, as dpprof risk and the experiments count.

example: dpprof data examples/kjv_genesis.jsonl tokenizer=tests/fixtures/tokenizer/llama3 seq_len=64 \
             chart=lengths.png
exit status: 0 read; 2 bad arguments or no sample
]]

function cli.data_usage() return USAGE end

cli.DATA_KEYS = { "tokenizer", "path", "field", "chat", "format", "window", "max_records", "seq_len", "chart", "out",
                  "lengths_out" }

local function parse(args)
  local file, own = nil, {}
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if k then
      if not dp.contains(cli.DATA_KEYS, k) then
        return nil, string.format("unknown key '%s' (valid: %s)", k, table.concat(cli.DATA_KEYS, ", "))
      end
      own[k] = v
    elseif file then
      return nil, string.format("one data set a run: '%s' after '%s'", a, file)
    else
      file = a
    end
  end
  if not file then return nil, "no data set given (dpprof data FILE tokenizer=DIR ...; see dpprof data --help)" end
  if own.tokenizer and own.path then return nil, "give tokenizer= or path=, not both" end
  if not own.tokenizer and not own.path then
    return nil, "tokenizer= is required (a checkpoint folder holding tokenizer.json, or the file), or path="
  end
  local spec = { dataset = file, tokenizer = own.tokenizer or own.path, field = own.field, chat = own.chat,
                 format = own.format }
  for _, k in ipairs({ "window", "max_records", "seq_len" }) do
    if own[k] then
      local n = math.tointeger(tonumber(own[k]))
      if not n or n < 1 then return nil, string.format("%s must be a whole number >= 1, got '%s'", k, own[k]) end
      if k == "seq_len" then own.seq_len = n else spec[k] = n end
    end
  end
  return spec, own
end

-- Bins of the token counts for the chart: about 40 of equal width from the shortest to the longest.
local function histogram(tokens, lo, hi)
  local nb = math.max(1, math.min(40, hi - lo + 1))
  local width = math.max(1, math.ceil((hi - lo + 1) / nb))
  nb = math.ceil((hi - lo + 1) / width)
  local edges, counts = {}, {}
  for i = 0, nb do edges[i + 1] = lo + i * width end
  for i = 1, nb do counts[i] = 0 end
  for _, v in ipairs(tokens) do
    local b = math.min(nb, (v - lo) // width + 1)
    counts[b] = counts[b] + 1
  end
  return { edges = dp.json.array(edges), counts = dp.json.array(counts) }
end

-- The summary document (kind "dpprof.data", what out= writes and chart= draws).
local function document(spec, info, tokens, seq_len)
  local s = text.summary(tokens, seq_len)
  local bad = {}
  for _, b in ipairs(info.bad_list) do bad[#bad + 1] = { line = b.line, reason = b.reason } end
  return { kind = "dpprof.data", dataset = spec.dataset, format = info.format, tokenizer = spec.tokenizer,
           field = spec.field, chat = spec.chat, samples = s.count, tokens = s.tokens, mean = s.mean, min = s.min,
           p50 = s.p50, p90 = s.p90, p95 = s.p95, p99 = s.p99, max = s.max, longest_line = info.longest.line,
           seq_len = seq_len, over_seq_len = s.over, bad = info.bad, bad_records = dp.json.array(bad),
           histogram = histogram(tokens, s.min, s.max) }
end

local function print_document(d)
  print(string.format("%s (%s), tokenizer %s", d.dataset, d.format, d.tokenizer))
  print(string.format("  samples  %d (%d bad record%s)", d.samples, d.bad, d.bad == 1 and "" or "s"))
  print(string.format("  tokens   %d in all, %.1f a sample", d.tokens, d.mean))
  print(string.format("  tokens a sample: min %d  p50 %d  p90 %d  p95 %d  p99 %d  max %d (line %d)", d.min, d.p50,
                      d.p90, d.p95, d.p99, d.max, d.longest_line))
  if d.seq_len then
    print(string.format("  longer than seq_len %d (more than %d tokens): %d (%.2f%%)", d.seq_len, d.seq_len + 1,
                        d.over_seq_len, 100 * d.over_seq_len / d.samples))
  end
  for i, b in ipairs(d.bad_records) do
    if i > 10 then
      print(string.format("  ... and %d more bad records", d.bad - 10))
      break
    end
    print(string.format("  bad: line %d: %s", b.line, b.reason))
  end
end

function cli.data(args)
  if util.help_asked(args) then
    io.write(USAGE)
    return 0
  end
  local spec, own = parse(args)
  if not spec then
    eprint("dpprof data: ", own)
    return 2
  end
  local tokens, lengths, longest = {}, {}, { tokens = 0 }
  local ok, info = pcall(text.each, spec, function(sample, line)
    tokens[#tokens + 1] = sample.tokens
    lengths[#lengths + 1] = sample.tokens - 1
    if sample.tokens > longest.tokens then longest = { tokens = sample.tokens, line = line } end
  end, { ids = false, progress = true })
  if not ok then
    eprint("dpprof data: ", (dp.error_text(info):gsub("^dpprof%.data: ", "")))
    return 2
  end
  info.longest = longest
  local d = document(spec, info, tokens, own.seq_len)
  print_document(d)
  local status = 0
  if own.out then
    local okw, why = pcall(dp.write_file, own.out, results.encode(d))
    if not okw then eprint("dpprof data: out: ", tostring(why)); status = 1 end
  end
  if own.lengths_out then
    local parts = {}
    for i, l in ipairs(lengths) do parts[i] = tostring(l) end
    local okw, why = pcall(dp.write_file, own.lengths_out, table.concat(parts, "\n") .. "\n")
    if not okw then eprint("dpprof data: lengths_out: ", tostring(why)); status = 1 end
  end
  if own.chart then
    local okc, why = pcall(dp.plot.lengths, results.encode(d), own.chart)
    if not okc then eprint("dpprof data: chart: ", tostring(why)); status = 1 end
  end
  return status
end

return cli
