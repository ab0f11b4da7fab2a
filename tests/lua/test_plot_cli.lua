-- test_plot_cli.lua: `dpprof plot DIR` itself (the binary, not a test renderer): its success path
-- on the fixtures (every chart and summary written, at the asked size), and a directory planted
-- with hostile names: a link named like an output (it used to overwrite the link's target), a
-- dangling link named like a chart (it used to create a file wherever it pointed), a FIFO named
-- *.json (it used to hang) and a link to /dev/zero (it used to read until memory ran out); 33
-- results in one directory, and writes that fail for want of space.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local fixtures = arg[0]:match("(.*/)") .. "../fixtures/results"
local root = string.format("/tmp/dpprof-test-plot-cli-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. root)
assert(dp.mkdir_p(root))
local exe = dp.executable

-- PNG width and height from the IHDR chunk
local function png_size(path)
  local head = dp.read_file(path)
  if not head or #head < 24 or head:sub(2, 4) ~= "PNG" then return nil end
  return string.unpack(">I4I4", head, 17)
end

local CHARTS = { "memory_breakdown_comparison.png", "memory_timeline.png", "performance_tradeoff.png",
                 "module_breakdown.png", "memory_analysis_overview.png" }
local SUMMARIES = { "summary.txt", "summary.csv", "summary.md", "summary.tex" }

-- The success path: exit 0, nothing on stderr, every output, the default size and --scale.
do
  local out = root .. "/single"
  local code, text = check.sh(string.format("%q plot %q --out %q", exe, fixtures .. "/single", out))
  check.eq(code, 0, "dpprof plot single/: " .. text)
  check.truthy(not text:find("dpprof plot:", 1, true), "nothing to say: " .. text)
  for _, f in ipairs(CHARTS) do
    local w, h = png_size(out .. "/" .. f)
    check.eq(w, 1600, f .. " width")
    check.eq(h, 1000, f .. " height")
  end
  local csv = assert(dp.read_file(out .. "/summary.csv"))
  local rows = select(2, csv:gsub("\n", ""))
  check.eq(rows, 1 + 6, "summary.csv: a header and one row per fixture file")
  for _, f in ipairs(SUMMARIES) do check.truthy(dp.read_file(out .. "/" .. f), f .. " written") end
  code, text = check.sh(string.format("%q plot %q --out %q --scale 0.5", exe, fixtures .. "/single", out .. "-half"))
  check.eq(code, 0, "--scale 0.5: " .. text)
  check.eq(png_size(out .. "-half/memory_timeline.png"), 800, "--scale 0.5 halves the width")
  -- a sweep directory draws its sweep chart too
  code, text = check.sh(string.format("%q plot %q --out %q", exe, fixtures .. "/sweep_seq", root .. "/sweep"))
  check.eq(code, 0, "sweep_seq/: " .. text)
  check.eq(png_size(root .. "/sweep/sweep_seq_len.png"), 1600, "sweep_seq_len.png")
  -- --out "" is refused (it used to read past the end of the string)
  code, text = check.sh(string.format("%q plot %q --out ''", exe, fixtures .. "/single"))
  check.eq(code, 2, "--out '': " .. text)
  check.truthy(text:find("--out needs a directory, got an empty string", 1, true), text)
end

-- --timelines each: a timeline file per configuration of a sweep (here seq_len 256..8192, six),
-- none without it; a value other than each/points is refused before anything is written.
do
  local out = root .. "/each"
  local code, text = check.sh(string.format("%q plot %q --out %q --timelines each", exe, fixtures .. "/sweep_seq", out))
  check.eq(code, 0, "--timelines each: " .. text)
  local files = {}
  for _, name in ipairs(dp.list_dir(out)) do
    if name:match("^memory_timeline_seq_len%d+%.png$") then files[#files + 1] = name end
  end
  table.sort(files)
  check.eq(#files, 6, "one timeline per seq_len: " .. table.concat(files, " "))
  check.eq(png_size(out .. "/memory_timeline_seq_len512.png"), 1600, "memory_timeline_seq_len512.png")
  code, text = check.sh(string.format("%q plot %q --out %q --timelines each --point seq_len=512", exe,
                                      fixtures .. "/sweep_seq", out .. "-point"))
  check.eq(code, 0, "--timelines each --point: " .. text)
  check.truthy(dp.read_file(out .. "-point/memory_timeline_seq_len512.png"), "the matching point's timeline")
  check.truthy(not dp.read_file(out .. "-point/memory_timeline_seq_len256.png"), "no timeline for other points")
  check.truthy(not dp.read_file(root .. "/sweep/memory_timeline_seq_len512.png"), "none without --timelines each")
  code, text = check.sh(string.format("%q plot %q --out %q --timelines all", exe, fixtures .. "/sweep_seq",
                                      root .. "/each-bad"))
  check.eq(code, 2, "--timelines all: " .. text)
  check.truthy(text:find("--timelines takes 'each'", 1, true), text)
  check.truthy(not dp.read_file(root .. "/each-bad/summary.txt"), "nothing written for a bad --timelines")
end

-- A hostile directory: the plot refuses what is planted, leaves it alone, renders the rest.
do
  local dir = root .. "/planted"
  assert(dp.mkdir_p(dir))
  for _, name in ipairs(dp.list_dir(fixtures .. "/single")) do
    assert(dp.write_file(dir .. "/" .. name, assert(dp.read_file(fixtures .. "/single/" .. name))))
  end
  assert(dp.write_file(root .. "/victim.txt", "precious"))
  local function sh(cmd) check.eq(os.execute(cmd), true, cmd) end
  sh(string.format("ln -s %q %q", root .. "/victim.txt", dir .. "/summary.txt"))
  sh(string.format("ln -s %q %q", root .. "/elsewhere.png", dir .. "/memory_timeline.png"))
  sh(string.format("mkfifo %q", dir .. "/zz.json"))
  sh(string.format("ln -s /dev/zero %q", dir .. "/big.json"))
  local t0 = dp.clock()
  local code, text = check.sh(string.format("timeout 60 %q plot %q", exe, dir))
  check.truthy(dp.clock() - t0 < 30, "no hang on the FIFO")
  check.eq(code, 1, "problems are exit 1: " .. text)
  check.truthy(text:find("summary.txt: refusing to write: it is a symbolic link", 1, true), "the link named: " .. text)
  check.truthy(text:find("memory_timeline.png: refusing to write: it is a symbolic link", 1, true), text)
  check.truthy(text:find("zz.json: cannot read: a FIFO, not a regular file", 1, true), "the FIFO named: " .. text)
  check.truthy(text:find("big.json: cannot read: a character device, not a regular file", 1, true), text)
  check.eq(dp.read_file(root .. "/victim.txt"), "precious", "the link's target untouched")
  check.eq(dp.read_file(root .. "/elsewhere.png"), nil, "nothing created where the dangling link points")
  check.eq(os.execute(string.format("test -L %q", dir .. "/summary.txt")), true, "the link itself left alone")
  check.eq(png_size(dir .. "/memory_breakdown_comparison.png"), 1600, "the rest is rendered")
  check.truthy(dp.read_file(dir .. "/summary.csv"), "summary.csv written")
  local tmp = 0
  for _, name in ipairs(dp.list_dir(dir)) do if name:match("%.tmp$") then tmp = tmp + 1 end end
  check.eq(tmp, 0, "no temporary left behind")
end

-- 33 plain experiment results in one directory (dp.experiment, then dp.results.write): the module
-- and op charts held 32 and read past their arrays (a stack overflow under ASan, exit 0 without).
-- Now every chart is written, and the one left out is named.
do
  local dir = root .. "/many"
  assert(dp.mkdir_p(dir))
  for i = 1, 33 do
    local r = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 1, seq_len = 8,
                                       batch = 1 }, method = "vanilla", device = "cpu", iters = 1, warmup = 0,
                             name = string.format("run%02d", i) }
    dp.results.write(string.format("%s/run%02d.json", dir, i), r)
  end
  local code, text = check.sh(string.format("%q plot %q", exe, dir))
  check.eq(code, 0, "33 results: " .. text)
  check.truthy(text:find("module_breakdown.png: draws at most 32 results; 1 more left out", 1, true), text)
  for _, f in ipairs(CHARTS) do check.eq(png_size(dir .. "/" .. f), 1600, "33 results: " .. f) end
  -- --height: at 500 px one timeline panel of twelve fits, and the line says how to draw more
  -- (it named render_dir's height=, which the command line did not take); taller, all twelve fit
  code, text = check.sh(string.format("%q plot %q --out %q --width 800 --height 500", exe, dir, root .. "/many-short"))
  check.eq(code, 0, "--height 500: " .. text)
  check.eq(select(2, png_size(root .. "/many-short/memory_timeline.png")), 500, "--height 500")
  check.eq(png_size(root .. "/many-short/memory_timeline.png"), 800, "--width 800")
  check.truthy(text:find("memory_timeline.png: 1 of 12 panels fit at a height of 500 px", 1, true)
               and text:find("or taller: dpprof plot --height H)", 1, true), text)
  code, text = check.sh(string.format("%q plot %q --out %q --height 2000", exe, dir, root .. "/many-tall"))
  check.eq(code, 0, "--height 2000: " .. text)
  check.truthy(not text:find("panels fit", 1, true), "every panel fits at 2000 px: " .. text)
  for _, bad in ipairs({ "--height 99", "--height 8001", "--width 12x", "--height" }) do
    code, text = check.sh(string.format("%q plot %q --out %q %s", exe, dir, root .. "/many-bad", bad))
    check.eq(code, 2, bad .. ": " .. text)
    check.truthy(text:find("whole pixels from 400 to 8000", 1, true), bad .. ": " .. text)
  end
  check.eq(dp.list_dir(root .. "/many-bad"), nil, "nothing written for a bad size")
end

-- A disk that fills (a file size limit here: EFBIG where a full disk gives ENOSPC): each chart and
-- summary that fails is named with the reason (it used to say only "cannot write the PNG").
do
  local out = root .. "/full"
  local code, text = check.sh(string.format("sh -c 'trap \"\" XFSZ; ulimit -f 4; exec %q plot %q --out %q'", exe,
                                            fixtures .. "/single", out))
  check.eq(code, 1, "a full disk is exit 1: " .. text)
  check.truthy(text:find(out .. "/memory_timeline.png: cannot write the PNG: File too large", 1, true), text)
  check.truthy(text:find(out .. "/summary.txt: cannot write: File too large", 1, true), text)
end

-- What --point and --heatmap ask for and the directory lacks is a bad argument, exit 2 as --help
-- says, with nothing drawn and the swept variables and values named (issue 38.5: a --point that
-- matched nothing drew what it could, "sweep has no peak values", and exited 0; in a directory
-- without a sweep it was ignored); a malformed field the validator refuses (a negative peak) is a
-- problem, exit 1 (issue 37).
do
  local out = root .. "/asked"
  local sweep_2d, single = fixtures .. "/sweep_2d", fixtures .. "/single"
  for _, case in ipairs({
    { sweep_2d, "--point seq_len=1000",
      "--point seq_len=1000: no sweep point has seq_len=1000 (sweep 'seq_batch' varies seq_len over 256, 512, 1024, 2048)" },
    { sweep_2d, "--point foo=1", "--point foo=1: no sweep varies 'foo' (sweep 'seq_batch' varies batch, seq_len)" },
    { sweep_2d, "--point seq_len=256,batch=3", "no sweep point has batch=3 (sweep 'seq_batch' varies batch over 1, 2, 4, 8, 16)" },
    { sweep_2d, "--point method=bogus", "no sweep point has method bogus (the methods: ghost, bk, flash_clip)" },
    { sweep_2d, "--heatmap seq_len,foo", "--heatmap seq_len,foo: no sweep varies 'foo' (sweep 'seq_batch' varies batch, seq_len)" },
    { sweep_2d, "--heatmap foo,seq_len", "no sweep varies 'foo'" },
    { sweep_2d, "--heatmap seq_len,seq_len", "X and Y must be two different swept variables" },
    { sweep_2d, "--heatmap seq_len,method", "'method' is not an axis" },
    { fixtures .. "/sweep_seq", "--heatmap seq_len,batch", "no sweep varies 'batch' (sweep 'seq_len_sweep' varies seq_len)" },
    { single, "--heatmap a,b", "--heatmap a,b: the directory holds no sweep" },
    { single, "--point seq_len=1000", "--point seq_len=1000: the directory holds no sweep" },
  }) do
    os.execute(string.format("rm -rf %q", out))
    local code, text = check.sh(string.format("%q plot %q --out %q %s", exe, case[1], out, case[2]))
    check.eq(code, 2, case[2] .. ": exit 2: " .. text)
    check.truthy(text:find(case[3], 1, true), case[2] .. ": says why: " .. text)
    check.eq(select(2, text:gsub("\n", "")), 1, case[2] .. ": one line: " .. text)
    check.eq(dp.list_dir(out), nil, case[2] .. ": nothing drawn")
  end
  local code, text = check.sh(string.format("%q plot %q --out %q --point seq_len=256", exe, sweep_2d, out))
  check.eq(code, 0, "a --point that matches: " .. text)
  code, text = check.sh(string.format("%q plot %q --out %q --heatmap batch,seq_len", exe, sweep_2d, out))
  check.eq(code, 0, "a --heatmap of the swept variables: " .. text)
  local bad = root .. "/negative-peak"
  os.execute(string.format("mkdir -p %q && cp %q/*.json %q/", bad, fixtures .. "/single", bad))
  local doc = dp.json.decode(dp.read_file(bad .. "/ghost.json"))
  doc.memory.peak_bytes = -1
  local f = assert(io.open(bad .. "/ghost.json", "w"))
  f:write(dp.json.encode(doc))
  f:close()
  code, text = check.sh(string.format("%q plot %q --out %q", exe, bad, out .. "-neg"))
  check.eq(code, 1, "a negative peak is a problem: " .. text)
  check.truthy(text:find("ghost.json: field 'memory.peak_bytes' is -1, expected a number >= 0", 1, true), text)
end

os.execute("rm -rf " .. root)
print("test_plot_cli: ok")
