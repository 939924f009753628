-- protected holders stay visible; a protected name behaving like a worker is suspicious
local pd = fake.add_holder{gpus = {0}, comm = "nvidia-persistenced", user = "root", protected = true}
fake.leak(0, 2048)
local s = gpu.snapshot()
assert.eq(s.status[1].state, "protected")
assert.eq(s.status[1].protected, {pd})
assert.match(s.status[1].reason, "held by protected pid " .. pd .. " %(nvidia%-persistenced train.py%) %(not killed%)")

-- exec -a nvidia-persistenced with nvidia-uvm open
local spoof = fake.add_holder{mem = {[1] = 4096}, comm = "nvidia-persistenced", protected = true, uvm = true}
s = gpu.snapshot()
local h = gpu.holders{gpus = {1}}[1]
assert.eq(h.pid, spoof)
assert.match(h.suspicious, "protected name nvidia%-persistenced, but it owns 4096 MiB")
assert.eq(s.status[2].state, "suspicious")
assert.eq(s.status[2].suspicious, {spoof})
assert.match(s.status[2].reason, "not killed without force")
local r = gpu.kill({h})
assert.eq(r.skipped, 1)
assert.eq(fake.alive(spoof), true)
