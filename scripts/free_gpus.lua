-- Free the host's GPUs: stop the services, wait for release, free in stages, verify.
--
-- Stage 1 kills only the processes that own GPU memory or a compute context;
-- stage 2, only where memory stays held, the other holders of that GPU (a
-- forked child keeping a dead parent's memory). Monitors (nvidia-smi, dcgm,
-- pynvml probes) are left alone; protected processes are never killed without
-- force. "freed" means nothing that would start the workers again is alive:
-- a unit with Restart=, a container's runtime, a Kubernetes pod, a Slurm job,
-- a supervisor process. Such a manager left alive fails the GPU, naming it and
-- the command that stops it, unless stop_restarters stops it first or
-- accept_restarters accepts it (the row then says so). Freed GPUs must stay
-- free for the settle, which covers the managers' known restart delays.
-- One row per GPU says which stage freed it, or why not; the host fails when
-- one is not freed, and keeps its rows in the fleet table.
-- Under --check nothing is stopped or killed: the rows and the log say what would be.
--
-- With gpus given, a service is stopped only if its processes hold one of
-- those GPUs (one look before any stop), and with users given, only if a GPU
-- process of those users runs in it, unless -e services= named it: what the
-- command line names is stopped. -e services=[] stops none. A list
-- naming a unit systemd does not know stops none of it and fails the host.
--
-- vars:
-- @var services list? systemd units to stop first; with gpus, only those holding one of them unless -e names them (empty: stop no unit)
-- @var gpus intlist? GPU indices to free; leave it out for every GPU
-- @var release_timeout duration wait for the services' GPUs after the stops (default: 10s)
-- @var grace duration TERM -> KILL grace period (default: 5s)
-- @var timeout duration wait for release after each stage of kills (default: 15s)
-- @var settle duration? how long freed GPUs must stay free while a manager may restart a worker; from the managers' restart delays when left out
-- @var threshold_mib int? used MiB that counts as free; the idle baseline when left out
-- @var force bool also kill protected and suspicious holders (default: false)
-- @var group bool also signal each holder's process group (default: false)
-- @var stop_restarters bool stop what would start the workers again (unit, container, Slurm job, supervisor tree) before the kills; never a Kubernetes pod (default: false)
-- @var accept_restarters bool a restarter left alive does not fail the GPU; the row notes it (default: false)
-- @var users list? only signal these users' processes (globs); leave it out for every user
--
-- example: gpush run free_gpus.lua -i ct129 -e services=sglang-qwen.service -e grace=10s
local util = require("util")
local services = vars.services or {}
-- systemd's name for a unit as given: "x" is x.service, as systemctl reads it.
local unit_types = {service = 1, socket = 1, device = 1, mount = 1, automount = 1, swap = 1, target = 1,
  path = 1, timer = 1, slice = 1, scope = 1}
local function full_name(u)
  local suffix = u:match("%.(%w+)$")
  return (suffix and unit_types[suffix]) and u or u .. ".service"
