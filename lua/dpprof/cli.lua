-- dpprof.cli: subcommands of the dpprof binary that are written in Lua. Each takes the list of
-- its arguments and returns the process exit status.
local cli = {}

return cli
