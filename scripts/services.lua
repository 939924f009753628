-- module: the service stops of free_gpus.lua: which units to stop, stopping them, which GPUs to wait for.
--
-- choose(services, o) -> the units to stop, and held_by (a unit's full name ->
-- the GPUs its workers hold, from one look before any stop). o: gpus (only
-- units holding one of them), users (only units running their GPU processes),
-- named (the command line named the services: stop them all).
-- stop(units, held_by, o) stops them in one call (o.gpus: the GPUs to free, for
-- the warnings) and returns the GPUs whose release is worth waiting for; it
-- fails the host on a unit systemd does not know or a stop that failed.
local util = require("util")
local M = {}
-- systemd's name for a unit as given: "x" is x.service, as systemctl reads it.
local unit_types = {service = 1, socket = 1, device = 1, mount = 1, automount = 1, swap = 1, target = 1,
  path = 1, timer = 1, slice = 1, scope = 1}
local function full_name(u)
  local suffix = u:match("%.(%w+)$")
  return (suffix and unit_types[suffix]) and u or u .. ".service"
end

function M.choose(services, o)
  local chosen = {}
  for _, g in ipairs(o.gpus or {}) do chosen[g] = true end
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
  if o.gpus and #services > 0 and not o.named then
    local keep, spared = {}, {}
    for _, s in ipairs(services) do
      local on = false
      for g in pairs(held_by[full_name(s)] or {}) do on = on or chosen[g] == true end
      table.insert(on and keep or spared, s)
    end
    if #spared > 0 then
      log.info("not stopping %s: holds none of GPU %s (name it with -e services= to stop it)",
        table.concat(spared, ", "), table.concat(o.gpus, ", "))
    end
    services = keep
  end
  -- Freeing some users' processes stops only the units where their workers run.
  if o.users and #services > 0 and not o.named then
    local theirs = {}
    for _, h in ipairs(gpu.holders{units = util.map(services, full_name), users = o.users, shared = false}) do
      theirs[h.unit] = true
    end
    local keep, spared = {}, {}
    for _, s in ipairs(services) do table.insert(theirs[full_name(s)] and keep or spared, s) end
    if #spared > 0 then
      log.info("not stopping %s: no GPU process of users=%s runs in it (name it with -e services= to stop it)",
        table.concat(spared, ", "), table.concat(o.users, ","))
    end
    services = keep
  end
  return services, held_by
end

function M.stop(services, held_by, o)
  local chosen = {}
  for _, g in ipairs(o.gpus or {}) do chosen[g] = true end
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
        if o.gpus and not mine then
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
  return util.filter(util.keys(held), function(g) return not leftover[g] end)
end

return M
