-- dpprof.text: real text as samples (issue 41). A data set (dpprof.dataset: JSONL, a JSON array or
-- plain text, streamed) becomes token ids through the model's own tokenizer (dpprof.tokenizer:
-- Hugging Face's tokenizer.json), record by record:
--
--   a string record (format text or windows, or a JSON string) is its text;
--   a record with `prompt` and `completion` strings (TRL's prompt-completion form), or what the
--     `text` function returns as {prompt =, completion =}: the prompt's tokens (with the
--     template's BOS) then the completion's (without), only the completion's carrying loss;
--   with chat = "llama3", the record's messages (field, default "messages": a list of {role =,
--     content =}) in Llama-3's chat format (Meta-Llama-3-Instruct's template: <|begin_of_text|>,
--     then per message <|start_header_id|>role<|end_header_id|>\n\n content (trimmed)
--     <|eot_id|>; the ids transformers' apply_chat_template gives, tests/fixtures/tokenizer/
--     chat_llama3.json), only the assistant's contents and their <|eot_id|> carrying loss;
--   otherwise the record's `field` (default "text"), a string; or text(record) when a function is
--     given, returning a string or {prompt =, completion =}.
--
-- A record that gives no text (no such field, not a string, a function returning nil) or fewer
-- than 2 tokens is bad: counted and reported with its line, never skipped in silence; so are the
-- reader's own bad records (not JSON, over its size cap, not UTF-8). A sample of N tokens trains
-- N - 1 positions (inputs its first N - 1 ids, targets the next): its length, as data.tokens'.
--
--   text.KEYS                               the data keys this module reads
--   text.given(spec)                        -> whether spec names a data set (spec.dataset)
--   text.tokenizer(path)                    -> a tokenizer, loaded once per path
--   text.each(spec, fn, opts)               calls fn(sample, line) for each good record, in order,
--                                           sample = {ids = {...}, loss = mask string or nil, tokens = N};
--                                           opts {tokenizer =, ids = false (counts only: records counted
--                                           4096 at a time on `threads`, default dp.threads()), progress =}
--                                           -> info {records, bad, bad_list, tokens, format, path}
--   text.lengths(spec, opts)                -> lengths (N - 1 each), info (text.each's, + longest, lines)
--   text.samples(spec, opts)                -> {ids lists}, {loss masks or false}, info
--   text.summary(lengths_tokens, seq_len)   -> {count, tokens, mean, p50, p90, p95, p99, max, over}
local dp = require("dpprof")

local text = {}

text.KEYS = { "dataset", "tokenizer", "field", "text", "chat", "format", "window", "max_records" }
text.CHATS = { "llama3" }
text.FORMATS = { "auto", "jsonl", "json", "text", "windows" }

local function refuse(fmt, ...) dp.refuse("dpprof.data: " .. string.format(fmt, ...)) end

function text.given(spec) return type(spec) == "table" and spec.dataset ~= nil end

local loaded = {}
function text.tokenizer(path)
  if type(path) ~= "string" or path == "" then
    refuse("data.tokenizer must be the path of a tokenizer.json or of a checkpoint folder holding one")
  end
  if not loaded[path] then
    local ok, t = pcall(dp.tokenizer, path)
    if not ok then refuse("%s", (tostring(t):gsub("^dpprof%.tokenizer: ", ""))) end
    loaded[path] = t
  end
  return loaded[path]
end

-- Checks the data-set keys of spec (types and words; the rest is data.check's); returns a copy.
function text.check(spec)
  local out = {}
  if type(spec.dataset) ~= "string" or spec.dataset == "" then refuse("data.dataset must be a file's path") end
  out.dataset = spec.dataset
  for _, k in ipairs({ "tokenizer", "field" }) do
    if spec[k] ~= nil and (type(spec[k]) ~= "string" or spec[k] == "") then
      refuse("data.%s must be a non-empty string, got %s", k, tostring(spec[k]))
    end
    out[k] = spec[k]
  end
  if spec.text ~= nil and type(spec.text) ~= "function" then
    refuse("data.text must be a function(record) returning its text or {prompt =, completion =}, got %s",
           type(spec.text))
  end
  out.text = spec.text
  if spec.chat ~= nil and not dp.contains(text.CHATS, spec.chat) then
    refuse("data.chat '%s' is unknown (valid: %s)", tostring(spec.chat), table.concat(text.CHATS, ", "))
  end
  if spec.chat ~= nil and spec.text ~= nil then refuse("give data.chat or data.text, not both") end
  out.chat = spec.chat
  out.format = spec.format or "auto"
  if not dp.contains(text.FORMATS, out.format) then
    refuse("data.format '%s' is unknown (valid: %s)", tostring(spec.format), table.concat(text.FORMATS, ", "))
  end
  for _, k in ipairs({ "window", "max_records" }) do
    local v = spec[k]
    if v ~= nil and (math.type(v) ~= "integer" or v < 1) then refuse("data.%s must be an integer >= 1, got %s", k, tostring(v)) end
    out[k] = v
  end
  if out.format == "windows" and not out.window then refuse("data.format 'windows' needs data.window (bytes a sample)") end
  if out.window and out.format ~= "windows" then refuse("data.window applies to format 'windows'") end
  return out
end

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

-- Llama-3's chat format: segments {text, loss} of a message list; nil, why when it is not one.
local function llama3_chat(messages)
  if type(messages) ~= "table" or #messages == 0 then return nil, "its messages are not a non-empty list" end
  local seg = { { "<|begin_of_text|>", false } } -- the template's BOS, as text (the tokenizer's own template not added)
  for i, m in ipairs(messages) do
    if type(m) ~= "table" or type(m.role) ~= "string" or type(m.content) ~= "string" then
      return nil, string.format("message %d is not {role = string, content = string}", i)
    end
    seg[#seg + 1] = { "<|start_header_id|>" .. m.role .. "<|end_header_id|>\n\n", false }
    seg[#seg + 1] = { trim(m.content) .. "<|eot_id|>", m.role == "assistant" }
  end
  return seg
end

-- The segments {{text, loss}, ...} of a record; nil, why for a bad one.
local function segments(spec, rec)
  if spec.text then
    local ok, r = pcall(spec.text, rec)
    if not ok then return nil, "data.text raised: " .. tostring(r) end
    rec = r
    if rec == nil then return nil, "data.text returned nil" end
    if type(rec) == "string" then return { { rec, true } } end
  elseif spec.chat then
    if type(rec) ~= "table" then return nil, "not a JSON object with messages" end
    return llama3_chat(rec[spec.field or "messages"])
  end
  if type(rec) == "string" and not spec.field then return { { rec, true } } end
  if type(rec) ~= "table" then return nil, string.format("a %s, not a record with a text field", type(rec)) end
  if not spec.field and type(rec.prompt) == "string" and type(rec.completion) == "string" then
    return { { rec.prompt, false }, { rec.completion, true } }
  end
  local v = rec[spec.field or "text"]
  if type(v) ~= "string" then
    return nil, v == nil and string.format("no field '%s'", spec.field or "text")
      or string.format("field '%s' is a %s, not a string", spec.field or "text", type(v))
  end
  return { { v, true } }
end

local function progress_line(ds, info, t0)
  local done, total = ds:progress()
  io.stderr:write(string.format("\rdpprof data: %s: %d records, %d bad, %.0f%% (%.1f MiB of %.1f) %.0f s ", info.path,
                                info.records, info.bad, total > 0 and 100 * done / total or 100, done / 2 ^ 20,
                                total / 2 ^ 20, dp.clock() - t0))
end

-- A record's sample from its segments' token counts (parts: {count, carries loss} each) and, when
-- kept, its ids: to fn, or bad (fewer than 2 tokens, no token carrying loss).
local function accept(st, line, parts, ids)
  local n, all = 0, true
  for _, p in ipairs(parts) do n, all = n + p[1], all and p[2] end
  if n < 2 then return st.bad(line, string.format("%d token(s): a sample needs at least 2", n)) end
  local mask
  if not all then -- one byte an id: whether it carries loss as a target (the first id never is one)
    local m = {}
    for _, p in ipairs(parts) do m[#m + 1] = string.rep(p[2] and "\1" or "\0", p[1]) end
    mask = table.concat(m)
    if not mask:find("\1", 2, true) then return st.bad(line, "no token carries loss (an empty completion)") end
  end
  st.info.records = st.info.records + 1
  st.info.tokens = st.info.tokens + n
  st.fn({ ids = ids, loss = mask, tokens = n }, line)
end

-- Counting only: the pending records' segments counted together on the threads, in order.
local function flush(st)
  local texts, special, at = {}, {}, {}
  for r, p in ipairs(st.pending) do
    at[r] = #texts
    for i, sg in ipairs(p.seg) do texts[#texts + 1], special[#special + 1] = sg[1], i == 1 and not st.chat end
  end
  local counts = #texts > 0 and st.tok:count_many(texts, { special = special, threads = st.threads }) or {}
  for r, p in ipairs(st.pending) do
    local parts = {}
    for i, sg in ipairs(p.seg) do parts[i] = { counts[at[r] + i], sg[2] } end
    accept(st, p.line, parts)
  end
  st.pending = {}
end

-- One record's segments: tokenized now (ids kept), or queued to be counted (flush).
local function take(st, line, seg)
  if not st.keep_ids then
    st.pending[#st.pending + 1] = { line = line, seg = seg }
    if #st.pending >= st.batch then flush(st) end
    return
  end
  local ids, parts = {}, {}
  for i, sg in ipairs(seg) do
    local e = st.tok:encode(sg[1], { special = i == 1 and not st.chat }) -- a chat format writes its own BOS
    table.move(e, 1, #e, #ids + 1, ids)
    parts[i] = { #e, sg[2] }
  end
  accept(st, line, parts, ids)
end

function text.each(spec, fn, opts)
  opts = opts or {}
  local s = text.check(spec)
  local tok = text.tokenizer(opts.tokenizer or s.tokenizer)
  local ok, ds = pcall(dp.dataset, s.dataset, { format = s.format, window = s.window })
  if not ok then refuse("%s", (tostring(ds):gsub("^dpprof%.dataset: ", ""))) end
  local info = { path = s.dataset, format = ds.format, records = 0, bad = 0, tokens = 0, bad_list = {} }
  local st = { info = info, fn = fn, tok = tok, chat = s.chat, keep_ids = opts.ids ~= false, pending = {},
               threads = opts.threads or dp.threads(), batch = 4096 }
  function st.bad(line, why)
    info.bad = info.bad + 1
    if #info.bad_list < 32 then info.bad_list[#info.bad_list + 1] = { line = line, reason = why } end
  end
  local t0, last = dp.clock(), dp.clock()
  while true do
    if s.max_records and info.records + #st.pending >= s.max_records then -- the queued ones may be bad
      if #st.pending == 0 then break end
      flush(st)
    else
      local okn, rec, line = pcall(ds.next, ds)
      if not okn then ds:close(); refuse("%s", tostring(rec)) end
      if rec == nil then break end
      local seg, why = segments(s, rec)
      if seg then take(st, line, seg) else st.bad(line, why) end
    end
    if opts.progress and dp.clock() - last > 2 then
      last = dp.clock()
      progress_line(ds, info, t0)
    end
  end
  flush(st)
  local nbad, kept = ds:bad()
  for _, b in ipairs(kept) do
    if #info.bad_list < 32 then info.bad_list[#info.bad_list + 1] = b end
  end
  info.bad = info.bad + nbad
  table.sort(info.bad_list, function(a, b) return a.line < b.line end)
  ds:close()
  if opts.progress and dp.clock() - t0 > 2 then progress_line(ds, info, t0); io.stderr:write("\n") end
  if info.records == 0 then
    local first = info.bad_list[1]
    refuse("data.dataset '%s' gave no sample (%d bad record(s)%s)", s.dataset, info.bad,
           first and string.format("; line %d: %s", first.line, first.reason) or "")
  end
  return info
end

function text.lengths(spec, opts)
  opts = opts or {}
  local lengths, lines, longest = {}, {}, { tokens = 0 }
  local info = text.each(spec, function(sample, line)
    lengths[#lengths + 1] = sample.tokens - 1
    lines[#lines + 1] = line
    if sample.tokens > longest.tokens then longest = { tokens = sample.tokens, line = line } end
  end, { tokenizer = opts.tokenizer, ids = false, progress = opts.progress })
  info.longest, info.lines = longest, lines
  return lengths, info
end

function text.samples(spec, opts)
  opts = opts or {}
  local ids, loss, lines = {}, {}, {}
  local info = text.each(spec, function(sample, line)
    ids[#ids + 1] = sample.ids
    loss[#loss + 1] = sample.loss or false
    lines[#lines + 1] = line
  end, { tokenizer = opts.tokenizer, progress = opts.progress })
  info.lines = lines
  return ids, loss, info
end

-- Percentiles by nearest rank of a list of token counts; over = how many train more positions
-- (tokens - 1) than seq_len.
function text.summary(tokens, seq_len)
  local s = {}
  for i, v in ipairs(tokens) do s[i] = v end
  table.sort(s)
  local n, sum = #s, 0
  for _, v in ipairs(s) do sum = sum + v end
  local function pct(p) return n > 0 and s[math.max(1, math.ceil(p / 100 * n))] or 0 end
  local over
  if seq_len then
    over = 0
    for _, v in ipairs(s) do if v - 1 > seq_len then over = over + 1 end end
  end
  return { count = n, tokens = sum, mean = n > 0 and sum / n or 0, min = s[1] or 0, p50 = pct(50), p90 = pct(90),
           p95 = pct(95), p99 = pct(99), max = s[n] or 0, over = over, seq_len = seq_len }
end

return text
