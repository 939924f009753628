-- Free the host's GPUs: stop services, wait, kill leftover holders, verify baseline.
--
-- What operators do by hand after a serving job dies: stop the GPU services,
-- wait for the driver to release the memory, find whatever still holds a GPU
-- (orphaned workers included), TERM it, wait, KILL survivors, then check that
-- every GPU is back at its idle baseline. Returns one row per GPU saying what
-- freed it (already-free / service-stop / kill) or why it is not free
-- (not-freed: D state, new-holder, protected holder, memory-held). The host
-- fails when a GPU is not free. Under --check nothing is stopped or killed.
--
-- vars:
--   services         systemd units to stop first (list or "a.service,b.service"; default none)
--   release_timeout  wait for release after the stops (default "10s")
--   grace            TERM -> KILL grace period (default "5s")
--   verify_timeout   wait for release after the kills (default "15s")
--   gpus             GPU indices to free (default all)
--   threshold_mib    used MiB that counts as free (default: the idle baseline)
--   group            also signal each holder's process group (default false)
--   force            also signal protected processes (default false)
--
-- example: gpush run free_gpus.lua -i ct129 -e services=sglang-qwen.service -e grace=10s
local gpufree = require("gpufree")

local rows, failures = gpufree.free{
  services = vars.services,
  release_timeout = vars.release_timeout,
  grace = vars.grace,
  verify_timeout = vars.verify_timeout,
  gpus = vars.gpus,
  threshold_mib = vars.threshold_mib,
  group = vars.group,
  force = vars.force,
}

for _, r in ipairs(rows) do
  if r.freed then
    log.info("GPU %d free (%s): %d -> %d MiB", r.gpu, r.step, r.before_mib, r.after_mib)
  elseif r.step ~= "not-freed" then
    log.info("GPU %d %s: %s", r.gpu, r.step, r.holders)
  else
    log.error("GPU %d not freed: %s", r.gpu, r.reason)
  end
end
if #failures > 0 then
  fail("%d GPU(s) not freed: %s", #failures, table.concat(failures, "; "))
end
return rows
