-- gpu.holders: exclude, min_age, containers, pids, per_gpu
local ctr = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
local a = fake.add_holder{mem = {[0] = 1000, [2] = 3000}, user = "alice", unit = "sglang.service", age_s = 7200}
local b = fake.add_holder{mem = {[1] = 2000}, user = "bob", age_s = 30}
local c = fake.add_holder{mem = {[1] = 500}, user = "carol", container = ctr, runtime = "containerd",
  container_name = "worker", pod = "trainer-7f9c", namespace = "ml", pod_uid = "2f0c7e5c-8e2a-4e73-8f0d-94d2e3b3d8a1",
  age_s = 900}
local d = fake.add_holder{gpus = {0}, user = "root", comm = "nvitop", monitor = true, age_s = 5}

local function pids(list)
  local out = {}
  for _, h in ipairs(list) do out[#out + 1] = h.pid end
  return out
end

-- exclude takes the filter's own list keys; a holder matching any of them is dropped
assert.eq(pids(gpu.holders{exclude = {users = {"alice"}}}), {b, c, d}, "everyone but alice")
assert.eq(pids(gpu.holders{exclude = {users = "alice", units = "x*"}}), {b, c, d})
assert.eq(pids(gpu.holders{exclude = {users = {"bob"}, pids = {d}}}), {a, c}, "either key drops")
assert.eq(pids(gpu.holders{gpus = {1}, exclude = {users = {"bob"}}}), {c}, "include and exclude together")
assert.eq(pids(gpu.holders{exclude = {units = {"sglang*"}}}), {b, c, d}, "holders in no unit are not excluded by units")
assert.eq(pids(gpu.holders{exclude = {containers = true}}), {a, b, d}, "outside containers")
assert.eq(pids(gpu.holders{exclude = {gpus = {1}}}), {a, d})
assert.eq(pids(gpu.holders{pids = {b, d}}), {b, d})
assert.error(function() gpu.holders{exclude = {owner = true}} end, "gpu.holders: exclude: unknown option owner")
assert.error(function() gpu.holders{exclude = {min_age = "1m"}} end, "exclude: unknown option min_age")
assert.error(function() gpu.holders{exclude = {users = {}}} end, "exclude: option users: empty list")
assert.error(function() gpu.holders{exclude = "alice"} end, "option exclude: want a table")

-- min_age: started longer ago than that (a duration string or seconds)
assert.eq(pids(gpu.holders{min_age = "10m"}), {a, c})
assert.eq(pids(gpu.holders{min_age = 600}), {a, c})
assert.eq(pids(gpu.holders{min_age = "1h30m"}), {a})
assert.eq(pids(gpu.holders{min_age = "1m", exclude = {users = "carol"}}), {a})
assert.error(function() gpu.holders{min_age = "soon"} end, "option min_age")
assert.error(function() gpu.holders{min_age = -5} end, "option min_age")

-- containers: any, or by short id, full id, name, pod, namespace/pod, pod uid (globs)
assert.eq(pids(gpu.holders{containers = true}), {c})
for _, key in ipairs{"3f4e5d6c7b8a", ctr, "worker", "trainer-*", "ml/trainer-7f9c", "2f0c7e5c-*"} do
  assert.eq(pids(gpu.holders{containers = {key}}), {c}, key)
end
assert.eq(gpu.holders{containers = {"nosuch"}}, {})
assert.error(function() gpu.holders{containers = {}} end, "option containers: empty list")
assert.error(function() gpu.holders{containers = false} end, "exclude={containers=true}")

local h = gpu.holders{containers = true}[1]
assert.eq({h.container, h.container_id, h.runtime, h.container_name, h.pod, h.namespace, h.unit, h.where},
  {"3f4e5d6c7b8a", ctr, "containerd", "worker", "trainer-7f9c", "ml", nil, "pod ml/trainer-7f9c"})
assert.eq(gpu.holders{pids = a}[1].where, "sglang.service")
assert.eq(gpu.holders{pids = b}[1].where, nil)

-- per-GPU memory: a holder of GPUs 0 and 2 shows its own memory on each
local ah = gpu.holders{pids = a}[1]
assert.eq({ah.mem_mib, ah.mem_by_gpu[0], ah.mem_by_gpu[2]}, {4000, 1000, 3000})
local rows = gpu.holders{per_gpu = true, users = {"alice", "root"}}
local got = {}
for _, r in ipairs(rows) do got[#got + 1] = {r.pid, r.gpu, r.mem_mib, r.total_mib} end
assert.eq(got, {{a, 0, 1000, 4000}, {a, 2, 3000, 4000}, {d, 0, 0, 0}})
rows = gpu.holders{per_gpu = true, gpus = {2}}
assert.eq(#rows, 1)
assert.eq({rows[1].pid, rows[1].gpu, rows[1].mem_mib}, {a, 2, 3000}, "gpus narrows the rows too")
