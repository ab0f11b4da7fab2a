-- test_privacy.lua: dpprof.privacy from Lua, against Opacus 1.6 (RDP, PRV) and dp_accounting 0.6
-- (PLD): values from tests/fixtures/privacy/{opacus_rdp,accountants}.csv.
-- Run inside dpprof (or tests/privacy/lua_host); passes by finishing without error.
local dp = require("dpprof")
local privacy = dp.privacy

local function close_to(got, want, rel, what)
  local d = math.abs(got - want) / math.abs(want)
  assert(d <= rel, string.format("%s: got %.17g, want %.17g (rel diff %.3e > %.0e)",
                                 what, got, want, d, rel))
end

local function raises(pattern, fn, args)
  local ok, msg = pcall(fn, args)
  assert(not ok, "expected an error matching '" .. pattern .. "'")
  assert(string.find(msg, pattern, 1, true),
         string.format("error '%s' should contain '%s'", msg, pattern))
end

-- The accountants on offer, PRV by default (Opacus's PrivacyEngine's).
assert(privacy.default_accountant == "prv")
assert(table.concat(privacy.accountants, ",") == "rdp,prv,pld")

-- Opacus opacus/tests/accountants_test.py, test_rdp_accountant: 7.32911117143.
local r = privacy.epsilon{accountant = "rdp", sample_rate = 0.04, noise_multiplier = 1.5,
                          steps = 2250, delta = 1e-5}
assert(math.abs(r.epsilon - 7.32911117143) < 5e-8, "Opacus test_rdp_accountant")
assert(r.delta == 1e-5 and r.steps == 2250 and r.sample_rate == 0.04 and r.noise_multiplier == 1.5)
assert(r.accountant == "rdp" and r.order > 1 and r.order <= 63)
assert(string.find(tostring(r), "epsilon=7.32911117", 1, true), tostring(r))
assert(string.find(tostring(r), "(rdp, order ", 1, true), tostring(r))

-- Rows of tests/fixtures/privacy/opacus_rdp.csv (Opacus RDPAccountant values), 1e-6 relative.
close_to(privacy.epsilon{accountant = "rdp", sample_rate = 256 / 60000, noise_multiplier = 1.1,
                         steps = 14040, delta = 1e-5}.epsilon, 2.594363354953112, 1e-6, "MNIST-like")
-- Large σ, small q: erfc underflows inside the fractional-order series.
local big = privacy.epsilon{accountant = "rdp", sample_rate = 1e-4, noise_multiplier = 20,
                            steps = 1e5, delta = 1e-8}
close_to(big.epsilon, 0.21436150866235773, 1e-6, "sigma 20")
assert(big.order == 63)

-- PRV (the default) and PLD: rows of accountants.csv, q = 0.01, σ = 1, 1000 steps, δ = 1e-5.
local prv = privacy.epsilon{sample_rate = 0.01, noise_multiplier = 1, steps = 1000, delta = 1e-5}
assert(prv.accountant == "prv" and prv.eps_error == 0.01 and prv.delta_error == 1e-8)
assert(math.abs(prv.epsilon - 1.8383716370172951) <= 0.01, "PRV vs Opacus: " .. prv.epsilon)
assert(prv.epsilon_lower < prv.epsilon_estimate and prv.epsilon_estimate < prv.epsilon)
assert(tostring(prv) == string.format("epsilon=%.10g at delta=1e-05 (prv)", prv.epsilon), tostring(prv))
local pld = privacy.epsilon{accountant = "pld", sample_rate = 0.01, noise_multiplier = 1, steps = 1000,
                            delta = 1e-5}
close_to(pld.epsilon, 1.8282436455855091, 0.005, "PLD vs dp_accounting")
assert(pld.value_discretization_interval == 1e-4 and pld.pessimistic == true)
local coarse = privacy.epsilon{accountant = "pld", sample_rate = 0.01, noise_multiplier = 1, steps = 1000,
                               delta = 1e-5, value_discretization_interval = 1e-3}
