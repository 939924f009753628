-- a plain worker beside a suspicious and a protected share: the worker is freed, every share
-- is named, and the GPU fails only for what is left
local spoof = fake.add_holder{mem = {[0] = 300}, comm = "dcgm-exporter", protected = true}
local xorg = fake.add_holder{gpus = {0}, comm = "Xorg", protected = true}
local w = fake.add_holder{mem = {[0] = 4000}}
fake.add_holder{mem = {[1] = 1000}}
local r = gpu.free{grace = "10ms", timeout = "2s"}
assert.eq(r.ok, false)
assert.eq(fake.alive(w), false, "the plain owner is freed")
assert.eq(fake.alive(spoof), true)
assert.eq(fake.alive(xorg), true)
assert.eq(r.rows[1].step, "not-freed")
assert.eq(r.rows[1].killed, tostring(w))
assert.eq(r.rows[1].state, "suspicious")
assert.match(r.rows[1].reason, "suspicious holder pid " .. spoof .. " %(dcgm%-exporter train.py%) 300 MiB: protected name dcgm%-exporter, but it owns 300 MiB")
assert.eq(r.rows[1].reason:find("4000"), nil, "the freed share is not in the reason: " .. r.rows[1].reason)
assert.eq(r.rows[1].after_mib, 300)
assert.eq(r.rows[2].step, "stage 1")
assert.match(r.reason, "^GPU 0: suspicious holder")

-- before the free, the status names each share
spoof = fake.add_holder{mem = {[1] = 300}, comm = "dcgm-exporter", protected = true}
w = fake.add_holder{mem = {[1] = 4000}}
local st = gpu.snapshot().status[2]
assert.eq(st.index, 1)
assert.match(st.reason, "300 MiB: protected name")
assert.match(st.reason, "beside it, owned by pid " .. w .. " %(python3 train.py%) 4000 MiB")