end
local chosen = {}
for _, g in ipairs(vars.gpus or {}) do chosen[g] = true end
-- One look before any stop, for every service at once (each holder's record names its unit).
local held_by = {} -- a unit's full name -> the GPUs its workers hold
if #services > 0 then
  for _, h in ipairs(gpu.by_gpu(gpu.holders{units = util.map(services, full_name), shared = false})) do
    held_by[h.unit] = held_by[h.unit] or {}
    if h.gpu then held_by[h.unit][h.gpu] = true end
  end
end
-- Freeing some GPUs stops only the units on them: a unit of the inventory's
-- list that holds other GPUs (or none) is not what was asked for.
if vars.gpus and #services > 0 and vars_from.services ~= "-e" then
  local keep, spared = {}, {}
  for _, s in ipairs(services) do
    local on = false
    for g in pairs(held_by[full_name(s)] or {}) do on = on or chosen[g] == true end
    table.insert(on and keep or spared, s)
  end
  if #spared > 0 then
    log.info("not stopping %s: holds none of GPU %s (name it with -e services= to stop it)",
      table.concat(spared, ", "), table.concat(vars.gpus, ", "))
  end
  services = keep
end
-- Freeing some users' processes stops only the units where their workers run.
if vars.users and #services > 0 and vars_from.services ~= "-e" then
  local theirs = {}
  for _, h in ipairs(gpu.holders{units = util.map(services, full_name), users = vars.users, shared = false}) do
    theirs[h.unit] = true
  end
  local keep, spared = {}, {}
  for _, s in ipairs(services) do table.insert(theirs[full_name(s)] and keep or spared, s) end
  if #spared > 0 then
    log.info("not stopping %s: no GPU process of users=%s runs in it (name it with -e services= to stop it)",
      table.concat(spared, ", "), table.concat(vars.users, ","))
  end
  services = keep
end
local held, leftover = {}, {} -- GPUs the stopped units' workers held; GPUs their leftovers still hold
for _, s in ipairs(services) do
  for g in pairs(held_by[full_name(s)] or {}) do held[g] = true end
end
-- One call stops them all; each result is that unit's own. A unit systemd
-- does not know stops none of them (nor would under --check).
local stops = #services > 0 and systemd.stop(services) or {}
local missing = {}
for _, s in ipairs(stops) do
  if s.missing then table.insert(missing, s.unit) end
end
if #missing > 0 then
  fail("stop: unit%s %s not found; no unit was stopped", #missing > 1 and "s" or "", table.concat(missing, ", "))
end
local failed
for i, s in ipairs(stops) do
  local unit = services[i]
  -- A stop that failed with nothing of the unit left is the unit's failure; leftovers (in its cgroup or
  -- holding its GPUs) are what the stages below free.
  if not s.ok and #s.rows == 0 and #s.holders == 0 then
    failed = failed or string.format("stop %s: %s", unit, s.reason or s.active_state or "failed")
  else
    for _, h in ipairs(s.holders) do
      local mine = false
      for _, g in ipairs(h.gpus) do
        leftover[g] = true
        mine = mine or chosen[g] == true
      end
      -- Said, not freed: only what holds a chosen GPU is killed.
      if vars.gpus and not mine then
        log.warn("%s left pid %d holding GPU %s, which is not among the GPUs to free: left alone", unit, h.pid,
          table.concat(h.gpus, ", "))
      end
    end
    if s.status == "would" then log.info("would stop %s", unit)
    elseif s.ok then log.info("stopped %s", unit)
    else log.warn("stopped %s; it left %d process(es) in its cgroup: %s", unit, #s.rows, s.reason) end
  end
end
if failed then fail("%s", failed) end
-- Wait for the release only where waiting can help: not where a leftover worker holds the GPU.
local release = util.filter(util.keys(held), function(g) return not leftover[g] end)
if #release > 0 and not check then
  gpu.wait_free{gpus = release, timeout = vars.release_timeout, settle = vars.settle, threshold_mib = vars.threshold_mib}
end

local r = gpu.free{gpus = vars.gpus, grace = vars.grace, timeout = vars.timeout, settle = vars.settle,
  threshold_mib = vars.threshold_mib, force = vars.force, group = vars.group,
  stop_restarters = vars.stop_restarters, accept_restarters = vars.accept_restarters, users = vars.users}
for _, row in ipairs(r.rows) do
  if row.step == "already-free" then log.info("GPU %d already free: %d MiB used", row.gpu, row.after_mib)
  elseif row.freed then log.info("GPU %d freed (%s): %d -> %d MiB%s%s", row.gpu, row.step, row.before_mib, row.after_mib,
      row.killed ~= "" and ", killed " .. row.killed or "", row.note and "; " .. row.note or "")
  elseif row.step == "would-kill" then log.info("GPU %d would kill %s: %s", row.gpu, row.killed, row.reason)
  elseif check and row.step == "by-stop" then log.info("GPU %d %s", row.gpu, row.reason)
  else log.error("GPU %d not freed: %s", row.gpu, row.reason) end
end
-- The rows go with the failure too: the fleet table shows which GPUs were freed and why the others were not.
if not r.ok then fail(r.reason, r.rows) end
return r.rows
