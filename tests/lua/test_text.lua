-- test_text.lua: real text as samples (issue 41): dpprof.tokenizer from Lua (ids equal HF's on the
-- fixtures), dpprof.dataset's records, dpprof.text's records made text (field, prompt and
-- completion, Llama-3 chat, a function) with the bad ones counted by line, the loss masks of
-- prompts reaching the targets of dp.batch, data = {dataset = ...} in an experiment and dp.risk,
-- `dpprof data` (its summary, lengths file and chart), and the refusals naming the key.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local text = require("dpprof.text")

local here = arg[0]:match("(.*/)")
local FIX = here .. "../fixtures/tokenizer/"
local KJV = here .. "../../experiments/data/kjv_genesis.jsonl"
local SFT = here .. "../../experiments/data/kjv_genesis_sft.jsonl"
local dir = string.format("/tmp/dpprof-test-text-%d-%d", dp.pid(), os.time())
os.execute("mkdir -p " .. dir)
local function write(name, s)
  local p = dir .. "/" .. name
  assert(dp.write_file(p, s))
  return p
end

-- the tokenizer from Lua: the fixture's HF ids for a few corpus items, decode, token, id
local tok = dp.tokenizer(FIX .. "llama3")
check.eq(tok.vocab_size, 1007, "llama3 fixture: ids")
-- (read a line an item: the corpus holds a NUL, which dpprof.json refuses in a string)
local corpus, expected = {}, {}
for line in assert(dp.read_file(FIX .. "corpus.json")):gmatch("[^\n]+") do
  local name, hex = line:match('^{"name":"([^"]*)","hex":"(%x*)"')
  if name then corpus[#corpus + 1] = { name = name, hex = hex } end
end
for line in assert(dp.read_file(FIX .. "llama3/expected.json")):gmatch("[^\n]+") do
  local ids, plain = line:match('"ids":%[([%d,]*)%],"ids_plain":%[([%d,]*)%]')
  if ids then expected[#expected + 1] = { ids = ids:gsub(",", " "), n_plain = select(2, plain:gsub("%d+", "")) } end
end
check.eq(#corpus, #expected, "every corpus item has its encoding")
check.truthy(#corpus >= 150, "the corpus")
for i = 1, #corpus do
  local raw = corpus[i].hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
  check.eq(table.concat(tok:encode(raw), " "), expected[i].ids, "llama3 " .. corpus[i].name)
  check.eq(tok:count(raw, { special = false }), expected[i].n_plain, "count " .. corpus[i].name)
end
check.eq(tok:decode(tok:encode("Hello there")), "Hello there", "decode skips the BOS")
check.eq(tok:decode(tok:encode("Hi"), { skip_special = false }), "<|begin_of_text|>Hi", "decode keeps it")
check.eq(tok:token(tok:id("<|eot_id|>")), "<|eot_id|>", "token and id")
check.truthy(tok:is_special(tok:id("<|eot_id|>")), "a special token")
check.raises(function() tok:encode("x", { specal = true }) end, { "unknown key 'specal'", "special" }, "encode key")
check.raises(function() dp.tokenizer(dir) end, { "tokenizer.json" }, "a folder without one")

-- a data set of every kind of record: the good ones' lengths, the bad ones by line
local lines = {
  '{"text": "In the beginning"}',                             -- 1 good
  '{"txt": "no field"}',                                      -- 2 bad: no field 'text'
  'not json at all',                                          -- 3 bad: the reader's
  '',                                                         -- 4 nothing
  '{"prompt": "Q: who?", "completion": " A: God"}',           -- 5 prompt and completion
  '{"text": 7}',                                              -- 6 bad: not a string
  '{"text": ""}',                                             -- 7 bad: one token (the BOS)
  '"a JSON string record"',                                   -- 8 good: a string is its text
}
local mixed = write("mixed.jsonl", table.concat(lines, "\n") .. "\n")
local lengths, info = text.lengths({ dataset = mixed, tokenizer = FIX .. "llama3" })
check.eq(#lengths, 3, "three samples")
check.eq(lengths[1], tok:count("In the beginning") - 1, "a sample's length: its tokens less one")
check.eq(lengths[2], tok:count("Q: who?") + tok:count(" A: God", { special = false }) - 1, "prompt + completion")
check.eq(info.records, 3, "records")
check.eq(info.bad, 4, "bad records")
local bad_lines = {}
for _, b in ipairs(info.bad_list) do bad_lines[#bad_lines + 1] = b.line end
check.eq(table.concat(bad_lines, ","), "2,3,6,7", "the bad records' lines")
check.truthy(info.bad_list[1].reason:find("no field 'text'", 1, true), "reason: " .. info.bad_list[1].reason)

-- the prompt's tokens carry no loss: the mask, and dp.batch's targets
local ids, loss = text.samples({ dataset = mixed, tokenizer = FIX .. "llama3" })
local np = tok:count("Q: who?")
check.eq(loss[1], false, "a text record: every token carries loss")
check.eq(#loss[2], #ids[2], "one mask byte an id")
check.eq(loss[2], string.rep("\0", np) .. string.rep("\1", #ids[2] - np), "the prompt's ids masked")
local m = dp.model{ arch = "gpt", vocab = 1007, hidden = 16, heads = 2, layers = 1, seq_len = 32, batch = 2,
                    device = "cpu" }
local b = dp.batch{ model = m, tokens = { ids[2], ids[1] }, loss = { loss[2], false } }
local tg, T = b.targets:totable(), b.padded -- row-major B x T
for j = 1, #ids[2] - 1 do
  check.eq(tg[j], j + 1 <= np and -100 or ids[2][j + 1], "target " .. j .. " of the prompt-completion sample")
end
for j = 1, #ids[1] - 1 do check.eq(tg[T + j], ids[1][j + 1], "target " .. j .. " of the text sample") end
check.raises(function() dp.batch{ model = m, tokens = { ids[2] }, loss = { string.rep("\0", #ids[2]) } } end,
             { "no target that carries loss" }, "a mask dropping every target")
check.raises(function() dp.batch{ model = m, tokens = { ids[2] }, loss = { "\1" } } end,
             { "fewer than the sample's" }, "a short mask")
b.inputs:free()
b.targets:free()
m:free()

-- chat records in Llama-3's format: only the assistant's content and its <|eot_id|> carry loss
local chat = write("chat.jsonl", dp.json.encode({ messages = { { role = "user", content = " Hi " },
                                                              { role = "assistant", content = "Hello!" } } }) .. "\n")
local cids, closs = text.samples({ dataset = chat, tokenizer = FIX .. "llama3", chat = "llama3" })
local whole = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
  .. "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
check.eq(table.concat(cids[1], " "), table.concat(tok:encode(whole), " "), "the chat format's ids (BOS first)")
local nprompt = #tok:encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
  .. "<|start_header_id|>assistant<|end_header_id|>\n\n")
check.eq(closs[1], string.rep("\0", nprompt) .. string.rep("\1", #cids[1] - nprompt), "the assistant's tokens carry loss")

-- the chat format's ids are transformers' apply_chat_template's (Meta's Llama-3 template; gen_chat.py)
local conv = dp.json.decode(assert(dp.read_file(FIX .. "chat_llama3.json")))
local recs = {}
for i, c in ipairs(conv.conversations) do recs[i] = dp.json.encode({ messages = c.messages }) end
local convs = write("conv.jsonl", table.concat(recs, "\n") .. "\n")
local got_ids = text.samples({ dataset = convs, tokenizer = FIX .. "llama3", chat = "llama3" })
check.eq(#got_ids, #conv.conversations, "every conversation a sample")
for i, c in ipairs(conv.conversations) do
  check.eq(table.concat(got_ids[i], " "), table.concat(c.ids, " "), "conversation " .. i .. " as transformers has it")
end

-- counting on several threads gives the same lengths, in order; max_records counts good records
local one = text.lengths({ dataset = KJV, tokenizer = FIX .. "llama3" })
local lens = {}
local many = text.each({ dataset = KJV, tokenizer = FIX .. "llama3" }, function(sp) lens[#lens + 1] = sp.tokens - 1 end,
                       { ids = false, threads = 3 })
check.eq(table.concat(lens, ","), table.concat(one, ","), "count_many on 3 threads: the same lengths, in order")
check.eq(many.records, 1533, "every record")
check.eq(table.concat(tok:count_many({ "a b", "", "Hello" }, { special = false, threads = 2 }), ","),
         string.format("%d,0,%d", tok:count("a b", { special = false }), tok:count("Hello", { special = false })),
         "count_many")
local capped = text.lengths({ dataset = mixed, tokenizer = FIX .. "llama3", max_records = 2 })
check.eq(#capped, 2, "max_records: two good records, past the bad ones between them")

-- a function: its text, or {prompt =, completion =}
local fl = text.lengths({ dataset = KJV, tokenizer = FIX .. "llama3", max_records = 5,
                          text = function(r) return r.ref .. ": " .. r.text end })
check.eq(#fl, 5, "max_records")
check.eq(fl[1], tok:count("Genesis 1:1: In the beginning God created the heaven and the earth.") - 1, "text function")

-- plain text, one record a line, and windows that never split a character
local plain = write("plain.txt", "first line\n\nsecond line \xF0\x9F\x98\x80 emoji\n\xFF bad\n")
local pl, pinfo = text.lengths({ dataset = plain, tokenizer = FIX .. "gpt2" })
check.eq(#pl, 2, "text lines: two good")
check.eq(pinfo.bad, 1, "text lines: the line that is not UTF-8")
local wl = text.lengths({ dataset = write("w.txt", string.rep("abc \xF0\x9F\x98\x80 ", 40)), tokenizer = FIX .. "gpt2",
                          format = "windows", window = 50 })
check.truthy(#wl >= 7, "windows: " .. #wl)

-- refusals, one line naming the key
check.refused(function() dp.data.check({ lengths = { 3 }, field = "text" }) end, { "data.field", "data.dataset" },
              "field without dataset")
check.refused(function() dp.data.check({ dataset = KJV, chat = "llama2" }) end, { "data.chat 'llama2'", "llama3" },
              "unknown chat format")
check.refused(function() dp.data.check({ dataset = KJV, format = "windows" }) end, { "data.window" }, "windows")
check.refused(function() dp.data.check({ dataset = KJV, format = "xml" }) end, { "data.format 'xml'", "jsonl" }, "format")
check.refused(function() text.lengths({ dataset = KJV, tokenizer = dir }) end, { "tokenizer.json" }, "no tokenizer.json")
check.refused(function() text.lengths({ dataset = write("allbad.jsonl", "x\ny\n"), tokenizer = FIX .. "gpt2" }) end,
              { "gave no sample", "2 bad record", "line 1" }, "no good record")
check.refused(function() dp.data.lengths({ dataset = KJV }) end, { "needs a tokenizer" }, "no tokenizer anywhere")

-- an experiment trains on the data set's tokens (the prompt masked); the result says what was read
local r = dp.experiment{ name = "sft", method = "ghost", device = "cpu", iters = 2, warmup = 0, snapshots = "none",
                         model = { arch = "gpt", vocab = 1007, hidden = 16, heads = 2, layers = 1, seq_len = 64,
                                   batch = 4 },
                         data = { dataset = SFT, tokenizer = FIX .. "llama3", max_records = 40 } }
check.eq(r.status, "ok", "an experiment on a data set: " .. tostring(r.message))
check.eq(r.data.source, "dataset", "result: data.source")
check.eq(r.data.records, 40, "result: data.records")
check.eq(r.data.samples, 40, "result: data.samples")
check.truthy(dp.results.validate(r), "the result validates")
check.refused(function()
  dp.experiment{ name = "vocab", method = "ghost", device = "cpu", iters = 1, warmup = 0, snapshots = "none",
                 model = { arch = "gpt", vocab = 64, hidden = 16, heads = 2, layers = 1, seq_len = 64, batch = 2 },
                 data = { dataset = SFT, tokenizer = FIX .. "llama3", max_records = 4 } }
end, { "line 1", "outside the model's vocabulary [0, 64)", "1007 ids" }, "a tokenizer larger than the model's vocabulary")

-- dp.risk from the data set's lengths
local risk = dp.risk{ model = { arch = "gpt", vocab = 1007, hidden = 64, heads = 4, layers = 2, seq_len = 128 },
                      methods = { "flash_clip" }, data = { dataset = KJV, tokenizer = FIX .. "llama3" },
                      sample_rate = 0.01, steps = 100, budget_gb = 1 }
check.eq(risk.dataset_size, 1533, "risk: the data set's samples")
check.eq(risk.data.source, "dataset", "risk: the source")
check.eq(risk.data.bad, 0, "risk: no bad record")

-- dpprof data: the summary, the lengths file and the chart
local bin = "'" .. dp.executable .. "'"
local code, out = check.sh(string.format("%s data %s tokenizer=%sllama3 seq_len=64 out=%s/d.json lengths_out=%s/l.txt "
                                         .. "chart=%s/l.png", bin, KJV, FIX, dir, dir, dir))
check.eq(code, 0, "dpprof data: " .. out)
check.truthy(out:find("samples  1533", 1, true), "dpprof data prints the count: " .. out)
local d = dp.json.decode(assert(dp.read_file(dir .. "/d.json")))
check.eq(d.samples, 1533, "summary: samples")
check.eq(d.kind, "dpprof.data", "summary: kind")
local all, n = text.lengths({ dataset = KJV, tokenizer = FIX .. "llama3" })
local over, sum = 0, 0
for _, l in ipairs(all) do
  sum = sum + l + 1
  if l > 64 then over = over + 1 end
end
check.eq(d.tokens, sum, "summary: tokens")
check.eq(d.over_seq_len, over, "summary: longer than seq_len")
check.eq(n.records, 1533, "all records good")
local lf = assert(dp.read_file(dir .. "/l.txt"))
local k = 0
for v in lf:gmatch("%d+") do k = k + 1; check.eq(tonumber(v), all[k], "lengths_out line " .. k) end
check.eq(k, 1533, "lengths_out: a line a sample")
check.truthy(dp.read_file(dir .. "/l.png"), "the chart is written")
local c2, o2 = check.sh(string.format("%s data %s tokenizer=%sllama3 feild=text", bin, KJV, FIX))
check.eq(c2, 2, "dpprof data: a bad key")
check.truthy(o2:find("unknown key 'feild'", 1, true), o2)
local c3, o3 = check.sh(string.format("%s data %s", bin, KJV))
check.eq(c3, 2, "dpprof data: no tokenizer")
check.truthy(o3:find("tokenizer= is required", 1, true), o3)

os.execute("rm -rf " .. dir)
print("test_text: ok")
