-- test_lua.lua: dpprof.plot from a script: render_dir, the toolkit's charts, and the errors
-- bad arguments raise (naming the function, the field and what was expected).
--   dpplot_lua_run test_lua.lua FIXTURES_DIR OUT_DIR
local fixtures, out = arg[1], arg[2]
local plot = assert(dpprof and dpprof.plot, "dpprof.plot is loaded")
os.execute("mkdir -p '" .. out .. "'")

local failures = 0
local function check(cond, msg)
  if not cond then
    failures = failures + 1
    io.stderr:write("FAIL: " .. msg .. "\n")
  end
end

-- PNG width and height from the IHDR chunk (bytes 17..24, big-endian)
local function png_size(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local head = f:read(24)
  f:close()
  if not head or #head < 24 or head:sub(2, 4) ~= "PNG" then return nil end
  return string.unpack(">I4I4", head, 17)
end

local function expect_error(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  check(not ok, "expected an error matching '" .. pattern .. "'")
  if not ok then
    check(tostring(err):find(pattern) ~= nil, "error '" .. tostring(err) .. "' should match '" .. pattern .. "'")
  end
end

-- render_dir: a clean directory, then a malformed one (still rendered, messages returned)
local ok, err, msgs = plot.render_dir(fixtures .. "/single", out .. "/single")
check(ok == true and err == nil and type(msgs) == "table", "render_dir on single/ succeeds")
local w, h = png_size(out .. "/single/memory_breakdown_comparison.png")
check(w == 1600 and h == 1000, "default size 1600x1000")
ok, err, msgs = plot.render_dir(fixtures .. "/malformed", out .. "/malformed", {scale = 2})
check(ok == false and err:find("bk.json: invalid JSON", 1, true), "malformed: false and the first problem")
local named = false
for _, m in ipairs(msgs) do named = named or m:find("ghost.json: field 'memory.peak_bytes'", 1, true) ~= nil end
check(named, "messages name the file and field")
w, h = png_size(out .. "/malformed/memory_timeline.png")
check(w == 3200 and h == 2000, "scale=2 doubles the pixels")
-- a point no sweep point has: false, the swept values named, nothing drawn (issue 38.5)
ok, err, msgs = plot.render_dir(fixtures .. "/sweep_2d", out .. "/nopoint", {point = "seq_len=1000"})
check(ok == false and err:find("no sweep point has seq_len=1000 (sweep 'seq_batch' varies seq_len over 256", 1, true),
      "render_dir with a point no sweep has: " .. tostring(err))
check(png_size(out .. "/nopoint/memory_timeline.png") == nil, "nothing drawn for a point no sweep has")

-- the toolkit
local f = plot.lines{
  title = "Peak memory against seq_len", x_label = "seq_len", y_label = "Peak memory",
  x_scale = "log2", y_unit = "bytes", out = out .. "/lines.png", width = 1200, height = 800,
  series = {
    {name = "vanilla", x = {256, 512, 1024, 2048}, y = {2.9e9, 3.9e9, 5.9e9, 9.9e9}},
    {name = "ghost", x = {256, 512, 1024, 2048}, y = {3.1e9, 4.4e9, 6.9e9, false},
     oom = {false, false, false, true}},
  },
}
check(f == out .. "/lines.png", "lines returns the path")
w, h = png_size(f)
check(w == 1200 and h == 800, "lines honours width/height")

check(plot.bars{out = out .. "/bars.png", title = "Stacked", y_unit = "bytes", stacked = true,
                groups = {"vanilla", "ghost"}, notes = {"5.84 GiB", "6.85 GiB"},
                series = {{name = "parameters", values = {497759232, 497759232}, color = "#332288"},
                          {name = "activations", values = {4.2e9, 5.3e9}, color = "#117733"}}}
      == out .. "/bars.png", "bars")
check(plot.scatter{out = out .. "/scatter.png", x_unit = "bytes", y_unit = "ms",
                   points = {{x = 6.27e9, y = 245.7, label = "vanilla", method = "vanilla"},
                             {x = 7.35e9, y = 502.7, label = "ghost", method = "ghost", hollow = true}}}
      == out .. "/scatter.png", "scatter")
check(plot.heatmap{out = out .. "/heatmap.png", x_label = "seq_len", y_label = "batch",
                   x_labels = {256, 512}, y_labels = {"1", "2"}, unit = "bytes", color_scale = "log2",
                   values = {{2.3e9, 2.5e9}, {2.6e9, false}}, oom = {{false, false}, {false, true}},
                   colorbar_label = "Peak memory"}
      == out .. "/heatmap.png", "heatmap")
check(plot.timeline{out = out .. "/timeline.png", title = "ghost",
                    series = {{name = "allocated", t = {0, 10, 20, 30}, y = {1e9, 3e9, 2e9, 1e9}},
                              {name = "reserved", t = {0, 10, 20, 30}, y = {1.1e9, 3.2e9, 3.2e9, 3.2e9}, dashed = true}},
                    spans = {{phase = "forward", start_ms = 0, end_ms = 10},
                             {phase = "backward", start_ms = 10, end_ms = 25}},
                    annotations = {{x = 20, y = 2e9, text = "clip"}}}
      == out .. "/timeline.png", "timeline")
for _, name in ipairs({"bars", "scatter", "heatmap", "timeline"}) do
  w, h = png_size(out .. "/" .. name .. ".png")
  check(w == 1600 and h == 1000, name .. ".png is 1600x1000")
end

-- utilities
check(plot.method_color("ghost") == "#0072b2", "ghost is Okabe-Ito blue")
-- A custom method's colour is fallback_colors[FNV-1a-32(name) % 8] (plots/palette.c), the same on
-- every machine and run: computed here from that rule, not compared with itself.
local fallback = {"#cc79a7", "#332288", "#882255", "#999933", "#44aa99", "#aa4499", "#117733", "#000000"}
local function fnv_colour(name)
  local h = 2166136261
  for i = 1, #name do h = ((h ~ name:byte(i)) * 16777619) & 0xffffffff end
  return fallback[h % #fallback + 1]
end
for _, name in ipairs({"flash+twopass", "ghost+bk", "materialize+twopass", "my_method"}) do
  check(plot.method_color(name) == fnv_colour(name),
        name .. ": " .. plot.method_color(name) .. ", FNV-1a gives " .. fnv_colour(name))
end
check(plot.method_color("flash+twopass") == "#aa4499", "flash+twopass: FNV-1a-32 % 8 = 5, #aa4499")
check(plot.method_color("ghost+bk") == "#117733", "ghost+bk: FNV-1a-32 % 8 = 6, #117733")
local values, labels, unit = plot.ticks(0, 6.3e9, "linear", "bytes")
check(unit == "GiB" and labels[1] == "0" and #values == #labels, "ticks in GiB")
values, labels = plot.ticks(256, 8192, "log2")
check(labels[1] == "256" and labels[#labels] == "8192", "log2 ticks")
check(plot.format(497759232, "bytes") == "474.7 MiB", "format bytes")

-- errors name the function, the field and what was expected
expect_error("bad argument #1 to 'dpprof%.plot%.lines' %(expected a table", plot.lines, "nope")
expect_error("dpprof.plot.lines: field 'out'", plot.lines, {series = {{x = {1}, y = {1}}}})
expect_error("field 'series%[1%]%.y%[2%]' must be a number or false %(got string%)", plot.lines,
             {out = out .. "/x.png", series = {{x = {1, 2}, y = {1, "two"}}}})
expect_error("field 'series%[1%]%.y' has 1 values but 'series%[1%]%.x' has 2", plot.lines,
             {out = out .. "/x.png", series = {{x = {1, 2}, y = {1}}}})
expect_error("field 'x_scale' must be \"linear\", \"log2\" or \"log10\" %(got string%)", plot.lines,
             {out = out .. "/x.png", x_scale = "log3", series = {{x = {1}, y = {1}}}})
expect_error("field 'series%[1%]%.color' must be a colour", plot.lines,
             {out = out .. "/x.png", series = {{x = {1}, y = {1}, color = "blue"}}})
expect_error("field 'series' must hold 1 to", plot.lines, {out = out .. "/x.png", series = {}})
expect_error("field 'series%[2%]%.values' has 1 values for 2 groups", plot.bars,
             {out = out .. "/x.png", groups = {"a", "b"},
              series = {{values = {1, 2}}, {values = {1}}}})
expect_error("field 'values' must hold 2 rows", plot.heatmap,
             {out = out .. "/x.png", x_labels = {"a"}, y_labels = {"1", "2"}, values = {{1}}})
expect_error("field 'oom%[1%]%[1%]' must be a boolean", plot.heatmap,
             {out = out .. "/x.png", x_labels = {"a"}, y_labels = {"1"}, values = {{1}}, oom = {{1}}})
expect_error("a log scale over values <= 0", plot.lines,
             {out = out .. "/x.png", x_scale = "log2", series = {{x = {0, 1}, y = {1, 2}}}})
expect_error("cannot write", plot.lines,
             {out = "/nonexistent-dir/x.png", series = {{x = {1}, y = {1}}}})
expect_error("bad argument #3 to 'dpprof%.plot%.render_dir' %(field 'scale'", plot.render_dir, fixtures .. "/single", out, {scale = "big"})

if failures > 0 then
  error(string.format("test_lua: %d check(s) failed", failures), 0)
end
print("test_lua: all checks passed")
