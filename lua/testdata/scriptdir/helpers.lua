-- a module next to the script, found by require("helpers")
local M = {}
function M.double(x) return 2 * x end
return M
