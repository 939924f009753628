-- gpu.free: stage 1 kills owners only; a monitor holding the GPU survives
local w = fake.add_holder{pid = 437, mem = {[0] = 10240}}
local mon = fake.add_holder{gpus = {0, 1}, monitor = true, comm = "python3", cmdline = {"python3", "-c", "import pynvml"}}
local r = gpu.free{grace = "10ms", timeout = "1s"}
assert.eq(r.ok, true)
assert.eq(r.reason, nil)
assert.len(r.rows, 2)
local g0, g1 = r.rows[1], r.rows[2]
assert.eq(g0.gpu, 0)
assert.eq(g0.step, "stage 1")
assert.eq(g0.freed, true)
assert.eq(g0.state, "free")
assert.eq(g0.killed, "437")
assert.eq(g0.before_mib, 10240)
assert.eq(g0.after_mib, 0)
assert.eq(g0.reason, "", "a freed GPU needs no reason: what held it is in killed")
assert.eq(g1.step, "already-free")
assert.eq(g1.killed, "")
assert.eq(fake.alive(w), false)
assert.eq(fake.alive(mon), true, "the NVML monitor holds no memory: never killed")
assert.len(r.kills, 1)
assert.eq(r.kills[1].pid, 437)
assert.eq(r.kills[1].stage, "stage 1")
assert.eq(r.managers, {})
local k = fake.calls("kill")
assert.len(k, 1)
assert.eq(#k[1].targets, 1)
assert.eq(k[1].grace, "10ms")

-- nothing to do: one look, no kill, no wait
local kills, waits = #fake.calls("kill"), #fake.calls("wait-free")
r = gpu.free()
assert.eq(r.ok, true)
assert.eq(r.rows[1].step, "by-stop", "free now, over its threshold at the run's first reading")
assert.eq(#fake.calls("kill"), kills)
assert.eq(#fake.calls("wait-free"), waits)

-- options
assert.error(function() gpu.free{gpus = {}} end, "option gpus: empty list")
assert.error(function() gpu.free{gpu = 1} end, "unknown option gpu")
assert.error(function() gpu.free{threshold_mib = -1} end, "negative")
assert.error(function() gpu.free{grace = "soon"} end, "duration")