assert(coarse.epsilon >= pld.epsilon and coarse.value_discretization_interval == 1e-3)
local tight = privacy.epsilon{sample_rate = 0.01, noise_multiplier = 1, steps = 1000, delta = 1e-5,
                              eps_error = 0.001, delta_error = 1e-9}
assert(tight.epsilon < prv.epsilon and tight.eps_error == 0.001 and tight.delta_error == 1e-9)

-- A history: a noise schedule (accountants.csv row 1.0:0.01:500;2.0:0.01:500), and a split segment.
local schedule = { { noise_multiplier = 1, sample_rate = 0.01, steps = 500 },
                   { noise_multiplier = 2, sample_rate = 0.01, steps = 500 } }
local s = privacy.epsilon{history = schedule, delta = 1e-5}
assert(math.abs(s.epsilon - 1.4087604027296838) <= 0.01 and s.history == schedule and s.steps == nil)
close_to(privacy.epsilon{accountant = "pld", history = schedule, delta = 1e-5}.epsilon, 1.3986538559229342,
         0.005, "PLD schedule")
local split = privacy.epsilon{accountant = "pld", delta = 1e-5,
                              history = { { noise_multiplier = 1, sample_rate = 0.01, steps = 400 },
                                          { noise_multiplier = 1, sample_rate = 0.01, steps = 600 } }}
assert(math.abs(split.epsilon - pld.epsilon) < 1e-6, "a split segment is the whole")

-- No noise gives no privacy, for every accountant.
for _, a in ipairs(privacy.accountants) do
  assert(privacy.epsilon{accountant = a, sample_rate = 0.01, noise_multiplier = 0, steps = 10,
                         delta = 1e-5}.epsilon == math.huge)
end

-- Opacus test_get_noise_multiplier_rdp_epochs: 1.416 (Opacus returns 1.416015625).
local n = privacy.noise_multiplier{accountant = "rdp", epsilon = 8, delta = 1e-5, sample_rate = 0.04,
                                   steps = 2250}
close_to(n.noise_multiplier, 1.416015625, 1e-6, "noise_multiplier")
assert(n.epsilon <= 8 and 8 - n.epsilon <= 0.01 and n.target_epsilon == 8 and n.order > 1)
assert(string.find(tostring(n), "noise_multiplier=1.416015625", 1, true), tostring(n))
local fine = privacy.noise_multiplier{accountant = "rdp", epsilon = 8, delta = 1e-5, sample_rate = 0.04,
                                      steps = 2250, epsilon_tolerance = 1e-4}
assert(8 - fine.epsilon <= 1e-4 and fine.noise_multiplier < n.noise_multiplier)
-- accountants.csv: Opacus get_noise_multiplier(accountant="prv") 1.34765625; PLD's 1.346435546875.
local np = privacy.noise_multiplier{epsilon = 8, delta = 1e-5, sample_rate = 0.04, steps = 2250}
assert(np.noise_multiplier == 1.34765625 and np.accountant == "prv", tostring(np))
local nl = privacy.noise_multiplier{accountant = "pld", epsilon = 8, delta = 1e-5, sample_rate = 0.04,
                                    steps = 2250}
assert(nl.noise_multiplier == 1.346435546875 and nl.epsilon <= 8 and 8 - nl.epsilon <= 0.01, tostring(nl))

-- Strict option tables.
local good = {sample_rate = 0.01, noise_multiplier = 1, steps = 10, delta = 1e-5}
local function with(t, k, v)
  local c = {}
  for key, value in pairs(t) do c[key] = value end
  c[k] = v
  return c
end
raises("dpprof.privacy.epsilon: unknown key 'sigma' (valid keys: accountant, sample_rate, noise_multiplier, "
       .. "steps, history, delta", privacy.epsilon, with(good, "sigma", 1))
