-- scripts/options_doc.lua: writes the options table of docs/lua.md from the one schema
-- (common/options_schema.h, through dpprof.options.markdown), between the lines
-- "<!-- options:begin -->" and "<!-- options:end -->". tests/lua/test_options.lua checks the page
-- holds what this writes.
--   usage: build/dpprof run scripts/options_doc.lua [doc=docs/lua.md]
local dp = require("dpprof")
local options = require("dpprof.options")
local root = arg[0]:match("(.*/)") .. "../"
local path = dp.args and dp.args.doc or root .. "docs/lua.md"
local text = assert(dp.read_file(path))
local BEGIN, END = "<!-- options:begin -->\n", "<!-- options:end -->"
local b1, b2 = text:find(BEGIN, 1, true)
local e1 = b2 and text:find(END, b2, true)
if not e1 then error(path .. ": no <!-- options:begin --> ... <!-- options:end --> lines", 0) end
local head, tail = text:sub(1, b2), text:sub(e1)
local out = head .. "\n" .. options.markdown() .. "\n" .. tail
if out == text then print(path .. ": up to date") return end
assert(dp.write_file(path, out))
print(path .. ": options table written")
