-- gpu.free stage 2: memory stays held by a child after its parent (the owner) died. A
-- fork+exec'd child inherited the fds but maps nothing (monitor-like): only stage 2 finds it.
-- (A plain forked child maps the context: an owner, stage 1; see free_gpus_test.go.)
local child = fake.add_holder{pid = 516, gpus = {0}, monitor = true, comm = "python3"}
local parent = fake.add_holder{pid = 453, mem = {[0] = 8802}, heir = child}
local mon = fake.add_holder{gpus = {1}, monitor = true, comm = "dcgm-exporter"}
local busy1 = fake.add_holder{mem = {[1] = 2000}}
local r = gpu.free{grace = "10ms", timeout = "500ms"}
assert.eq(r.ok, true, r.reason)
assert.eq(r.rows[1].step, "stage 2", "the child keeping the dead parent's memory goes in stage 2")
assert.eq(r.rows[1].killed, "453,516")
assert.eq(r.rows[1].after_mib, 0)
assert.eq(r.rows[2].step, "stage 1")
assert.eq(r.rows[2].killed, tostring(busy1))
assert.eq(fake.alive(parent), false)
assert.eq(fake.alive(child), false)
assert.eq(fake.alive(mon), true, "GPU 1 freed in stage 1: its monitor is left alone")
local stages = {}
for _, x in ipairs(r.kills) do stages[x.pid] = x.stage end
assert.eq(stages, {[453] = "stage 1", [busy1] = "stage 1", [516] = "stage 2"})
-- stage 1 signalled only the owners
local k = fake.calls("kill")
assert.len(k, 2)
assert.len(k[1].targets, 2)
assert.eq(k[2].targets[1].pid, 516)
