-- assert: the helpers Lua test files use. Each failure raises an error at the
-- caller's line, which the Go harness reports as the subtest's failure.
local M = {}

local function show(v, depth)
  depth = depth or 0
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) ~= "table" then return tostring(v) end
  if depth > 3 then return "{...}" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = "[" .. show(k) .. "]=" .. show(v[k], depth + 1)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
M.show = show

local function deep_eq(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do
    if not deep_eq(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end
M.deep_eq = deep_eq

local function where(msg)
  if msg then return ": " .. msg end
  return ""
end

function M.eq(got, want, msg)
  if not deep_eq(got, want) then
    error("not equal" .. where(msg) .. "\n  got:  " .. show(got) .. "\n  want: " .. show(want), 3)
  end
end

function M.ne(got, other, msg)
  if deep_eq(got, other) then
    error("should differ" .. where(msg) .. ": both " .. show(got), 3)
  end
end

function M.truthy(v, msg)
  if not v then error("want a true value" .. where(msg) .. ", got " .. show(v), 3) end
  return v
end

function M.falsy(v, msg)
  if v then error("want a false value" .. where(msg) .. ", got " .. show(v), 3) end
end

function M.match(s, pattern, msg)
  if type(s) ~= "string" or not string.find(s, pattern) then
    error("no match for " .. show(pattern) .. where(msg) .. " in " .. show(s), 3)
  end
end

-- error(fn, pattern): fn must raise an error whose message matches pattern
-- (a plain substring); returns the message.
function M.error(fn, pattern, msg)
  local ok, err = pcall(fn)
  if ok then error("want an error" .. where(msg) .. ", got none", 3) end
  err = tostring(err)
  if pattern and not string.find(err, pattern, 1, true) then
    error("error " .. show(err) .. " does not contain " .. show(pattern) .. where(msg), 3)
  end
  return err
end

function M.len(t, n, msg)
  if #t ~= n then error("want length " .. n .. where(msg) .. ", got " .. #t .. ": " .. show(t), 3) end
end

return M
