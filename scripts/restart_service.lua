-- Restart a GPU service cleanly: stop it, free its GPUs, start it, wait until it holds them.
--
-- Stops the unit, runs the free_gpus steps (wait, kill leftovers, verify
-- baseline) so the new instance does not start on half-freed GPUs, starts the
-- unit, then polls until a process of the unit holds a GPU again. Fails when
-- a GPU cannot be freed, the unit will not start, or it holds no GPU in time.
--
-- vars:
--   service          the systemd unit (required)
--   start_timeout    how long to wait for the unit to hold a GPU (default "120s")
--   release_timeout, grace, verify_timeout, gpus, force: as free_gpus.lua
--
-- example: gpush run restart_service.lua -i ct129 -e service=sglang-qwen.service
local gpufree = require("gpufree")

local unit = vars.service
if unit == nil or unit == "" then fail("vars.service is required (-e service=NAME.service)") end

local rows, failures = gpufree.free{
  services = {unit},
  release_timeout = vars.release_timeout,
  grace = vars.grace,
  verify_timeout = vars.verify_timeout,
  gpus = vars.gpus,
  force = vars.force,
}
if #failures > 0 then
  fail("not restarting %s: %s", unit, table.concat(failures, "; "))
end
if check then
  log.info("would start %s", unit)
  return {service = unit, freed = #rows, started = false, would = true}
end

local s = systemd.start(unit)
if not s.ok then fail("start %s: %s", unit, s.reason or s.active_state or "failed") end
log.info("started %s (main pid %d)", unit, s.main_pid or 0)

local timeout = tonumber(string.match(tostring(vars.start_timeout or "120s"), "^(%d+)s?$")) or 120
local waited = 0
while waited < timeout do
  local hs = gpu.holders{units = {unit}, shared = false}
  if #hs > 0 then
    log.info("%s holds GPUs again after %ds", unit, waited)
    return {service = unit, freed = #rows, started = true, holders = #hs, waited_s = waited}
  end
  sleep("1s")
  waited = waited + 1
end
fail("%s started but holds no GPU after %ds", unit, timeout)
