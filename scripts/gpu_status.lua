-- Fleet table of GPUs: state, memory used/total, why a GPU is not free, who holds it.
--
-- Read-only. One row per GPU the host has (also those nvidia-smi does not
-- list: their memory is unknown): host, index, name, state (free, held,
-- memory-held, protected, suspicious, unknown), used/total MiB, the holders
-- (each {pid, user, comm, owner, mem_mib, where, label}; the table shows
-- the labels, "pid user comm* MEM (where)": "*" after those owning memory,
-- MEM their memory on that GPU, where their unit, container or pod); and the
-- reason when not free. Every host's rows are gathered into one fleet table.
--
-- vars: none
--
-- example: gpush run gpu_status.lua -i ct129 --limit 'gpu[01-04]'
local util = require("util")
local snap = gpu.snapshot()
if not snap.smi then
  log.warn("nvidia-smi unavailable: %s", table.concat(snap.warnings, "; "))
end

-- Each holder on each GPU's row with its memory on that GPU, not its total: an object (--json keeps
-- every field) whose label is what the table shows.
local by = {}
for _, h in ipairs(snap.holders) do
  for _, g in ipairs(h.gpus) do
    local mib = h.mem_by_gpu[g] or 0
    local label = string.format("%d %s %s%s", h.pid, h.user or "?", h.comm or "?", h.owner and "*" or "")
    if mib > 0 then label = label .. " " .. util.mib(mib) end
    if h.where ~= nil then label = label .. " (" .. h.where .. ")" end
    by[g] = by[g] or {}
    table.insert(by[g], {pid = h.pid, user = h.user, comm = h.comm, owner = h.owner, mem_mib = mib,
      where = h.where, label = label})
  end
end

local status = util.index_by(snap.status, "index")
local rows = {}
for _, g in ipairs(snap.gpus) do
  local st = status[g.index] or {}
  rows[#rows + 1] = {
    gpu = g.index,
    name = g.name,
    state = st.state or "?",
    used_mib = g.used_mib,
    total_mib = g.total_mib,
    holders = by[g.index] or {},
    reason = st.reason or "",
  }
end
return rows
