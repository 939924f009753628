-- Who holds which GPU: process, user, systemd unit or container, memory, age.
--
-- Read-only. One row per process that has an NVIDIA device open (found in
-- /proc, so orphaned workers nvidia-smi does not list are included), with the
-- unit or container it belongs to and how long it has run. Holders of only
-- nvidiactl/nvidia-uvm are listed with gpus "-" unless shared=false.
--
-- vars:
--   shared  list holders of only the shared devices too (default true)
--   users   only these users (list or "alice,bob")
--   units   only these units (globs allowed)
--
-- example: gpush run gpu_holders.lua -i ct129 -e shared=false
local function list(v)
  if v == nil or v == "" then return nil end
  if type(v) == "table" then return v end
  local out = {}
  for item in string.gmatch(tostring(v), "[^,%s]+") do out[#out + 1] = item end
  return out
end

local filter = {users = list(vars.users), units = list(vars.units)}
if vars.shared == false or vars.shared == "false" or vars.shared == "no" then
  filter.shared = false
end

local function age(s)
  s = math.floor(s or 0)
  if s >= 86400 then return string.format("%dd%dh", s / 86400, (s % 86400) / 3600) end
  if s >= 3600 then return string.format("%dh%dm", s / 3600, (s % 3600) / 60) end
  if s >= 60 then return string.format("%dm%ds", s / 60, s % 60) end
  return string.format("%ds", s)
end

local rows = {}
for _, h in ipairs(gpu.holders(filter)) do
  local gpus = {}
  for _, g in ipairs(h.gpus or {}) do gpus[#gpus + 1] = tostring(g) end
  local owner = ""
  if h.unit ~= nil and h.unit ~= "" then
    owner = h.unit
  elseif h.container ~= nil and h.container ~= "" then
    owner = "container " .. h.container
  end
  rows[#rows + 1] = {
    pid = h.pid,
    ppid = h.ppid,
    user = h.user,
    comm = h.comm,
    gpus = #gpus > 0 and table.concat(gpus, ",") or "-",
    mem_mib = h.mem_mib,
    state = h.state,
    owner = owner,
    age = age(h.age_s),
    protected = h.protected,
  }
end
return rows
