-- dpprof.experiment_world: the votes of a launched world of several ranks running one experiment
-- (dpprof.experiment_run): before each collective and at the end, so that a rank's failure ends
-- every rank's run rather than leaving the others waiting in a collective.
local dp = require("dpprof")
local json = dp.json
local result = require("dpprof.experiment_result")
local start = require("dpprof.experiment_start")

local release_all = start.release_all

local world = {}

-- A launched world of several ranks: before each collective, and once at the end, every rank says
-- whether its run failed (dp.dist.all_gather of "" or the failure, as JSON), so that a rank that
-- failed (out of memory, an error) ends every rank's run, each result naming it, rather than
-- leaving the others waiting in a collective. A failure inside a collective cannot be voted on:
-- that rank raises and the launcher stops the job (combine_ranks).
local PEER_FAILED = setmetatable({}, { __tostring = function() return "another rank failed" end })

-- The models as built, which the first vote after the build carried: the first rank whose
-- differs from rank 0's and its failure (a refusal), or nil.
local function built_models_disagree(all)
  local tables = {}
  for i, t in ipairs(all) do tables[i] = t:sub(1, 1) == "=" and json.decode(t:sub(2)) or {} end
  local rank, path, theirs0, theirs = result.first_disagreement(tables)
  if rank then
    return rank, { refuse = true, message = string.format("distributed: ranks disagree on the model as built, "
      .. "model.%s: rank 0 has %s, rank %d has %s (every rank must load the same model)", path, theirs0, rank,
      theirs) }
  end
end

-- The first vote after the build carries each rank's model as built (built_model: model:config()
-- flattened, a checkpoint's sizes included), which must agree as the configurations did; a
-- difference is refused on every rank (`refuse`). An interrupt (SIGINT, held back while the
-- world runs: see dp.interrupts) is voted as a failure, so every rank stops at the same vote.
local function vote(run, failure)
  if run.ws_launched <= 1 then return nil end
  if not failure and dp.interrupts and dp.interrupts.pending() then
    failure = { message = "interrupted by SIGINT", interrupted = true }
  end
  run.voted = run.voted or failure ~= nil
  local text = failure and json.encode(failure) or ""
  if not failure and run.built_model then text, run.built_model = "=" .. json.encode(run.built_model), nil end
  local all = dp.dist.all_gather(text)
  for i, t in ipairs(all) do
    if t ~= "" and t:sub(1, 1) ~= "=" then return i - 1, json.decode(t) end
  end
  if all[1]:sub(1, 1) == "=" then return built_models_disagree(all) end -- this vote carried the models as built
end

local function peer_failure_of(who, f)
  return { rank = who, message = f.message, oom = f.oom, refuse = f.refuse, interrupted = f.interrupted }
end

local function check_peers(run)
  local who, f = vote(run, nil)
  if who then
    run.peer_failure = peer_failure_of(who, f)
    error(PEER_FAILED, 0)
  end
end

local function collective(run, fn)
  run.in_collective = true
  fn()
  run.in_collective = false
end

local function sharded(run, fn) if run.fsdp then collective(run, fn) else fn() end end

-- A launched world's last vote, which pairs with the others' next one; a peer's refusal or
-- interrupt ends this rank as it ends that one. Returns ok (false when a peer failed).
local function last_vote(run, ok, err)
  local ws_launched = run.ws_launched
  if ws_launched > 1 and not run.in_collective then -- the vote that pairs with the others' next one
    if ok then
      local who, f = vote(run, nil) -- every rank at its end: did one fail after the last collective?
      if who then ok, run.peer_failure = false, peer_failure_of(who, f) end
    elseif not run.peer_failure then
      vote(run, { message = err.message, oom = dp.oom_details(err.message) })
    end
  end
  local peer_failure = run.peer_failure
  if peer_failure and (peer_failure.refuse or peer_failure.interrupted) then
    release_all(run)
    if peer_failure.refuse then dp.refuse("dpprof.experiment: " .. peer_failure.message) end
    if dp.interrupts then dp.interrupts.interrupt() end -- every rank ends as the interrupted one does (exit 130)
    error(string.format("interrupted by SIGINT (rank %d of %d was interrupted; every rank stopped at the same vote)",
                        peer_failure.rank, ws_launched), 0)
  end
  return ok
end

world.vote, world.check_peers, world.collective, world.sharded = vote, check_peers, collective, sharded
world.last_vote = last_vote

return world
