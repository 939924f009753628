-- per-GPU status in gpu.snapshot, owners vs monitors, ghosts, sources
local worker = fake.add_holder{mem = {[0] = 10240}}
local monitor = fake.add_holder{gpus = {0, 1}, monitor = true, comm = "nvidia-smi", user = "root"}
local s = gpu.snapshot()
assert.len(s.status, 2)
local st0, st1 = s.status[1], s.status[2]
assert.eq(st0.index, 0)
assert.eq(st0.state, "held")
assert.eq(st0.owners, {worker})
assert.eq(st0.others, {monitor})
assert.match(st0.reason, "held by pid " .. worker .. " %(python3 train.py%) 10240 MiB")
assert.eq(st0.used_mib, 10240)
assert.eq(st0.threshold_mib, 64)
assert.eq(st1.state, "free", "a monitor alone does not make a GPU busy")
assert.eq(st1.reason, nil)
assert.eq(st1.others, {monitor})
assert.eq(s.ghosts, {})

-- holder tables: owner, mem_by_gpu, suspicious, zombie_leader
local by = {}
for _, h in ipairs(s.holders) do by[h.pid] = h end
assert.eq(by[worker].owner, true)
assert.eq(by[worker].mem_by_gpu, {[0] = 10240})
assert.eq(by[worker].suspicious, nil)
assert.eq(by[worker].zombie_leader, false)
assert.eq(by[monitor].owner, false)
assert.eq(by[monitor].mem_by_gpu, {})
assert.eq(by[monitor].devices, {"nvidia0", "nvidia1", "nvidiactl"})

-- a holder of two GPUs is charged per GPU, not its total on both
local two = fake.add_holder{mem = {[0] = 100, [1] = 4096}}
s = gpu.snapshot()
for _, h in ipairs(s.holders) do by[h.pid] = h end
assert.eq(by[two].mem_by_gpu, {[0] = 100, [1] = 4096})
assert.eq(by[two].mem_mib, 4196)
assert.match(s.status[2].reason, "4096 MiB")

-- gpu.mem rows carry their source
local m = gpu.mem()
assert.eq(m[1].source, "nvidia-smi")
assert.eq(m[1].minor, 0)
fake.source(1, "driver")
m = gpu.mem()
assert.eq(m[2].source, "driver")
assert.eq(m[2].used_mib, -1)
s = gpu.snapshot()
assert.eq(s.status[2].state, "held", "an owner holds it even when memory is unknown")
fake.add_holder{gpus = {1}, monitor = true} -- keep GPU 1 open after the owner leaves
gpu.kill({two})
s = gpu.snapshot()
assert.eq(s.status[2].state, "unknown", "unknown memory is never free")
assert.match(s.status[2].reason, "nvidia%-smi does not list this GPU")
