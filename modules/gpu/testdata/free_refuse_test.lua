-- gpu.free never kills protected or suspicious holders without force, and unknown is never free
local pd = fake.add_holder{gpus = {0}, comm = "nvidia-persistenced", protected = true}
fake.leak(0, 1024)
local spoof = fake.add_holder{mem = {[1] = 4096}, comm = "nvidia-persistenced", protected = true, uvm = true}
local waits = #fake.calls("wait-free")
local r = gpu.free{grace = "10ms", timeout = "300ms"}
assert.eq(r.ok, false)
assert.eq(r.rows[1].step, "not-freed")
assert.match(r.rows[1].reason, "held by protected pid " .. pd)
assert.eq(r.rows[1].state, "protected")
assert.eq(r.rows[2].step, "not-freed")
assert.eq(r.rows[2].state, "suspicious")
assert.match(r.rows[2].reason, "not killed without force")
assert.match(r.reason, "^GPU 0: .*; GPU 1: suspicious holder")
assert.eq(fake.alive(pd), true)
assert.eq(fake.alive(spoof), true)
assert.eq(#fake.calls("kill"), 0)
assert.eq(#fake.calls("wait-free"), waits, "no wait where waiting cannot help")

-- with force the suspicious one goes in stage 1, the protected one in stage 2
fake.leak(0, 0)
r = gpu.free{grace = "10ms", timeout = "300ms", force = true}
assert.eq(r.rows[2].step, "stage 1")
assert.eq(fake.alive(spoof), false)
assert.eq(r.rows[1].step, "by-stop", "the leak is gone (over its threshold at the run's first reading): nothing left to force")
assert.eq(fake.alive(pd), true)

-- unknown memory with only a monitor: not freed, nothing killed
local mon = fake.add_holder{gpus = {1}, monitor = true}
fake.unknown(1)
r = gpu.free{grace = "10ms", timeout = "300ms"}
assert.eq(r.rows[2].step, "not-freed")
assert.eq(r.rows[2].state, "unknown")
assert.match(r.rows[2].reason, "memory unknown")
assert.eq(fake.alive(mon), true)

-- a stuck owner: named as surviving KILL
local stuck = fake.add_holder{mem = {[0] = 500}, stuck = true}
r = gpu.free{gpus = {0}, grace = "10ms", timeout = "300ms"}
assert.len(r.rows, 1)
assert.eq(r.rows[1].step, "not-freed")
assert.match(r.rows[1].reason, "survived KILL")
assert.eq(r.rows[1].killed, tostring(stuck))

-- a GPU the host does not have
r = gpu.free{gpus = {7}}
assert.eq(r.rows[1].step, "not-freed")
assert.match(r.rows[1].reason, "no GPU 7 on this host %(it has 0, 1%)")
