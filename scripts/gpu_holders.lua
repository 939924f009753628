-- Who holds which GPU: a row per process and GPU, its memory there, its unit, container or pod, owner or monitor, age.
--
-- Read-only. One row per process that has an NVIDIA device open (found in
-- /proc, so orphaned workers nvidia-smi does not list are included) and per
-- GPU it holds: mem_mib is its memory on that GPU (a worker on GPUs 0 and 2
-- has two rows, each with its own figure); where is its unit, container
-- ("docker vllm-web") or pod ("pod ml/trainer-7f9c"); manager is what would
-- start it again, the outermost of its chain that restarts (an object:
-- kind, label, restarts, stop, ...; the table shows its label, "unit
-- sglang.service", "pod ml/trainer-7f9c", "slurm job 4711", "pid 880
-- (torchrun)"); kind is owner (owns
-- memory or a compute context: what a free kills first), monitor (only has
-- the device open) or suspicious; age is how long it has run. Holders of
-- only nvidiactl/nvidia-uvm are one row with gpu "-" unless shared=false.
--
-- vars:
-- @var shared bool list holders of only the shared devices too (default: true)
-- @var users list? only these users; every user when left out
-- @var exclude_users list? everyone but these users; nobody excluded when left out
-- @var units list? only these units (globs allowed); every unit when left out
-- @var owners bool? only the owners (true) or only the monitors (false)
-- @var containers bool? only processes in containers (true) or only those outside (false)
-- @var min_age duration? only processes that have run longer than this; any age when left out
--
-- example: gpush run gpu_holders.lua -i ct129 -e shared=false -e min_age=10m
local util = require("util")
-- A filter given empty is an error in gpu.holders, never "everyone".
local exclude = {users = vars.exclude_users, containers = vars.containers == false or nil}
local rows = {}
for _, h in ipairs(gpu.holders{users = vars.users, units = vars.units, shared = vars.shared, owner = vars.owners,
    containers = vars.containers or nil, min_age = vars.min_age, exclude = next(exclude) and exclude or nil, per_gpu = true}) do
  rows[#rows + 1] = {
    gpu = h.gpu or "-",
    pid = h.pid,
    ppid = h.ppid,
    user = h.user,
    comm = h.comm,
    mem_mib = h.mem_mib,
    state = h.state,
    where = h.where or "",
    manager = h.manager,
    kind = h.suspicious and "suspicious" or h.owner and "owner" or "monitor",
    age = util.format_duration(h.age_s or 0),
    protected = h.protected,
  }
end
return rows
