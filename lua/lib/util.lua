-- util: small table helpers and var converters for gpush scripts.  local util = require("util")
local M = {}

-- contains(list, v): whether list holds v.
function M.contains(list, v)
  for _, x in ipairs(list or {}) do
    if x == v then return true end
  end
  return false
end

-- map(list, fn): a new list of fn(x).
function M.map(list, fn)
  local out = {}
  for i, x in ipairs(list or {}) do out[i] = fn(x) end
  return out
end

-- filter(list, fn): the elements for which fn(x) is true.
function M.filter(list, fn)
  local out = {}
  for _, x in ipairs(list or {}) do
    if fn(x) then out[#out + 1] = x end
  end
  return out
end

-- pluck(list, key): the key field of every element ({0, 1} from gpus and "index").
function M.pluck(list, key)
  return M.map(list, function(x) return x[key] end)
end

-- sum(list, [key]): the sum of the numbers, or of a field of each element.
function M.sum(list, key)
  local s = 0
  for _, x in ipairs(list or {}) do
    if key then s = s + (x[key] or 0) else s = s + x end
  end
  return s
end

-- keys(t): the table's keys, sorted.
function M.keys(t)
  local out = {}
  for k in pairs(t or {}) do out[#out + 1] = k end
  table.sort(out, function(a, b) return tostring(a) < tostring(b) end)
  return out
end

-- group_by(list, key): {value = {elements with that value}}.
function M.group_by(list, key)
  local out = {}
  for _, x in ipairs(list or {}) do
    local k = x[key]
    if k ~= nil then
      out[k] = out[k] or {}
      table.insert(out[k], x)
    end
  end
  return out
end

-- mib(n): "512 MiB", "10.6 GiB"; "?" for unknown (-1).
function M.mib(n)
  if n == nil or n < 0 then return "?" end
  if n >= 1024 then return string.format("%.1f GiB", n / 1024) end
  return string.format("%d MiB", n)
end

-- The converters below read a var that may arrive as a string (a host var of
-- an inventory, a var the script does not declare); declared vars come
-- already converted, and pass through unchanged. nil stays nil, so that
-- `util.duration(vars.grace) or 5` works; an empty or malformed value is an
-- error (raised at the caller), never "all" or a truthy string.

local function trim(s) return (string.gsub(s, "^%s*(.-)%s*$", "%1")) end

-- list(v): a list from a list, "a,b", a JSON list '["a","b"]' or one value.
function M.list(v)
  if v == nil then return nil end
  local t = type(v)
  if t == "table" then
    if next(v) == nil then error("empty list; leave it out instead", 2) end
    return v
  end
  if t == "number" or t == "boolean" then return {v} end
  if t ~= "string" then error("want a list, got a " .. t, 2) end
  local s = trim(v)
  if s == "" then error("empty list; leave it out instead", 2) end
  if string.sub(s, 1, 1) == "[" then
    local ok, out = pcall(json.decode, s)
    if not ok or type(out) ~= "table" then error(string.format("%q is not a JSON list", v), 2) end
    if next(out) == nil then error("empty list; leave it out instead", 2) end
    return out
  end
  local out = {}
  for item in string.gmatch(s .. ",", "([^,]*),") do
    item = trim(item)
    if item == "" then error(string.format("%q: item %d is empty", v, #out + 1), 2) end
    out[#out + 1] = item
  end
  return out
end

local truth = {["true"] = true, yes = true, on = true, ["1"] = true,
               ["false"] = false, no = false, off = false, ["0"] = false}

-- bool(v): true/false from a boolean, true/false, yes/no, on/off, 1/0.
function M.bool(v)
  if v == nil or type(v) == "boolean" then return v end
  local b = truth[string.lower(trim(tostring(v)))]
  if b == nil then error(string.format("%q is not a bool: want true/false, yes/no, on/off or 1/0", tostring(v)), 2) end
  return b
end

local units = {ns = 1e-9, us = 1e-6, ["\194\181s"] = 1e-6, ms = 1e-3, s = 1, m = 60, h = 3600}

-- duration(v): seconds, from a number of seconds, "90", "5s", "1m30s", "500ms".
function M.duration(v)
  if v == nil then return nil end
  local n = v
  if type(v) == "string" then
    local s = trim(v)
    n = tonumber(s)
    if n == nil then
      if s == "" then error("empty duration; leave it out instead", 2) end
      n = 0
      local pos = 1
      while pos <= #s do
        local a, b, num, unit = string.find(s, "^(%d*%.?%d*)([%a\194\181]+)", pos)
        local f = a and tonumber(num)
        if f == nil or units[unit] == nil then
          error(string.format("%q is not a duration like \"5s\", \"1m30s\" or a number of seconds", v), 2)
        end
        n = n + f * units[unit]
        pos = b + 1
      end
    end
  end
  if type(n) ~= "number" or n ~= n or n < 0 or n == math.huge then
    error(string.format("%s is not a duration: want a number of seconds >= 0 or a string like \"5s\"", tostring(v)), 2)
  end
  return n
end

return M
