-- Who holds which GPU: process, user, unit or container, owner or monitor, memory, age.
--
-- Read-only. One row per process that has an NVIDIA device open (found in
-- /proc, so orphaned workers nvidia-smi does not list are included), with the
-- unit or container it belongs to, whether it owns memory or a compute context
-- ("owner", what a free kills first) or only has the device open ("monitor"),
-- and how long it has run. Holders of only nvidiactl/nvidia-uvm are listed with
-- gpus "-" unless shared=false.
--
-- vars:
-- @var shared bool list holders of only the shared devices too (default: true)
-- @var users list only these users
-- @var units list only these units (globs allowed)
-- @var owners bool only the owners (true) or only the monitors (false)
--
-- example: gpush run gpu_holders.lua -i ct129 -e shared=false
local function age(s)
  s = math.floor(s or 0)
  if s >= 86400 then return string.format("%dd%dh", s / 86400, (s % 86400) / 3600) end
  if s >= 3600 then return string.format("%dh%dm", s / 3600, (s % 3600) / 60) end
  if s >= 60 then return string.format("%dm%ds", s / 60, s % 60) end
  return string.format("%ds", s)
end

-- A filter given empty is an error in gpu.holders, never "everyone".
local rows = {}
for _, h in ipairs(gpu.holders{users = vars.users, units = vars.units, shared = vars.shared, owner = vars.owners}) do
  local gpus = {}
  for _, g in ipairs(h.gpus) do gpus[#gpus + 1] = tostring(g) end
  local kind = h.owner and "owner" or "monitor"
  if h.suspicious then kind = "suspicious" end
  rows[#rows + 1] = {
    pid = h.pid,
    ppid = h.ppid,
    user = h.user,
    comm = h.comm,
    gpus = #gpus > 0 and table.concat(gpus, ",") or "-",
    mem_mib = h.mem_mib,
    state = h.state,
    owner = h.unit or (h.container and "container " .. h.container) or "",
    kind = kind,
    age = age(h.age_s),
    protected = h.protected,
  }
end
return rows
