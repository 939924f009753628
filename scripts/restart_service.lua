-- Restart a GPU service cleanly: stop it, free its GPUs, start it, wait until it holds them.
--
-- Stops the unit, waits for the GPUs its workers held, frees them in stages as
-- free_gpus.lua does (so that the new instance does not start on half-freed
-- GPUs), starts the unit, then polls until a process of the unit owns a GPU
-- again (gpu.wait_held). Fails when the unit does not exist, a GPU cannot be freed, the unit
-- will not start, or it holds no GPU in time.
--
-- vars:
-- @var service string the systemd unit
-- @var start_timeout duration how long to wait for the unit to hold a GPU (default: 120s)
-- @var gpus intlist? GPU indices to free; leave it out for every GPU
-- @var grace duration TERM -> KILL grace period (default: 5s)
-- @var timeout duration wait for release after each stage of kills (default: 15s)
-- @var force bool also kill protected and suspicious holders (default: false)
--
-- example: gpush run restart_service.lua -i ct129 -e service=sglang-qwen.service
local util = require("util")
local unit = vars.service -- required: gpush refuses the run without it

local held = util.uniq(util.pluck(gpu.by_gpu(gpu.holders{units = {unit}, owner = true}), "gpu"))
local s = systemd.stop(unit)
if s.load_state == "not-found" or not s.ok and #s.rows == 0 then
  fail("stop %s: %s", unit, s.reason or s.active_state or "failed")
end
if #held > 0 and #s.rows == 0 and not check then gpu.wait_free{gpus = held, timeout = "10s"} end
local r = gpu.free{gpus = vars.gpus, grace = vars.grace, timeout = vars.timeout, force = vars.force}
if not r.ok then fail("not restarting %s: %s", unit, r.reason, r.rows) end
if check then
  log.info("would start %s", unit)
  return {service = unit, freed = #r.rows, started = false, would = true}
end

s = systemd.start(unit)
if not s.ok then fail("start %s: %s", unit, s.reason or s.active_state or "failed") end
log.info("started %s (main pid %d)", unit, s.main_pid or 0)

-- The helper watches the GPUs: the wait ends when a worker of the unit owns one.
local w = gpu.wait_held{unit = unit, gpus = vars.gpus, timeout = vars.start_timeout}
if not w.ok then fail("%s started but %s", unit, w.reason) end
log.info("%s holds GPUs again after %.1fs", unit, w.elapsed)
return {service = unit, freed = #r.rows, started = true, holders = #util.uniq(util.pluck(w.rows, "pid")),
  waited_s = math.floor(w.elapsed)}
