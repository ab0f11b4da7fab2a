-- dpprof.risk_rows: the plan runs dp.risk reads a method from, a row per physical batch size b:
-- the reserved peak and step time at every padded length of the data set, read from pieces
-- (a quadratic in the length, verified by runs at its quarter points) or planned whole, each
-- round's runs shared among children on every core (see dpprof.risk's header).
local dp = require("dpprof")
local plan = require("dpprof.plan")
local fit = require("dpprof.fit")
local risk_options = require("dpprof.risk_options")

local rows = {}

-- Plan runs are shared among children (one a core) only when each gets at least this many.
rows.MIN_RUNS_PER_CHILD = 16
-- A row's piece of at most this many lengths inside is planned whole, not read as a quadratic.
rows.PIECE_PLAN_ALL = 4
-- How far from a whole number of bytes a piece's quadratic may read (the floating rounding of
-- Lagrange's form on peaks below 2^53, bases no larger than ~1.2) and still be taken.
rows.PIECE_WHOLE_TOLERANCE = 0.01

-- Plans the (b, L) runs of tasks ({b=, d=} each) and returns their reserved peaks and step times,
-- (and allocated peaks) in the tasks' order: on every core (dp.environment().threads: children of dp.isolate_start, each
-- a contiguous share, each run exactly the one this process would make) when there are enough
-- runs to share, else here. progress(n) is told the runs done so far.
local function plan_runs(o, method, tasks, progress)
  local function run_slice(first, last, tell)
    local reserved, step_ms, peak = {}, {}, {}
    for i = first, last do
      local t = tasks[i]
      local r = fit.run_point(risk_options.point_config(o, method, t.b, o.P[t.d]))
      reserved[#reserved + 1], step_ms[#step_ms + 1], peak[#peak + 1] = r.plan.predicted_reserved_bytes,
                                                                        r.timing.avg_ms, r.plan.peak_bytes
      if tell then tell(i, #tasks, 1) end
    end
    return reserved, step_ms, peak
  end
  local n = #tasks
  local children = math.min(o.workers, n // rows.MIN_RUNS_PER_CHILD)
  if children <= 1 then return run_slice(1, n, progress) end
  local running, slices, waiting = {}, {}, {}
  for w = 1, children do
    local first, last = (w - 1) * n // children + 1, w * n // children
    slices[w] = { first = first, last = last }
    running[w] = dp.isolate_start(function(a, z)
      local ok, res, ms, pk = pcall(run_slice, a, z)
      if not ok then
        return { failed = dp.error_text(res), refused = type(res) == "table" and res.exit_status == 2 }
      end
      return { reserved = res, step_ms = ms, peak = pk }
    end, first, last, { threads = 1 })
    waiting[w] = running[w]
  end
  local ok, err = pcall(function()
    while #waiting > 0 do
      dp.isolate_wait(waiting, 1)
      for i = #waiting, 1, -1 do
        if waiting[i]:finished() then table.remove(waiting, i) end
      end
      if progress then
        local done = 0
        for w = 1, children do
          if running[w]:finished() then done = done + slices[w].last - slices[w].first + 1 end
        end
        progress(done, n, children)
      end
    end
  end)
  if not ok then -- an interrupt: the children go with it
    for w = 1, children do if not running[w]:finished() then running[w]:stop() end end
    error(err, 0)
  end
  local reserved, step_ms, peak = {}, {}, {}
  for w = 1, children do
    local res = running[w]:result()
    if res.failed then
      if res.refused then dp.refuse(res.failed) end
      error(res.failed, 0)
    end
    if res.status ~= "ok" then
      error(string.format("dpprof.risk: the child planning runs %d..%d of %s ended %s%s", slices[w].first,
                          slices[w].last, method, tostring(res.status),
                          res.message and (": " .. tostring(res.message)) or ""), 0)
    end
    for j = 1, #res.reserved do
      reserved[#reserved + 1], step_ms[#step_ms + 1], peak[#peak + 1] = res.reserved[j], res.step_ms[j], res.peak[j]
    end
  end
  return reserved, step_ms, peak
end

-- The quarter points of the piece [i, j] of a row (indices of the padded lengths, i < q1 < mid < q3 < j).
local function piece_points(i, j)
  local span = j - i
  return { i + span // 4, i + span // 2, i + (3 * span) // 4 }
end

-- The allocated peaks of the lengths inside [i, j] read as the quadratic in the length through the
-- plan runs at P[i], P[m] and P[j] (Lagrange's form, the lengths taken from P[i]), or nil when it is
-- not that quadratic: a run at P[c1] or P[c2] differs from it, or a length inside does not read as
-- a whole number of bytes (an allocator's sizes are whole in every length). The peak's bytes are
-- sums of tensor sizes, each a product of the length (at most squared: T x T scores) and whole
-- numbers, so a piece in which the same allocations make the peak is such a quadratic.
local function read_piece(o, known, i, m, j, c1, c2)
  local P = o.P
  local x0, x1, x2 = 0.0, (P[m] - P[i]) + 0.0, (P[j] - P[i]) + 0.0
  local y0, y1, y2 = known[i][3], known[m][3], known[j][3]
  local function at(x) -- x: a float, the length less P[i]
    local v = y0 * (((x - x1) * (x - x2)) / ((x0 - x1) * (x0 - x2)))
            + y1 * (((x - x0) * (x - x2)) / ((x1 - x0) * (x1 - x2)))
            + y2 * (((x - x0) * (x - x1)) / ((x2 - x0) * (x2 - x1)))
    local r = math.floor(v + 0.5)
    if math.abs(v - r) > rows.PIECE_WHOLE_TOLERANCE then return nil end
    return math.tointeger(r) or r
  end
  for _, c in ipairs({ c1, c2 }) do
    if at((P[c] - P[i]) + 0.0) ~= known[c][3] then return nil end
  end
  local values = {}
  for d = i + 1, j - 1 do
    local v = at((P[d] - P[i]) + 0.0)
    if v == nil or v < 0 then return nil end
    values[d] = v
  end
  return values
end

-- Adds the row of b to st (st.sizes in order), telling whether the rows stay monotone: a row no
-- less at a longer length, no less than the row of the size below it and no more than the one
-- above (while every pair so far is monotone, the neighbours decide for all).
local function add_row(o, st, b, row)
  for d = 2, o.D do
    if row.reserved[d] < row.reserved[d - 1] then st.monotone = false break end
  end
  local sizes = st.sizes
  local lo, hi = 1, #sizes + 1 -- the insertion point: sizes[lo - 1] < b < sizes[lo]
  while lo < hi do
    local mid = (lo + hi) // 2
    if sizes[mid] < b then lo = mid + 1 else hi = mid end
  end
  if st.monotone then -- across sizes: more samples, no less memory
    local below, above = sizes[lo - 1] and st.rows[sizes[lo - 1]], sizes[lo] and st.rows[sizes[lo]]
    for d = 1, o.D do
      if (below and below.reserved[d] > row.reserved[d]) or (above and above.reserved[d] < row.reserved[d]) then
        st.monotone = false
        break
      end
    end
  end
  table.insert(sizes, lo, b)
  if not o.quiet then
    print(string.format("  %s b=%d: %d plan runs (%d padded lengths), reserved %s at %d tokens .. %s at %d", st.method,
                        b, row.planned, o.D,
                        dp.format_bytes(row.reserved[1]), o.P[1], dp.format_bytes(row.reserved[o.D]), o.P[o.D]))
  end
  st.rows[b] = row
end

-- The rows to plan, each b of todo (w): known[b][d] = false for a length to plan (then {reserved,
-- step_ms, peak} once planned), pending[b] the pieces {i, j} still to read, filled[b][d] a peak
-- read from a verified piece. Exhaustive, or rows too short to read pieces of, plan every length.
local function start_rows(o, todo)
  local w = { todo = todo, known = {}, pending = {}, filled = {}, round = 0 }
  for _, b in ipairs(todo) do
    w.known[b], w.pending[b], w.filled[b] = {}, {}, {}
    if o.exhaustive or o.D <= rows.PIECE_PLAN_ALL + 2 then
      for d = 1, o.D do w.known[b][d] = false end
    else
      w.known[b][1], w.known[b][o.D] = false, false
      w.pending[b][1] = { 1, o.D }
    end
  end
  return w
end

-- Plans this round's runs: every pending piece's quarter points (or all its lengths when short)
-- and what start_rows marked, together (on every core).
local function plan_round(o, st, w)
  local known, todo = w.known, w.todo
  for _, b in ipairs(todo) do
    for _, pc in ipairs(w.pending[b]) do
      local i, j = pc[1], pc[2]
      if j - i - 1 <= rows.PIECE_PLAN_ALL then
        for d = i + 1, j - 1 do if known[b][d] == nil then known[b][d] = false end end
      else
        for _, d in ipairs(piece_points(i, j)) do if known[b][d] == nil then known[b][d] = false end end
      end
    end
  end
  local tasks = {}
  for _, b in ipairs(todo) do
    for d = 1, o.D do if known[b][d] == false then tasks[#tasks + 1] = { b = b, d = d } end end
  end
  if #tasks == 0 then return end
  w.round = w.round + 1
  local done_before, round = st.runs, w.round
  local reserved, step_ms, peak = plan_runs(o, st.method, tasks, o.progress and function(k, n, cores)
    o.progress(string.format("%s: planning batch size%s %s, round %d: %d of %d runs on %d core%s; %d before",
                             st.method, #todo == 1 and "" or "s", #todo == 1 and tostring(todo[1])
                             or (todo[1] .. ".." .. todo[#todo]), round, k, n, cores, cores == 1 and "" or "s",
                             done_before))
  end)
  st.runs = st.runs + #tasks
  for t, task in ipairs(tasks) do known[task.b][task.d] = { reserved[t], step_ms[t], peak[t] } end
end

-- Reads each pending piece whose runs are planned, or splits it at its quarter points into the
-- next round's pieces. Returns whether any piece is left.
local function read_pieces(o, w)
  local any = false
  for _, b in ipairs(w.todo) do
    local known, next_pending = w.known[b], {}
    for _, pc in ipairs(w.pending[b]) do
      local i, j = pc[1], pc[2]
      if j - i - 1 > rows.PIECE_PLAN_ALL then
        local pts = piece_points(i, j)
        local values = read_piece(o, known, i, pts[2], j, pts[1], pts[3])
        if values then
          for d = i + 1, j - 1 do if not known[d] then w.filled[b][d] = values[d] end end
        else
          local cuts = { i, pts[1], pts[2], pts[3], j }
          for c = 1, 4 do
            if cuts[c + 1] - cuts[c] > 1 then next_pending[#next_pending + 1] = { cuts[c], cuts[c + 1] } end
          end
        end
      end
    end
    w.pending[b] = next_pending
    if #next_pending > 0 then any = true end
  end
  return any
end

-- Plans the rows of the sizes in list that are not planned yet: every padded length planned
-- (exhaustive), or read from pieces: a piece [i, j] of a row (its ends planned) is the quadratic
-- in the length through P[i], P[mid] and P[j] when the runs at its quarter points equal that
-- quadratic to the byte and every length inside reads as a whole number of bytes; else it is
-- split at those points and each part read the same way, down to pieces of at most
-- PIECE_PLAN_ALL lengths, planned whole. Each round's runs are planned together (on every core).
local function need(o, st, list)
  local todo, seen = {}, {}
  for _, b in ipairs(list) do
    if not st.rows[b] and not seen[b] then seen[b] = true; todo[#todo + 1] = b end
  end
  if #todo == 0 then return end
  local w = start_rows(o, todo)
  repeat plan_round(o, st, w) until not read_pieces(o, w)
  for _, b in ipairs(todo) do
    local row = { reserved = {}, step_ms = {}, planned = 0 }
    for d = 1, o.D do
      local k = w.known[b][d]
      if k then row.reserved[d], row.step_ms[d], row.planned = k[1], k[2], row.planned + 1
      else row.reserved[d] = plan.budget(o.device_model, w.filled[b][d]).predicted_reserved_bytes end
      assert(row.reserved[d], "dpprof.risk: a padded length of a row was neither planned nor read")
    end
    add_row(o, st, b, row)
  end
end

-- The state of one method: its plan runs, a row per physical batch size b (the reserved peak and
-- step time at every padded length P[d], planned when b is first needed: st.need plans the rows
-- of several sizes at once, on every core), and whether the rows are monotone.
function rows.method_state(o, method)
  local st = { method = method, runs = 0, rows = {}, monotone = true, sizes = {} }
  function st.need(list) need(o, st, list) end
  -- the plan's step time of b samples at P[d]: its run's, planned now if the row read it from a piece
  function st.step_ms(b, d)
    local row = st.row(b)
    if row.step_ms[d] == nil then
      local reserved, step_ms = plan_runs(o, method, { { b = b, d = d } })
      st.runs = st.runs + 1
      if reserved[1] ~= row.reserved[d] then
        error(string.format("dpprof.risk: the plan run of %s at b=%d L=%d reserves %d bytes, its row read %d "
                            .. "(a row's piece is not the quadratic it was read as: run with exhaustive = true)",
                            method, b, o.P[d], reserved[1], row.reserved[d]), 0)
      end
      row.step_ms[d] = step_ms[1]
    end
    return row.step_ms[d]
  end
  function st.row(b)
    if not st.rows[b] then st.need({ b }) end
    return st.rows[b]
  end
  function st.reserved(b, d) return st.row(b).reserved[d] end
  return st
end

return rows
