-- util: small table helpers for gpush scripts.  local util = require("util")
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

return M
