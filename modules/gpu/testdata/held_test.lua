-- gpu.by_gpu flattens holders to one entry per holder and GPU, each with its memory there
local two = fake.add_holder{mem = {[0] = 1000, [1] = 3000}, unit = "sglang.service"}
local rows = gpu.by_gpu(gpu.holders{pids = {two}})
assert.len(rows, 2)
assert.eq({rows[1].gpu, rows[1].mem_mib, rows[1].total_mib, rows[1].pid}, {0, 1000, 4000, two})
assert.eq({rows[2].gpu, rows[2].mem_mib}, {1, 3000})
assert.eq(rows[1].unit, "sglang.service", "the holder's fields come along")
assert.len(gpu.by_gpu(gpu.holders{pids = {two}}, {1}), 1)
assert.error(function() gpu.by_gpu(gpu.holders(), {}) end, "gpus: empty list")
assert.error(function() gpu.by_gpu({1}) end, "want a holder")

-- gpu.wait_held: a unit already holding returns at once, its rows those of gpu.by_gpu
local r = gpu.wait_held{unit = "sglang", timeout = "1s"}
assert.eq({r.ok, r.status, r.reason}, {true, "done", nil})
assert.eq({#r.rows, r.rows[1].gpu, r.rows[1].mem_mib}, {2, 0, 1000})

-- a worker that comes later ends the helper's wait: no Lua sleep loop
local n = #fake.calls("wait-free")
local w = fake.add_holder{mem = {[1] = 5000}, unit = "vllm.service", appear_after_polls = 3}
r = gpu.wait_held{unit = "vllm.service", gpus = {1}, timeout = "5s"}
assert.eq({r.ok, r.status}, {true, "done"})
assert.eq({r.rows[1].pid, r.rows[1].gpu}, {w, 1})
assert.eq(#fake.calls("wait-free") > n, true, "waited through the helper")

-- nothing comes: expired, named
r = gpu.wait_held{unit = "nope.service", gpus = {1}, timeout = "300ms"}
assert.eq({r.ok, r.status, #r.rows}, {false, "expired", 0})
assert.match(r.reason, "unit nope.service holds none of GPU 1 after 300ms")

assert.error(function() gpu.wait_held{timeout = "1s"} end, "exactly one of unit=, container= or pid=")
assert.error(function() gpu.wait_held{unit = "a", pid = 3} end, "exactly one of")
assert.error(function() gpu.wait_held{unit = "a", gpus = {}} end, "empty list")

-- under check nothing was started: nothing to wait for
fake.check(true)
r = gpu.wait_held{unit = "later.service"}
assert.eq({r.ok, r.status}, {true, "would"})
fake.check(false)

-- an old option spelling names the new one
assert.error(function() gpu.wait_free{ignore_shared = true} end, "option ignore_shared is spelled shared=false")
gpu.wait_free{gpus = {1}, shared = false, timeout = "100ms"}
local wreq = fake.calls("wait-free")
assert.eq(wreq[#wreq].ignore_shared, true, "shared=false: holders of only the shared devices do not block")
