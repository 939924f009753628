-- gpu.wait_free{holders=...}: wait for given holders, not for the GPUs to be free
local bob = fake.add_holder{mem = {[1] = 2000}, user = "bob", exit_after_polls = 3}
local alice = fake.add_holder{mem = {[1] = 3000}, user = "alice"}

local mine = gpu.holders{users = "bob"}
local r = gpu.wait_free{holders = mine, interval = "10ms", timeout = "5s"}
assert.eq({r.ok, r.outcome, r.polls}, {true, "released", 3})
assert.len(r.rows, 1, "only the GPU bob held")
assert.eq({r.rows[1].index, r.rows[1].state, r.rows[1].waiting}, {1, "held", {}}, "alice still holds it")
assert.eq(r.holders, {})
local req = fake.calls("wait-free")
req = req[#req]
assert.eq(#req.holders, 1)
assert.eq({req.holders[1].pid, req.holders[1].start_time}, {bob, mine[1].start_time}, "by identity")

-- a given holder that stays: timed out, named per GPU with its memory there
r = gpu.wait_free{holders = gpu.holders{users = "alice"}, timeout = "1s", interval = "250ms"}
assert.eq({r.ok, r.outcome}, {false, "expired"})
assert.match(r.reason, "GPU 1: still held by pid " .. alice .. " %(python3 train.py%) 3000 MiB")
assert.eq(r.rows[1].waiting, {alice})
assert.eq(r.holders[1].pid, alice)

-- pids are resolved to identities; a pid holding nothing is released already
local n = #fake.calls("wait-free")
r = gpu.wait_free{holders = {4242}}
assert.eq({r.ok, r.outcome}, {true, "released"})
assert.eq(#fake.calls("wait-free"), n, "nothing to wait for: no wait sent")
r = gpu.wait_free{holders = {alice}, timeout = "300ms", interval = "100ms"}
assert.eq(r.outcome, "expired", "a pid that holds is waited for")

-- an empty list never widens to "every holder": nothing to wait for, no wait
n = #fake.calls("wait-free")
r = gpu.wait_free{holders = gpu.holders{users = "nobody"}}
assert.eq({r.ok, r.outcome, r.reason}, {true, "released", "no holders given: nothing to wait for"})
assert.eq(#fake.calls("wait-free"), n)

-- a kill result: what it signalled (skipped ones were never signalled)
local carol = fake.add_holder{mem = {[0] = 1000}, user = "carol", ignore_term = true}
local prot = fake.add_holder{mem = {[0] = 50}, comm = "nv-hostengine", protected = true, user = "root"}
local k = gpu.kill(gpu.holders{gpus = {0}}, {grace = "1s"})
assert.eq({k.killed, k.skipped}, {1, 1})
assert.eq(k.rows[1].start_time ~= nil, true, "kill results carry the identity")
r = gpu.wait_free{holders = k, timeout = "1s"}
assert.eq({r.ok, r.outcome}, {true, "released"})
req = fake.calls("wait-free")
req = req[#req]
assert.eq(#req.holders, 1)
assert.eq(req.holders[1].pid, carol)
assert.truthy(fake.alive(prot))

-- a dead worker whose forked child keeps its memory is not released
local heir = fake.add_holder{gpus = {0}, user = "dave", comm = "python3"}
local parent = fake.add_holder{mem = {[0] = 4000}, user = "dave", heir = heir}
local given = gpu.holders{pids = parent}
gpu.kill(given)
r = gpu.wait_free{holders = given, gpus = {0}, timeout = "1s", interval = "250ms"}
assert.eq({r.ok, r.outcome}, {false, "expired"})
assert.match(r.reason, "pid " .. parent .. " %(python3%) is gone but 4000 MiB is still charged to it")
assert.eq(r.rows[1].waiting, {parent})

-- bad values are argument errors
assert.error(function() gpu.wait_free{holders = "bob"} end, "gpu.wait_free: option holders: want holders")
assert.error(function() gpu.wait_free{holders = {{pid = 5}}} end, "gpu.wait_free: option holders: entry 1: a holder needs pid and start_time")
assert.error(function() gpu.wait_free{holders = {1.5}} end, "entry 1: 1.5 is not a pid")
