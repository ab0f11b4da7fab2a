-- test_privacy.lua: dpprof.privacy from Lua, against Opacus 1.6's RDPAccountant.
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

-- Opacus opacus/tests/accountants_test.py, test_rdp_accountant: 7.32911117143.
local r = privacy.epsilon{sample_rate = 0.04, noise_multiplier = 1.5, steps = 2250, delta = 1e-5}
assert(math.abs(r.epsilon - 7.32911117143) < 5e-8, "Opacus test_rdp_accountant")
assert(r.delta == 1e-5 and r.steps == 2250 and r.sample_rate == 0.04 and r.noise_multiplier == 1.5)
assert(r.order > 1 and r.order <= 63)
assert(string.find(tostring(r), "epsilon=7.32911117", 1, true), tostring(r))

-- Rows of tests/fixtures/privacy/opacus_rdp.csv (Opacus RDPAccountant values), 1e-6 relative.
close_to(privacy.epsilon{sample_rate = 256 / 60000, noise_multiplier = 1.1, steps = 14040,
                         delta = 1e-5}.epsilon, 2.594363354953112, 1e-6, "MNIST-like")
-- Large σ, small q: erfc underflows inside the fractional-order series.
local big = privacy.epsilon{sample_rate = 1e-4, noise_multiplier = 20, steps = 1e5, delta = 1e-8}
close_to(big.epsilon, 0.21436150866235773, 1e-6, "sigma 20")
assert(big.order == 63)

-- Edge cases: no steps spend nothing; no noise gives no privacy.
assert(privacy.epsilon{sample_rate = 0.01, noise_multiplier = 1, steps = 0, delta = 1e-5}.epsilon == 0)
assert(privacy.epsilon{sample_rate = 0.01, noise_multiplier = 0, steps = 10, delta = 1e-5}.epsilon
       == math.huge)

-- Opacus test_get_noise_multiplier_rdp_epochs: 1.416 (Opacus returns 1.416015625).
local n = privacy.noise_multiplier{epsilon = 8, delta = 1e-5, sample_rate = 0.04, steps = 2250}
close_to(n.noise_multiplier, 1.416015625, 1e-6, "noise_multiplier")
assert(n.epsilon <= 8 and 8 - n.epsilon <= 0.01 and n.target_epsilon == 8)
assert(string.find(tostring(n), "noise_multiplier=1.416015625", 1, true), tostring(n))
local fine = privacy.noise_multiplier{epsilon = 8, delta = 1e-5, sample_rate = 0.04, steps = 2250,
                                      epsilon_tolerance = 1e-4}
assert(8 - fine.epsilon <= 1e-4 and fine.noise_multiplier < n.noise_multiplier)

-- Strict option tables.
local good = {sample_rate = 0.01, noise_multiplier = 1, steps = 10, delta = 1e-5}
local function with(t, k, v)
  local c = {}
  for key, value in pairs(t) do c[key] = value end
  c[k] = v
  return c
end
raises("dpprof.privacy.epsilon: unknown key 'sigma' (valid keys: sample_rate, noise_multiplier, steps, delta)",
       privacy.epsilon, with(good, "sigma", 1))
raises("missing key 'delta'", privacy.epsilon, with(good, "delta", nil))
raises("'steps' must be an integer", privacy.epsilon, with(good, "steps", 1.5))
raises("'delta' must be a number (got string)", privacy.epsilon, with(good, "delta", "1e-5"))
raises("delta must be in (0, 1)", privacy.epsilon, with(good, "delta", 1))
raises("sample_rate must be in [0, 1]", privacy.epsilon, with(good, "sample_rate", 1.5))
raises("noise_multiplier must be finite and >= 0", privacy.epsilon, with(good, "noise_multiplier", -1))
raises("steps must be >= 0", privacy.epsilon, with(good, "steps", -1))
raises("unexpected number key", privacy.epsilon, with(good, 1, true))
raises("dpprof.privacy.epsilon: expects a table of options", privacy.epsilon, 0.5)
raises("dpprof.privacy.noise_multiplier: unknown key 'noise_multiplier'", privacy.noise_multiplier,
       {epsilon = 1, delta = 1e-5, sample_rate = 0.01, steps = 10, noise_multiplier = 1})
raises("missing key 'epsilon'", privacy.noise_multiplier,
       {delta = 1e-5, sample_rate = 0.01, steps = 10})
raises("is out of reach", privacy.noise_multiplier,
       {epsilon = 0.01, delta = 1e-5, sample_rate = 1, steps = 100000})

-- Errors point at the calling line of the script.
local ok, msg = pcall(function()
  privacy.epsilon{sample_rate = 0.01, noise_multiplier = 1, steps = 10}
end)
assert(not ok and string.find(msg, "test_privacy.lua:%d+: dpprof.privacy.epsilon: missing key .delta."), msg)

print("test_privacy.lua: ok")
