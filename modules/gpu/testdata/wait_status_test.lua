-- gpu.wait_free returns per-GPU status and the joined reasons; monitors do not block
local mon = fake.add_holder{gpus = {0}, monitor = true, comm = "nvitop"}
local r = gpu.wait_free{timeout = "1s"}
assert.eq(r.ok, true)
assert.eq(r.rows[1].state, "free")
assert.eq(r.rows[1].others, {mon})
assert.eq(r.reason, nil)
assert.eq(r.settled, 0)
assert.eq(fake.calls("wait-free")[1].settle, nil, "nothing to watch: no settle")

local w = fake.add_holder{mem = {[1] = 5000}}
fake.leak(0, 300)
r = gpu.wait_free{timeout = "1s"}
assert.eq(r.ok, false)
assert.eq(r.rows[1].state, "memory-held")
assert.eq(r.rows[2].state, "held")
assert.eq(r.rows[2].owners, {w})
assert.match(r.reason, "^GPU 0: 300 MiB used %(threshold 64 MiB%) with no owner left; still open by pid " .. mon)
assert.match(r.reason, "; GPU 1: held by pid " .. w)

-- an explicit settle is sent even with nothing recorded
fake.leak(0, 0)
gpu.kill({w})
r = gpu.wait_free{settle = "2s", interval = "500ms"}
assert.eq(r.ok, true)
assert.eq(r.settled, 2)
assert.error(function() gpu.wait_free{settle = "-1s"} end, "negative")
