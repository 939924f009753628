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
local services = require("services")
local units, held_by = services.choose(vars.services or {},
  {gpus = vars.gpus, users = vars.users, named = vars_from.services == "-e"})
local release = services.stop(units, held_by, {gpus = vars.gpus})
-- Give the stopped services' GPUs time to free before any kill (not where a leftover holds one).
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