raises("missing key 'delta'", privacy.epsilon, with(good, "delta", nil))
raises("'steps' must be an integer", privacy.epsilon, with(good, "steps", 1.5))
raises("'delta' must be a number (got string)", privacy.epsilon, with(good, "delta", "1e-5"))
raises("delta must be in (0, 1)", privacy.epsilon, with(good, "delta", 1))
raises("sample_rate must be in (0, 1] (got 1.5)", privacy.epsilon, with(good, "sample_rate", 1.5))
raises("sample_rate must be in (0, 1] (got 0)", privacy.epsilon, with(good, "sample_rate", 0))
raises("noise_multiplier must be finite and >= 0 (got -1)", privacy.epsilon, with(good, "noise_multiplier", -1))
raises("steps must be >= 1 (got 0)", privacy.epsilon, with(good, "steps", 0))
raises("unexpected number key", privacy.epsilon, with(good, 1, true))
raises("dpprof.privacy.epsilon: expects a table of options", privacy.epsilon, 0.5)
raises("dpprof.privacy.epsilon: unknown accountant 'moments' (valid: rdp, prv, pld)", privacy.epsilon,
       with(good, "accountant", "moments"))
raises("'accountant' must be a string (valid: rdp, prv, pld; got number)", privacy.epsilon,
       with(good, "accountant", 1))
raises("'eps_error' applies to accountant 'prv' only (accountant is 'pld')", privacy.epsilon,
       with(with(good, "accountant", "pld"), "eps_error", 0.1))
raises("'value_discretization_interval' applies to accountant 'pld' only (accountant is 'prv')",
       privacy.epsilon, with(good, "value_discretization_interval", 1e-3))
raises("eps_error must be finite and > 0", privacy.epsilon, with(good, "eps_error", 0))
raises("delta_error must be in (0, delta", privacy.epsilon, with(good, "delta_error", 1e-3))
raises("delta_error must be in (0, delta", privacy.epsilon, with(good, "delta_error", 0))
-- Histories.
raises("history is empty", privacy.epsilon, {history = {}, delta = 1e-5})
raises("give either 'history' or sample_rate, noise_multiplier, steps (got both 'history' and 'noise_multiplier')",
       privacy.epsilon, with(with(good, "history", schedule), "sample_rate", nil))
raises("'history' must be a list", privacy.epsilon, {history = 3, delta = 1e-5})
raises("history[2] must be a table", privacy.epsilon, {history = {schedule[1], 7}, delta = 1e-5})
raises("unknown key 'sigma' (valid keys: noise_multiplier, sample_rate, steps)", privacy.epsilon,
       {history = {{sigma = 1, sample_rate = 0.01, steps = 10}}, delta = 1e-5})
raises("history[2]: noise_multiplier must be finite and >= 0 (got -1)", privacy.epsilon,
       {history = {schedule[1], {noise_multiplier = -1, sample_rate = 0.01, steps = 10}}, delta = 1e-5})
raises("missing key 'steps'", privacy.epsilon,
       {history = {{noise_multiplier = 1, sample_rate = 0.01}}, delta = 1e-5})
-- The noise search.
raises("dpprof.privacy.noise_multiplier: unknown key 'noise_multiplier'", privacy.noise_multiplier,
       {epsilon = 1, delta = 1e-5, sample_rate = 0.01, steps = 10, noise_multiplier = 1})
raises("missing key 'epsilon'", privacy.noise_multiplier,
       {delta = 1e-5, sample_rate = 0.01, steps = 10})
raises("is out of reach", privacy.noise_multiplier,
       {accountant = "rdp", epsilon = 0.01, delta = 1e-5, sample_rate = 1, steps = 100000})
raises("unknown accountant 'gdp' (valid: rdp, prv, pld)", privacy.noise_multiplier,
       {accountant = "gdp", epsilon = 1, delta = 1e-5, sample_rate = 0.01, steps = 10})
raises("steps must be >= 1", privacy.noise_multiplier,
       {epsilon = 1, delta = 1e-5, sample_rate = 0.01, steps = 0})

-- Errors point at the calling line of the script.
local ok, msg = pcall(function()
  privacy.epsilon{sample_rate = 0.01, noise_multiplier = 1, steps = 10}
end)
assert(not ok and string.find(msg, "test_privacy.lua:%d+: dpprof.privacy.epsilon: missing key .delta."), msg)

print("test_privacy.lua: ok")
