-- Fleet table of GPUs: memory used/total and who holds each GPU.
--
-- Read-only. One row per GPU: host, index, name, used/total MiB and the
-- holders as "pid user comm (unit)". Every host's rows are gathered into one
-- table for the fleet.
--
-- vars: none
--
-- example: gpush run gpu_status.lua -i ct129 --limit 'gpu[01-04]'
local snap = gpu.snapshot()
if not snap.smi then
  log.warn("nvidia-smi unavailable: %s", table.concat(snap.warnings or {}, "; "))
end

local by = {}
for _, h in ipairs(snap.holders or {}) do
  for _, g in ipairs(h.gpus or {}) do
    by[g] = by[g] or {}
    local who = string.format("%d %s %s", h.pid, h.user or "?", h.comm or "?")
    local owner = (h.unit ~= nil and h.unit ~= "") and h.unit or h.container
    if owner ~= nil and owner ~= "" then who = who .. " (" .. owner .. ")" end
    table.insert(by[g], who)
  end
end

local rows = {}
for _, g in ipairs(snap.gpus or {}) do
  rows[#rows + 1] = {
    gpu = g.index,
    name = g.name,
    used_mib = g.used_mib,
    total_mib = g.total_mib,
    holders = table.concat(by[g.index] or {}, ", "),
  }
end
return rows
