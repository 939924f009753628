-- util: list helpers, var converters and formats for gpush scripts (Lua 5.1).
--
--   local util = require("util")
--
-- Lists (a nil list reads as empty; the input is never changed):
--   util.contains(list, v)           whether list holds v
--   util.map(list, fn)               {fn(x), ...}
--   util.filter(list, fn)            the x for which fn(x) is true
--   util.pluck(list, key)            {x[key], ...}
--   util.sum(list, [key])            the sum of the numbers, or of x[key]
--   util.count(list, [key|fn])       #list, or {value = how many} by x[key] or fn(x)
--   util.uniq(list, [key|fn])        first of each value, in order
--   util.sort_by(list, key|fn, [desc])  a sorted copy (stable; numbers before strings, nil last)
--   util.group_by(list, key|fn)      {value = {x, ...}} (x whose value is nil left out)
--   util.index_by(list, key|fn)      {value = x} (the last x of each value)
--   util.join(list, [sep])           "0,2": tostring of each, sep default ","
-- Tables:
--   util.keys(t)                     the keys, sorted
--   util.values(t)                   the values, in the order of their sorted keys
-- Vars (a var may arrive as a string: an inventory host var, an undeclared -e):
--   util.list(v)                     a list from a list, "a,b", '["a","b"]' or one value
--   util.bool(v)                     Ansible's truthiness: true/yes/on/y/t/1 and
--                                    false/no/off/n/f/0 (any case); in Lua the string
--                                    "no" is true, so test util.bool(vars.x), not vars.x
--   util.duration(v)                 seconds from 90, "90", "1m30s", "500ms", "2d"
-- nil stays nil (util.duration(vars.grace) or 5); an empty or malformed value raises an
-- error at the caller, never "all" or a truthy string.
-- Formats:
--   util.format_duration(s)          90 -> "1m30s", 7260 -> "2h1m", 0.25 -> "250ms"
--   util.mib(n)                      "512 MiB", "10.6 GiB", "?" for unknown (-1)
local M = {}

-- by turns a key or a function into a function of an element.
local function by(k)
  if type(k) == "function" then return k end
  return function(x) return x[k] end
end

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

-- before orders values of mixed types: numbers (numerically), then
-- strings, then the rest by their text; nil last.
local function before(a, b)
  if a == nil or b == nil then return a ~= nil and b == nil end
  local ta, tb = type(a), type(b)
  if ta == tb and (ta == "number" or ta == "string") then return a < b end
  if ta == "number" then return true end
  if tb == "number" then return false end
  if ta == "string" then return true end
  if tb == "string" then return false end
  return tostring(a) < tostring(b)
end

-- keys(t): the table's keys, sorted (numbers before strings).
function M.keys(t)
  local out = {}
  for k in pairs(t or {}) do out[#out + 1] = k end
  table.sort(out, before)
  return out
end

-- values(t): the values, in the order of their sorted keys.
function M.values(t)
  local out = {}
  for i, k in ipairs(M.keys(t)) do out[i] = t[k] end
  return out
end

-- group_by(list, key|fn): {value = {elements with that value}}.
function M.group_by(list, key)
  local f, out = by(key), {}
  for _, x in ipairs(list or {}) do
    local k = f(x)
    if k ~= nil then
      out[k] = out[k] or {}
      table.insert(out[k], x)
    end
  end
  return out
end

-- index_by(list, key|fn): {value = element} (the last one of each value).
function M.index_by(list, key)
  local f, out = by(key), {}
  for _, x in ipairs(list or {}) do
    local k = f(x)
    if k ~= nil then out[k] = x end
  end
  return out
end

-- count(list, [key|fn]): how many elements, or {value = how many}.
function M.count(list, key)
  if key == nil then return #(list or {}) end
  local f, out = by(key), {}
  for _, x in ipairs(list or {}) do
    local k = f(x)
    if k ~= nil then out[k] = (out[k] or 0) + 1 end
  end
  return out
end

-- uniq(list, [key|fn]): the first element of each value, in order.
function M.uniq(list, key)
  local f = key and by(key) or function(x) return x end
  local seen, out = {}, {}
  for _, x in ipairs(list or {}) do
    local k = f(x)
    if k == nil then k = seen end -- nil values are one value
    if not seen[k] then
      seen[k] = true
      out[#out + 1] = x
    end
  end
  return out
end

-- sort_by(list, key|fn, [desc]): a sorted copy; equal values keep their order.
function M.sort_by(list, key, desc)
  local f, tagged = by(key), {}
  for i, x in ipairs(list or {}) do tagged[i] = {v = f(x), i = i, x = x} end
  table.sort(tagged, function(a, b)
    if (a.v == nil) ~= (b.v == nil) then return b.v == nil end -- nil last, either way
    if desc then
      if before(b.v, a.v) then return true end
      if before(a.v, b.v) then return false end
    else
      if before(a.v, b.v) then return true end
      if before(b.v, a.v) then return false end
    end
    return a.i < b.i
  end)
  local out = {}
  for i, t in ipairs(tagged) do out[i] = t.x end
  return out
end

-- join(list, [sep]): tostring of each element joined ("0,2").
function M.join(list, sep)
  return table.concat(M.map(list, tostring), sep or ",")
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

-- Ansible's booleans (module_utils.parsing.convert_bool, strict), after
-- lower-casing and trimming.
local truth = {["true"] = true, yes = true, on = true, y = true, t = true, ["1"] = true,
               ["false"] = false, no = false, off = false, n = false, f = false, ["0"] = false}

-- bool(v): true/false from a boolean, true/false, yes/no, on/off, y/n, t/f, 1/0.
function M.bool(v)
  if v == nil or type(v) == "boolean" then return v end
  local b = truth[string.lower(trim(tostring(v)))]
  if b == nil then error(string.format("%q is not a bool: want true/false, yes/no, on/off, y/n or 1/0", tostring(v)), 2) end
  return b
end

local units = {ns = 1e-9, us = 1e-6, ["\194\181s"] = 1e-6, ms = 1e-3, s = 1, m = 60, h = 3600, d = 86400}

-- duration(v): seconds, from a number of seconds, "90", "5s", "1m30s", "500ms", "2d".
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

-- format_duration(s): a number of seconds as "1m30s", "2h1m", "3d4h", "45s"
-- or "250ms": the two largest units, whole; util.duration reads it back.
function M.format_duration(s)
  if type(s) ~= "number" or s ~= s or s < 0 or s == math.huge then
    error(string.format("%s is not a number of seconds >= 0", tostring(s)), 2)
  end
  if s < 1 then
    if s == 0 then return "0s" end
    return string.format("%dms", math.floor(s * 1000 + 0.5))
  end
  s = math.floor(s)
  local parts = {}
  for _, u in ipairs{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}} do
    local n = math.floor(s / u[2])
    if n > 0 or #parts > 0 then
      if n > 0 then parts[#parts + 1] = n .. u[1] end
      s = s - n * u[2]
      if #parts == 2 or #parts > 0 and n == 0 then break end
    end
  end
  return table.concat(parts)
end

return M
