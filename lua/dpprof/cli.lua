-- dpprof.cli: subcommands of the dpprof binary that are written in Lua. Each takes the list of
-- its arguments and returns the process exit status. This module only dispatches: each command
-- is a module of its own (dpprof.cli_compare, cli_data, cli_fit, cli_risk, cli_sweep; their shared helpers
-- in dpprof.cli_util), whose public names are this table's.
local compare = require("dpprof.cli_compare")
local fit = require("dpprof.cli_fit")
local risk = require("dpprof.cli_risk")
local data = require("dpprof.cli_data")
local sweep = require("dpprof.cli_sweep")
local calibrate = require("dpprof.calibrate")

local cli = {}

-- dpprof compare BASE NEW [--memory R] [--time R|off] [--threshold R]
cli.compare = compare.compare
cli.MIN_TIME_SAMPLES = compare.MIN_TIME_SAMPLES

-- dpprof fit key=value ...
cli.fit = fit.fit
cli.fit_usage = fit.fit_usage
cli.FIT_MODEL_KEYS = fit.FIT_MODEL_KEYS

-- dpprof risk key=value ...
cli.risk = risk.risk
cli.risk_usage = risk.risk_usage
cli.risk_document = risk.risk_document
cli.RISK_KEYS = risk.RISK_KEYS

-- dpprof data FILE key=value ...
cli.data = data.data
cli.data_usage = data.data_usage
cli.DATA_KEYS = data.DATA_KEYS

-- dpprof sweep submit | status | collect | task
cli.sweep = sweep.sweep

-- dpprof calibrate [--device cpu|cuda] [--out FILE.json] [--quick] [RESULTS...] (dpprof.calibrate)
function cli.calibrate(args) return calibrate.main(args) end

return cli
