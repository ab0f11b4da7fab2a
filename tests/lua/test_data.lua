-- test_data.lua: dpprof.data (issue 31), the data = {...} grammar and the samples' lengths: lists,
-- lengths files (text and uint32) with errors naming the file and line, seeded distributions whose
-- draws have the stated median and p99 (lognormal), the stated range (uniform), the same draws
-- from data.draw and data.sampler, the cut at seq_len counted (or refused naming the sample),
-- padding to pad_to, Opacus's split of a logical batch and group_by_length's sorting; every
-- refusal names its key and exits 2.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local data = dp.data

local root = string.format("/tmp/dpprof-test-data-%d-%d", dp.pid(), os.time())
assert(dp.mkdir_p(root))

-- A refusal: exit status 2 and each substring in its message.
local refused = check.refused

-- The grammar: defaults, one source, every key checked.
do
  local s, source = data.check({ lengths = { 3, 1, 2 } })
  check.eq(source, "lengths", "the source")
  check.eq(s.pad_to, 1, "pad_to's default")
  check.eq(s.group_by_length, false, "group_by_length's default")
  check.eq(s.too_long, "cut", "too_long's default")
  local f, fs = data.check({ file = "tokens.bin", file_dtype = "uint32", eos = 2, pad_to = 8, group_by_length = true })
  check.eq(fs, "file", "a token file is a source")
  check.eq(f.eos, 2, "eos kept")
  check.eq(f.pad_to, 8, "pad_to kept")
  check.eq(select(2, data.check({ pad_to = 4 })), nil, "no source")
  check.eq(#data.KEYS, 19, "data.KEYS (order and tokens, issue 38.8; a data set of text and its 7 keys, issue 41)")
  refused(function() data.check({ lenghts = { 1 } }) end, { "unknown key 'lenghts' in data", table.concat(data.KEYS, ", ") },
          "a misspelt key")
  refused(function() data.check({ lengths = { 1 }, lengths_file = "x" }) end, { "not lengths and lengths_file" }, "two sources")
  refused(function() data.check({ lengths = {} }) end, { "data.lengths is empty" }, "an empty list")
  refused(function() data.check({ lengths = { 4, 0 } }) end, { "data.lengths[2] is 0" }, "a length of 0")
  refused(function() data.check({ lengths = { -3 } }) end, { "data.lengths[1] is -3" }, "a negative length")
  refused(function() data.check({ lengths = { 2.5 } }) end, { "data.lengths[1] is 2.5", "whole number" }, "a fraction")
  refused(function() data.check({ lengths = { 1, x = 2 } }) end, { "the key 'x'" }, "a list with a key")
  refused(function() data.check({ eos = 2 }) end, { "data.eos", "without data.file" }, "eos without a file")
  refused(function() data.check({ file = "t", eos = -1 }) end, { "data.eos must be a token id" }, "a negative eos")
  refused(function() data.check({ file = "t", file_dtype = "int8" }) end, { "file_dtype 'int8'", "uint16, uint32" },
          "a file dtype")
  refused(function() data.check({ pad_to = 0 }) end, { "data.pad_to must be an integer >= 1" }, "pad_to 0")
  refused(function() data.check({ group_by_length = "yes" }) end, { "data.group_by_length must be true or false" },
          "group_by_length")
  refused(function() data.check({ too_long = "drop" }) end, { "too_long 'drop'", "cut, error" }, "too_long")
  refused(function() data.check({ length_distribution = { kind = "normal" } }) end,
          { "kind 'normal'", "lognormal, uniform, fixed" }, "a kind")
  refused(function() data.check({ length_distribution = { kind = "lognormal", median = 100, p99 = 50 } }) end,
          { "p99 (50) must be above its median (100)" }, "p99 below the median")
  refused(function() data.check({ length_distribution = { kind = "uniform", min = 10, max = 5 } }) end,
          { "max (5) is below its min (10)" }, "uniform's range")
  refused(function() data.check({ length_distribution = { kind = "fixed", length = 8, min = 2 } }) end,
          { "unknown key 'min' in length_distribution (kind fixed)", "kind, length" }, "a key of another kind")
  refused(function() data.check(5) end, { "data must be a table" }, "not a table")
end

-- Lists: kept, cut at seq_len and counted, or refused naming the sample.
do
  local l, info = data.lengths({ lengths = { 10, 300, 20, 999 } }, { seq_len = 256 })
  check.eq(table.concat(l, ","), "10,256,20,256", "cut at seq_len")
  check.eq(info.cut, 2, "samples cut")
  check.eq(info.longest, 999, "the longest before the cut")
  check.eq(info.n, 4, "samples")
  refused(function() data.lengths({ lengths = { 10, 300 }, too_long = "error" }, { seq_len = 256 }) end,
          { "sample 2 (data.lengths[2]) has length 300, longer than seq_len 256" }, "too_long = error")
  refused(function() data.lengths({ file = "t.bin", eos = 0 }) end, { "data.file", "read by the engine" },
          "a token file's lengths")
  refused(function() data.lengths({ pad_to = 2 }) end, { "no samples" }, "no source")
end

-- Lengths files: text (blank lines skipped, CRLF) and uint32; errors naming the file and line.
do
  local text = root .. "/lengths.txt"
  assert(dp.write_file(text, "12\r\n  7\n\n300\n5"))
  local l, info = data.lengths({ lengths_file = text }, { seq_len = 100 })
  check.eq(table.concat(l, ","), "12,7,100,5", "a text file's lengths, cut")
  check.eq(info.cut, 1, "one cut")
  refused(function() data.lengths({ lengths_file = text, too_long = "error" }, { seq_len = 100 }) end,
          { "sample 3 (data.lengths_file '" .. text .. "' line 4) has length 300" }, "too long, by line")
  local function bad(content, substrings, what)
    local p = root .. "/bad.txt"
    assert(dp.write_file(p, content))
    refused(function() data.read_lengths_file(p) end, substrings, what)
  end
  bad("5\n6\nabc\n", { "'" .. root .. "/bad.txt' line 3: 'abc' is not a number" }, "not a number")
  bad("5\n12.5\n", { "line 2: '12.5' is not a number" }, "a fraction")
  bad("5\n0\n", { "line 2: length 0" }, "a zero")
  bad("5\n\n-4\n", { "line 3: length -4 is negative" }, "a negative")
  bad("\n  \n", { "has no lengths" }, "an empty file")
  bad("", { "has no lengths" }, "a 0-byte file")
  local bin = root .. "/lengths.u32"
  assert(dp.write_file(bin, string.pack("<I4I4I4", 17, 70000, 3)))
  local b = data.read_lengths_file(bin)
  check.eq(table.concat(b, ","), "17,70000,3", "a uint32 file")
  refused(function() data.lengths({ lengths_file = bin, too_long = "error" }, { seq_len = 4096 }) end,
          { "sample 2 (data.lengths_file '" .. bin .. "', uint32 at byte 4) has length 70000" }, "too long, by byte")
  bad(string.pack("<I4I4", 9, 0), { "sample 2 (uint32 at byte 4) is 0" }, "a binary zero")
  bad(string.pack("<I4", 9) .. "\0\0", { "6 bytes, not a uint32 array" }, "a binary file of a bad size")
  refused(function() data.read_lengths_file(root .. "/missing") end, { "/missing' cannot be read" }, "a missing file")
end

-- Distributions: seeded and reproducible, the stated shape, the same draws from draw and sampler.
do
  local dist = { kind = "lognormal", median = 200, p99 = 2000 }
  local a = data.draw(dist, 20000, 7)
  local b = data.draw(dist, 20000, 7)
  local c = data.draw(dist, 20000, 8)
  check.eq(table.concat(a, ",", 1, 50), table.concat(b, ",", 1, 50), "the same seed, the same draws")
  check.truthy(table.concat(a, ",", 1, 50) ~= table.concat(c, ",", 1, 50), "another seed, other draws")
  local sorted = table.move(a, 1, #a, 1, {})
  table.sort(sorted)
  -- the sample median and 99th percentile of 20,000 draws: within 3% and 8% (their standard
  -- errors are about 1% and 4%)
  check.near(sorted[10000], 200, 0.03, "lognormal's median")
  check.near(sorted[19800], 2000, 0.08, "lognormal's p99")
  local s = data.sampler({ length_distribution = dist }, { seed = 7 })
  for _, i in ipairs({ 1, 2, 4096, 4097, 12345, 20000 }) do check.eq(s(i), a[i], "sampler(" .. i .. ") is draw " .. i) end
  local cut = data.sampler({ length_distribution = dist }, { seed = 7, seq_len = 512 })
  for i = 1, 2000 do check.eq(cut(i), math.min(a[i], 512), "the sampler cuts at seq_len") end
  local l, info = data.lengths({ length_distribution = dist }, { dataset_size = 20000, seed = 7, seq_len = 1024 })
  local over = 0
  for i = 1, 20000 do
    if a[i] > 1024 then over = over + 1 end
    check.eq(l[i], math.min(a[i], 1024), "a data set of draws")
  end
  check.eq(info.cut, over, "draws cut")
  -- P(X > 1024) = P(Z > ln(1024/200) / sigma) = 4.95%: 990 of 20,000, standard deviation 31
  check.truthy(over > 890 and over < 1090, "about 5% of draws above 1024 tokens: " .. over)
  refused(function() data.lengths({ length_distribution = dist, too_long = "error" }, { dataset_size = 2000, seq_len = 256 }) end,
          { "(draw ", "of data.length_distribution, seed 0) has length" }, "a draw too long")
  refused(function() data.lengths({ length_distribution = dist }) end, { "dataset_size", "required" }, "no dataset_size")
  local u = data.draw({ kind = "uniform", min = 3, max = 6 }, 8000, 1)
  local counts = {}
  for _, v in ipairs(u) do counts[v] = (counts[v] or 0) + 1 end
  for v = 3, 6 do check.near(counts[v], 2000, 0.08, "uniform's count of " .. v) end
  check.eq(counts[2] or counts[7], nil, "uniform stays in [min, max]")
  check.eq(table.concat(data.draw({ kind = "fixed", length = 9 }, 3), ","), "9,9,9", "fixed")
  refused(function() data.sampler({ lengths = { 1 } }) end, { "data.sampler needs data.length_distribution" }, "a list's sampler")
end

-- Padding, Opacus's split, physical batches.
do
  check.eq(data.pad(1, 8), 8, "pad 1 to 8")
  check.eq(data.pad(16, 8), 16, "16 stays")
  check.eq(data.pad(17, 8), 24, "17 to 24")
  check.eq(data.pad(17), 17, "pad_to 1")
  check.eq(data.pad_length({ 5, 33, 12 }, 16), 48, "a batch's padded length")
  check.eq(data.pad_length({ 5, 33, 12 }), 33, "its longest")
  refused(function() data.pad_length({}, 8) end, { "empty physical batch" }, "an empty batch")
  -- numpy.array_split(range(n), ceil(n / m)) part sizes
  check.eq(table.concat(data.split(50, 16), ","), "13,13,12,12", "50 in at most 16")
  check.eq(table.concat(data.split(32, 16), ","), "16,16", "32 in at most 16")
  check.eq(table.concat(data.split(33, 16), ","), "11,11,11", "33 in at most 16")
  check.eq(table.concat(data.split(7, 16), ","), "7", "7 in at most 16")
  check.eq(#data.split(0, 16), 0, "an empty logical batch")
  refused(function() data.split(5, 0) end, { "max_physical_batch_size must be an integer >= 1" }, "m = 0")
  local lengths = { 50, 7, 300, 9, 120 }
  local plain = data.physical_batches(lengths, 2)
  check.eq(#plain, 3, "5 samples in at most 2: 3 batches")
  check.eq(string.format("%d:%d %d:%d %d:%d", plain[1].size, plain[1].padded, plain[2].size, plain[2].padded,
                         plain[3].size, plain[3].padded), "2:50 2:300 1:120", "in the order drawn")
  local grouped = data.physical_batches(lengths, 2, { pad_to = 16, group_by_length = true })
  check.eq(string.format("%d:%d %d:%d %d:%d", grouped[1].size, grouped[1].padded, grouped[2].size, grouped[2].padded,
                         grouped[3].size, grouped[3].padded), "2:16 2:128 1:304", "grouped by length, padded to 16")
  check.eq(table.concat(grouped[1].order, ","), "2,4,1,5,3", "the length order")
end

-- Data readers refuse what is not a regular file in one line, without reading it (issue 37:
-- /dev/zero read until memory ran out, a FIFO blocked for ever, a directory gave a Lua error); a
-- UTF-8 byte-order mark before text is text, not a uint32 length of 834649071.
do
  local fifo = root .. "/lengths.fifo"
  os.execute(string.format("mkfifo %q", fifo))
  for _, case in ipairs({ { "/dev/zero", "a character device, not a regular file" },
                          { "/dev/urandom", "a character device, not a regular file" },
                          { fifo, "a FIFO, not a regular file" },
                          { root, "a directory, not a regular file" } }) do
    local ok, err = pcall(dp.data.lengths, { lengths_file = case[1] }, { seq_len = 64 })
    check.eq(ok, false, case[1] .. " is refused")
    check.truthy(tostring(err):find("data.lengths_file '" .. case[1] .. "' cannot be read: " .. case[2], 1, true),
                 case[1] .. ": says what it is: " .. tostring(err))
  end
  for _, case in ipairs({ { "\239\187\1911\n", { 1 } }, { "\239\187\19112\n34\n", { 12, 34 } } }) do
    local path = root .. "/bom.txt"
    local f = assert(io.open(path, "wb"))
    f:write(case[1])
    f:close()
    local lengths = dp.data.lengths({ lengths_file = path }, { seq_len = 64 })
    check.eq(#lengths, #case[2], "a BOM before text: its lines")
    for i, v in ipairs(case[2]) do check.eq(lengths[i], v, "a BOM before text: length " .. i) end
  end
  -- a token file of fewer documents than the batch: said in its terms, not a sample rate of 2
  local tokens = root .. "/two_docs.bin"
  local f = assert(io.open(tokens, "wb"))
  f:write(string.pack("<I2I2I2I2I2", 5, 6, 0, 7, 0))
  f:close()
  local ok, err = pcall(dp.experiment, { device = "plan", method = "ghost", iters = 1, warmup = 0, snapshots = "none",
                                         data = { file = tokens, eos = 0 },
                                         model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2,
                                                   seq_len = 8, batch = 4 } })
  check.eq(ok, false, "a batch larger than the data set is refused")
  check.truthy(tostring(err):find("holds 2 sample(s) (documents of data.file", 1, true)
               and tostring(err):find("fewer than the batch of 4 (model.batch)", 1, true)
               and not tostring(err):find("sample_rate", 1, true), "in the user's terms: " .. tostring(err))
end

os.execute("rm -rf '" .. root .. "'")
print("test_data: ok")
