-- gpu.wait_free outcomes
local r = gpu.wait_free()
assert.eq(r.ok, true)
assert.eq(r.outcome, "freed")
assert.eq(r.polls, 1)
assert.eq(r.reason, nil)
assert.len(r.gpus, 2)

-- a holder that exits on its own after 3 polls
fake.add_holder{mem = {[0] = 2000}, exit_after_polls = 3}
r = gpu.wait_free{interval = "10ms", timeout = "5s"}
assert.eq(r.outcome, "freed")
assert.eq(r.polls, 3)
assert.truthy(r.elapsed > 0 and r.elapsed < 1, "elapsed is in seconds")

-- a holder that stays: timed out, and it is listed
local p = fake.add_holder{mem = {[1] = 2000}}
r = gpu.wait_free{timeout = 1, interval = 0.25}
assert.eq(r.ok, false)
assert.eq(r.outcome, "expired")
assert.eq(r.holders[1].pid, p)
-- watching only GPU 0 it is free
r = gpu.wait_free{gpus = {0}}
assert.eq(r.outcome, "freed")
assert.len(r.gpus, 1)
local req = fake.calls("wait-free")
req = req[#req]
assert.eq(req.gpus, {0})
assert.eq(req.threshold_mib, nil, "no threshold: the helper uses the idle baseline")

-- memory still used with no holder left
fake.leak(0, 300)
r = gpu.wait_free{gpus = {0}, timeout = "300ms"}
assert.eq(r.outcome, "memory-held")
r = gpu.wait_free{gpus = {0}, threshold_mib = 512}
assert.eq(r.outcome, "freed")
assert.eq(r.gpus[1].threshold_mib, 512, "each GPU carries the threshold it was judged by")
req = fake.calls("wait-free")
assert.eq(req[#req].threshold_mib, 512)

-- a new holder appears during the wait (while an old one is still leaving)
fake.add_holder{mem = {[0] = 100}, exit_after_polls = 3}
fake.add_holder{mem = {[0] = 100}, appear_after_polls = 2}
r = gpu.wait_free{gpus = {0}, threshold_mib = 512, timeout = "10s"}
assert.eq(r.outcome, "new-holder")

assert.error(function() gpu.wait_free{timeout = -1} end, "negative")
assert.error(function() gpu.wait_free{threshold_mib = -5} end, "negative")
assert.error(function() gpu.wait_free{gpu = {0}} end, "unknown option")
