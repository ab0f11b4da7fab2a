-- dpprof.data: what an experiment trains on, as samples of their own lengths (issue 31). The one
-- declaration of the `data = {...}` grammar; the experiment, the risk planner and the engine's
-- padded batches all read it through this module.
--
--   data = { lengths = {l1, l2, ...} }                    the samples' lengths, in tokens
--   data = { lengths_file = "F" }                         one length a line (text), or a little-endian
--                                                          uint32 array (a file with a byte outside
--                                                          printable ASCII and whitespace is binary)
--   data = { length_distribution = { kind = "lognormal", median = M, p99 = P } }
--          { kind = "uniform", min = A, max = B }  |  { kind = "fixed", length = L }
--                                                          synthetic lengths for planning: dataset_size
--                                                          draws, seeded
--   data = { file = "F", file_dtype = "uint16"|"uint32", eos = ID }
--                                                          a token file; with eos each document is a
--                                                          sample (the engine reads it; this module
--                                                          only checks the keys)
--   data = { file = "F", order = "random"|"sequential" }  a token file without eos: windows of seq_len + 1
--                                                          tokens at random offsets (default), or in file
--                                                          order: row r of the run's k-th window overall
--                                                          (k = the windows earlier steps took + r, from 0;
--                                                          s * batch + r for a fixed batch) starts at token
--                                                          (k mod floor((n - 1) / seq_len)) * seq_len
--   data = { tokens = { {id, id, ...}, ... } }            the samples' token ids: each list one sample of
--                                                          its ids less one positions (inputs its ids but
--                                                          the last, targets the next ids), at least 2 ids
--   data = { dataset = "F", tokenizer = DIR, field = "text" | text = function(record) | chat = "llama3",
--            format = "auto"|"jsonl"|"json"|"text"|"windows", window = BYTES, max_records = N }
--                                                          a data set of text (dpprof.text: records made
--                                                          text, tokenized by the model's own tokenizer,
--                                                          default model.path; a prompt's tokens carry
--                                                          no loss)
--   and with any of them:
--     pad_to = N           a physical batch is padded to its longest sample rounded up to a multiple
--                          of N (as tokenizers' pad_to_multiple_of); default 1
--     group_by_length = b  a logical batch's samples are sorted by length before it is split into
--                          physical batches, so similar lengths share one (transformers' Trainer);
--                          default false
--     too_long = "cut" | "error"   a sample longer than seq_len is cut to seq_len and counted
--                          (default), or refused naming the sample
--
--   data.KEYS, data.SOURCES, data.KINDS, data.TOO_LONG, data.ORDERS   the grammar, declared once
--   data.check(spec)                  -> the checked copy with defaults, and the key giving the samples
--                                        (nil when none does); raises a refusal naming the key
--   data.lengths(spec, {seq_len=, dataset_size=, seed=})
--                                     -> lengths (a list), info {cut=, longest=, source=}
--   data.read_lengths_file(path)      -> the file's lengths (unchecked against seq_len), {text=, lines=}
--   data.sampler(spec, {seq_len=, seed=})  -> function(i) giving sample i's length (distributions)
--   data.draw(dist, n, seed)          -> n lengths drawn from a length_distribution
--   data.cut_to(lengths, seq_len, too_long, where)  -> cut, longest: seq_len applied in place
--   data.pad_length(lengths, pad_to)  -> the padded length of a physical batch of those lengths
--   data.pad(len, pad_to)             -> len rounded up to a multiple of pad_to
--   data.split(n, max_physical)       -> the physical batch sizes of a logical batch of n samples
--   data.physical_batches(lengths, max_physical, spec)
--                                     -> {{size=, padded=, first=}...} a logical batch's physical
--                                        batches (group_by_length sorts first)
--
-- The generator: Philox4x32-10, the engine's (tensor:random on the CPU device), at (seed, stream =
-- data.STREAM): sample i's draw is element i of that stream, so a draw does not depend on how many
-- are drawn (data.sampler's i-th length is data.draw's i-th).
local dp = require("dpprof")
local options = require("dpprof.options")
local text = require("dpprof.text")

local data = {}

data.SOURCES = { "lengths", "lengths_file", "length_distribution", "file", "tokens", "dataset" }
data.KEYS = options.keys("data") -- the schema's data section
data.FILE_DTYPES = { "uint16", "uint32" }
data.ORDERS = { "random", "sequential" }
data.TOO_LONG = { "cut", "error" }
-- Per kind of length_distribution: its keys.
data.KINDS = {
  lognormal = { "kind", "median", "p99" },
  uniform = { "kind", "min", "max" },
  fixed = { "kind", "length" },
}
data.KIND_NAMES = { "lognormal", "uniform", "fixed" }
-- The Philox stream the length draws use (any seed's stream 0 is the weights').
data.STREAM = 31
-- The 99th percentile of the standard normal: a lognormal's sigma is ln(p99 / median) / Z99.
data.Z99 = 2.3263478740408408

local function refuse(fmt, ...)
  dp.refuse("dpprof.data: " .. string.format(fmt, ...))
end

local contains = dp.contains

local function check_keys(t, valid, where)
  local k = dp.unknown_key(t, valid)
  if k ~= nil then refuse("unknown key '%s' in %s (valid: %s)", tostring(k), where, table.concat(valid, ", ")) end
end

local function is_int(v) return math.type(v) == "integer" or (type(v) == "number" and v == math.floor(v) and v == v
                                                                and math.abs(v) < 2 ^ 53) end

local function positive_int(v, where)
  if not is_int(v) or v < 1 then refuse("%s must be an integer >= 1, got %s", where, tostring(v)) end
  return math.tointeger(v)
end

local function positive_number(v, where)
  if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
    refuse("%s must be a positive number, got %s", where, tostring(v))
  end
  return v
end

-- The checked length_distribution (a copy).
local function check_distribution(d)
  if type(d) ~= "table" then
    refuse("length_distribution must be a table {kind=%s, ...}, got %s", table.concat(data.KIND_NAMES, "|"), type(d))
  end
  local kind = d.kind
  if not data.KINDS[kind] then
    refuse("length_distribution.kind '%s' is unknown (valid: %s)", tostring(kind), table.concat(data.KIND_NAMES, ", "))
  end
  check_keys(d, data.KINDS[kind], "length_distribution (kind " .. kind .. ")")
  local out = { kind = kind }
  if kind == "lognormal" then
    out.median = positive_number(d.median, "length_distribution.median")
    out.p99 = positive_number(d.p99, "length_distribution.p99")
    if out.median < 1 then refuse("length_distribution.median must be at least 1 token, got %s", tostring(d.median)) end
    if out.p99 <= out.median then
      refuse("length_distribution.p99 (%s) must be above its median (%s)", tostring(d.p99), tostring(d.median))
    end
  elseif kind == "uniform" then
    out.min = positive_int(d.min, "length_distribution.min")
    out.max = positive_int(d.max, "length_distribution.max")
    if out.max < out.min then refuse("length_distribution.max (%d) is below its min (%d)", out.max, out.min) end
  else
    out.length = positive_int(d.length, "length_distribution.length")
  end
  return out
end

-- Refuses t unless it is a sequence (keys 1..#t only); `what` names it ("data.lengths").
local function check_sequence(t, what)
  local n = #t
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      refuse("%s must be a list (keys 1..n), it has the key '%s'", what, tostring(k))
    end
  end
  return n
end

-- data.lengths: a non-empty list of whole numbers >= 1; returns them as integers.
local function check_lengths(lengths)
  if type(lengths) ~= "table" then refuse("data.lengths must be a list of lengths, got %s", type(lengths)) end
  local n = check_sequence(lengths, "data.lengths")
  if n == 0 then refuse("data.lengths is empty: a data set needs at least one sample") end
  local l = {}
  for i, v in ipairs(lengths) do
    if type(v) ~= "number" or not is_int(v) then
      refuse("data.lengths[%d] is %s, not a whole number of tokens", i, tostring(v))
    end
    if v <= 0 then refuse("data.lengths[%d] is %s: a sample has at least one token", i, tostring(v)) end
    l[i] = math.tointeger(v)
  end
  return l
end

-- data.tokens[i]: a list of at least 2 token ids (integers >= 0); returns a copy as integers.
local function check_sample_ids(ids, i)
  if type(ids) ~= "table" then refuse("data.tokens[%d] must be a list of token ids, got %s", i, type(ids)) end
  local m = check_sequence(ids, string.format("data.tokens[%d]", i))
  if m < 2 then
    refuse("data.tokens[%d] holds %d id(s): a sample needs at least 2 (its inputs and the next-token targets)", i, m)
  end
  local copy_ids = {}
  for j, v in ipairs(ids) do
    if not is_int(v) or v < 0 then
      refuse("data.tokens[%d][%d] is %s, not a token id (an integer >= 0)", i, j, tostring(v))
    end
    copy_ids[j] = math.tointeger(v)
  end
  return copy_ids
end

-- data.tokens: a non-empty list of samples (check_sample_ids); returns the copies.
local function check_tokens(t)
  if type(t) ~= "table" then refuse("data.tokens must be a list of samples, each a list of token ids, got %s", type(t)) end
  if check_sequence(t, "data.tokens") == 0 then refuse("data.tokens is empty: a data set needs at least one sample") end
  local out_t = {}
  for i, ids in ipairs(t) do out_t[i] = check_sample_ids(ids, i) end
  return out_t
end

-- The token file's keys (file, file_dtype, eos, order) and lengths_file, checked into out.
local function check_files(spec, out)
  if spec.lengths_file ~= nil then
    if type(spec.lengths_file) ~= "string" or spec.lengths_file == "" then
      refuse("data.lengths_file must be a file name, got %s", tostring(spec.lengths_file))
    end
    out.lengths_file = spec.lengths_file
  end
  if spec.file ~= nil then
    if type(spec.file) ~= "string" or spec.file == "" then refuse("data.file must be a file name, got %s", tostring(spec.file)) end
    out.file = spec.file
  end
  if spec.file_dtype ~= nil then
    if spec.file == nil then refuse("data.file_dtype is given without data.file") end
    if not contains(data.FILE_DTYPES, spec.file_dtype) then
      refuse("data.file_dtype '%s' is unknown (valid: %s)", tostring(spec.file_dtype), table.concat(data.FILE_DTYPES, ", "))
    end
    out.file_dtype = spec.file_dtype
  end
  if spec.eos ~= nil then
    if spec.file == nil then refuse("data.eos is given without data.file (the token file whose documents it ends)") end
    if not is_int(spec.eos) or spec.eos < 0 then refuse("data.eos must be a token id (an integer >= 0), got %s", tostring(spec.eos)) end
    out.eos = math.tointeger(spec.eos)
  end
  if spec.order ~= nil then
    if spec.file == nil then refuse("data.order is given without data.file (the token file it reads)") end
    if not contains(data.ORDERS, spec.order) then
      refuse("data.order '%s' is unknown (valid: %s)", tostring(spec.order), table.concat(data.ORDERS, ", "))
    end
    if spec.eos ~= nil and spec.order ~= "random" then
      refuse("data.order applies to windows of a token file without eos (its documents are samples, a fixed batch "
             .. "takes them in order)")
    end
    out.order = spec.order
  end
end

-- Checks a data spec; returns the checked copy with its defaults (pad_to = 1, group_by_length =
-- false, too_long = "cut"), and the key that gives the samples (one of data.SOURCES, nil when none does). Raises a refusal (exit 2)
-- that names the key and the valid choices.
function data.check(spec)
  if type(spec) ~= "table" then refuse("data must be a table of %s, got %s", table.concat(data.KEYS, ", "), type(spec)) end
  check_keys(spec, data.KEYS, "data")
  local out, given = {}, {}
  for _, k in ipairs(data.SOURCES) do
    if spec[k] ~= nil then given[#given + 1] = k end
  end
  if #given > 1 then refuse("give one of %s, not %s", table.concat(data.SOURCES, ", "), table.concat(given, " and ")) end
  if spec.lengths ~= nil then out.lengths = check_lengths(spec.lengths) end
  if spec.tokens ~= nil then out.tokens = check_tokens(spec.tokens) end
  if spec.length_distribution ~= nil then out.length_distribution = check_distribution(spec.length_distribution) end
  if spec.dataset ~= nil then
    for k, v in pairs(text.check(spec)) do out[k] = v end
  else
    for _, k in ipairs(text.KEYS) do
      if spec[k] ~= nil then refuse("data.%s is given without data.dataset (the data set of text it reads)", k) end
    end
  end
  check_files(spec, out)
  out.pad_to = spec.pad_to == nil and 1 or positive_int(spec.pad_to, "data.pad_to")
  if spec.group_by_length ~= nil and type(spec.group_by_length) ~= "boolean" then
    refuse("data.group_by_length must be true or false, got %s", tostring(spec.group_by_length))
  end
  out.group_by_length = spec.group_by_length == true
  out.too_long = spec.too_long == nil and "cut" or spec.too_long
  if not contains(data.TOO_LONG, out.too_long) then
    refuse("data.too_long '%s' is unknown (valid: %s)", tostring(spec.too_long), table.concat(data.TOO_LONG, ", "))
  end
  return out, given[1]
end

-- Reads a lengths file: one length a line (blank lines skipped), or a little-endian uint32 array.
-- Raises a refusal naming the file and the line (or sample) of a bad length.
-- Second result: {text = true, lines = {sample i's line}} for a text file, {text = false} for uint32.
-- Only a regular file is read (not a device, FIFO or directory), up to MAX_LENGTHS_BYTES; a UTF-8
-- byte-order mark before text is skipped (it is not four bytes of a length).
data.MAX_LENGTHS_BYTES = 1 << 30
function data.read_lengths_file(path)
  local text, why = dp.read_file(path, data.MAX_LENGTHS_BYTES)
  if not text then refuse("data.lengths_file '%s' cannot be read: %s", path, (tostring(why):gsub("^.-: cannot read: ", ""))) end
  local out, lines = {}, {}
  if text:sub(1, 3) == "\239\187\191" and not text:find("[^\t\n\r\32-\126]", 4) then text = text:sub(4) end
  if text:find("[^\t\n\r\32-\126]") then -- binary: uint32 little-endian
    if #text % 4 ~= 0 then
      refuse("data.lengths_file '%s': %d bytes, not a uint32 array (a multiple of 4 bytes) nor text of one length a line",
             path, #text)
    end
    for i = 1, #text // 4 do
      local v = string.unpack("<I4", text, 4 * i - 3)
      if v == 0 then refuse("data.lengths_file '%s': sample %d (uint32 at byte %d) is 0: a sample has at least one token",
                            path, i, 4 * (i - 1)) end
      out[i] = v
    end
  else
    local line = 0
    for l in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\r?\n") do
      line = line + 1
      local s = l:match("^%s*(.-)%s*$")
      if s ~= "" then
        local v = s:match("^[+-]?%d+$") and math.tointeger(tonumber(s))
        if not v then refuse("data.lengths_file '%s' line %d: '%s' is not a number of tokens (a whole number a line)",
                             path, line, #s > 40 and s:sub(1, 40) .. "..." or s) end
        if v == 0 then refuse("data.lengths_file '%s' line %d: length 0: a sample has at least one token", path, line) end
        if v < 0 then refuse("data.lengths_file '%s' line %d: length %d is negative", path, line, v) end
        out[#out + 1], lines[#out + 1] = v, line
      end
    end
  end
  if #out == 0 then refuse("data.lengths_file '%s' has no lengths: a data set needs at least one sample", path) end
  return out, { text = #lines > 0, lines = lines }
end

-- n uniform (0, 1) floats of Philox (seed, data.STREAM), elements first .. first + n - 1 (from 0),
-- or n standard normals with normal = true.
local function philox(n, seed, first, normal)
  local t <close> = dp.tensor{ shape = { first + n }, device = "cpu", category = "temp", module = "data" }
  if normal then
    t:random{ dist = "normal", seed = seed, stream = data.STREAM, mean = 0, std = 1 }
  else
    t:random{ dist = "uniform", seed = seed, stream = data.STREAM, low = 0, high = 1 }
  end
  local all = t:totable()
  if first == 0 then return all end
  return table.move(all, first + 1, first + n, 1, {})
end

local function draws(d, n, seed, first)
  local out = {}
  if d.kind == "fixed" then
    for i = 1, n do out[i] = d.length end
  elseif d.kind == "uniform" then
    local u, span = philox(n, seed, first), d.max - d.min + 1
    for i = 1, n do out[i] = math.min(d.max, d.min + math.floor(u[i] * span)) end
  else
    local z = philox(n, seed, first, true)
    local mu, sigma = math.log(d.median), math.log(d.p99 / d.median) / data.Z99
    for i = 1, n do out[i] = math.max(1, math.floor(math.exp(mu + sigma * z[i]) + 0.5)) end
  end
  return out
end

-- n lengths drawn from a length_distribution with seed (see the header's generator): lognormal's
-- exp(mu + sigma z) rounded to the nearest token (at least 1), mu = ln median, sigma =
-- ln(p99 / median) / Z99; uniform's min + floor(u (max - min + 1)); fixed's length.
function data.draw(dist, n, seed)
  local d = check_distribution(dist)
  positive_int(n, "the number of draws")
  return draws(d, n, seed or 0, 0)
end

-- Applies seq_len to lengths in place: cuts (counting) or refuses a sample longer than it, as
-- too_long says; where(i) names sample i. Returns the count cut and the longest before cutting.
function data.cut_to(lengths, seq_len, too_long, where)
  local cut, longest = 0, 0
  for i, v in ipairs(lengths) do
    if v > longest then longest = v end
    if seq_len and v > seq_len then
      if too_long == "error" then
        refuse("%s has length %d, longer than seq_len %d (too_long = \"error\"; too_long = \"cut\" cuts it)",
               where(i), v, seq_len)
      end
      lengths[i], cut = seq_len, cut + 1
    end
  end
  return cut, longest
end

-- The samples' lengths of a data spec, each at most seq_len (opts.seq_len; cut or refused as
-- too_long says), and {cut = samples cut, longest = the longest before cutting, source = the key}.
-- A distribution draws opts.dataset_size lengths with opts.seed (default 0); data.tokens' are each
-- list's ids less one; a data set's are its records' tokens less one (opts.tokenizer: the
-- tokenizer when data.tokenizer is not given; what the reading found is the info's `text`).
-- A token file's lengths are the engine's to read: refused here.
function data.lengths(spec, opts)
  opts = opts or {}
  local s, source = data.check(spec)
  if opts.seq_len ~= nil then positive_int(opts.seq_len, "seq_len") end
  local lengths, where, text_info
  if s.lengths then
    lengths = s.lengths
    where = function(i) return string.format("sample %d (data.lengths[%d])", i, i) end
  elseif s.lengths_file then
    local read
    lengths, read = data.read_lengths_file(s.lengths_file)
    local text, lines = read.text, read.lines -- sample i's line, for the error
    where = function(i)
      return text and string.format("sample %d (data.lengths_file '%s' line %d)", i, s.lengths_file, lines[i])
             or string.format("sample %d (data.lengths_file '%s', uint32 at byte %d)", i, s.lengths_file, 4 * (i - 1))
    end
  elseif s.tokens then
    lengths = {}
    for i, ids in ipairs(s.tokens) do lengths[i] = #ids - 1 end
    where = function(i) return string.format("sample %d (data.tokens[%d], %d ids)", i, i, #s.tokens[i]) end
  elseif s.dataset then -- tokenized here: the tokenizer is the data's, else the caller's (the model's path)
    if not s.tokenizer and not opts.tokenizer then
      refuse("data.dataset needs a tokenizer: data.tokenizer, or a model read from a checkpoint (model.path, path=)")
    end
    local read
    lengths, read = text.lengths(s, { tokenizer = s.tokenizer or opts.tokenizer, progress = opts.progress })
    where = function(i) return string.format("sample %d (data.dataset '%s' line %d)", i, s.dataset, read.lines[i]) end
    text_info = read
  elseif s.length_distribution then
    if opts.dataset_size == nil then refuse("data.length_distribution: dataset_size (the number of samples) is required") end
    local n = positive_int(opts.dataset_size, "dataset_size")
    lengths = draws(s.length_distribution, n, opts.seed or 0, 0)
    where = function(i) return string.format("sample %d (draw %d of data.length_distribution, seed %d)", i, i, opts.seed or 0) end
  elseif s.file then
    refuse("data.file: the token file's samples are read by the engine, not planned from lengths (give lengths, "
           .. "lengths_file or length_distribution)")
  else
    refuse("no samples (give one of %s)", table.concat(data.SOURCES, ", "))
  end
  local cut, longest = data.cut_to(lengths, opts.seq_len, s.too_long, where)
  return lengths, { cut = cut, longest = longest, source = source, n = #lengths, text = text_info }
end

-- A distribution's sampler: sampler(i) is sample i's length (i from 1), data.draw's i-th, cut at
-- opts.seq_len (or refused, as too_long says). Draws are made in blocks of 4096 and kept.
function data.sampler(spec, opts)
  opts = opts or {}
  local s = data.check(spec)
  if not s.length_distribution then refuse("data.sampler needs data.length_distribution (a list has its lengths)") end
  if opts.seq_len ~= nil then positive_int(opts.seq_len, "seq_len") end
  local seed, block, cache = opts.seed or 0, 4096, {}
  return function(i)
    i = positive_int(i, "the sample index")
    local b = (i - 1) // block
    if not cache[b] then
      local l = draws(s.length_distribution, block, seed, b * block)
      data.cut_to(l, opts.seq_len, s.too_long, function(j)
        return string.format("sample %d (draw %d of data.length_distribution, seed %d)", b * block + j, b * block + j, seed)
      end)
      cache[b] = l
    end
    return cache[b][(i - 1) % block + 1]
  end
end

-- len rounded up to a multiple of pad_to (default 1).
function data.pad(len, pad_to)
  pad_to = pad_to or 1
  return ((len + pad_to - 1) // pad_to) * pad_to
end

-- The padded length of a physical batch: its longest sample rounded up to a multiple of pad_to.
function data.pad_length(lengths, pad_to)
  local longest = 0
  for _, v in ipairs(lengths) do if v > longest then longest = v end end
  if longest == 0 then refuse("data.pad_length: an empty physical batch has no length") end
  return data.pad(longest, pad_to)
end

-- The physical batch sizes of a logical batch of n samples with at most max_physical in one, as
-- Opacus's BatchMemoryManager splits it (numpy.array_split into ceil(n / max_physical) parts: the
-- first n mod parts one larger; the engine's dp.dpsgd.split, which every DP step takes). An empty
-- logical batch has no physical batch ({}).
function data.split(n, max_physical)
  if math.type(n) ~= "integer" or n < 0 then refuse("data.split: the logical batch size must be an integer >= 0, got %s", tostring(n)) end
  max_physical = positive_int(max_physical, "max_physical_batch_size")
  return dp.dpsgd.split(n, max_physical) -- the engine's split, the one every DP step takes
end

-- A logical batch's physical batches: lengths are its samples' (in the order drawn), spec a data
-- spec (its pad_to and group_by_length; nil for neither). Returns {{size=, padded=, first=, order=}}:
-- each batch's size, padded length, the index (in lengths) of its first sample, and with
-- group_by_length `order`, the samples' indices in length order (ascending, stable) that the
-- batches take consecutively.
function data.physical_batches(lengths, max_physical, spec)
  local s = spec and data.check(spec) or { pad_to = 1, group_by_length = false }
  max_physical = positive_int(max_physical, "max_physical_batch_size")
  local order = {}
  for i = 1, #lengths do order[i] = i end
  if s.group_by_length then
    table.sort(order, function(a, b)
      if lengths[a] ~= lengths[b] then return lengths[a] < lengths[b] end
      return a < b
    end)
  end
  local out, at = {}, 1
  for _, size in ipairs(data.split(#lengths, max_physical)) do
    local longest = 0
    for j = at, at + size - 1 do longest = math.max(longest, lengths[order[j]]) end
    out[#out + 1] = { size = size, padded = data.pad(longest, s.pad_to), first = at,
                      order = s.group_by_length and order or nil }
    at = at + size
  end
  return out
end

return data
