-- gpu.kill: the four holders of the H200 fixture scenario
local plain = fake.add_holder{pid = 437, mem = {[0] = 10850}}
local stubborn = fake.add_holder{pid = 438, mem = {[0] = 4706}, ignore_term = true}
local parent = fake.add_holder{pid = 439, mem = {[0] = 3682}}
local child = fake.add_holder{pid = 541, ppid = 439, mem = {[0] = 6754}, comm = "python3"}
local stuck = fake.add_holder{pid = 600, mem = {[1] = 500}, stuck = true}
local prot = fake.add_holder{pid = 700, mem = {[1] = 10}, protected = true, comm = "nv-hostengine"}

-- one holder
local r = gpu.kill(gpu.holders{commands = {"python3"}, gpus = {0}}[1])
assert.eq(r.ok, true)
assert.eq(r.exited, 1)
assert.eq(r.rows[1].pid, plain)
assert.eq(r.rows[1].outcome, "exited")
assert.eq(r.rows[1].signals, {"TERM"})
assert.eq(fake.alive(plain), false)

-- a list of holders: TERM is ignored by 438, KILL follows; --tree takes 439's child
local hs = gpu.holders{gpus = {0}}
r = gpu.kill(hs, {tree = true, grace = "1s"})
assert.eq({r.ok, r.status, r.reason}, {true, "done", nil})
assert.eq(r.killed, 1)
assert.eq(r.exited, 2)
local by = {}
for _, x in ipairs(r.rows) do by[x.pid] = x end
assert.eq(by[stubborn].outcome, "killed")
assert.eq(by[stubborn].signals, {"TERM", "KILL"})
assert.eq(by[child].outcome, "exited")
assert.truthy(by[child].via == "target" or by[child].via == "child of 439")
assert.eq(fake.used(0), 0)

-- pids resolved through a fresh snapshot; a stuck one survives, a protected one is skipped
r = gpu.kill({stuck, prot, 99999})
assert.eq(r.ok, false, "a survivor makes ok false")
assert.eq(r.survived, 1)
assert.eq(r.skipped, 2)
assert.eq(r.status, "failed")
assert.match(r.reason, "^pid 600 %(.*%) survived")
by = {}
for _, x in ipairs(r.rows) do by[x.pid] = x end
assert.eq(by[stuck].state, "D")
assert.match(by[prot].reason, "protected")
assert.match(by[99999].reason, "not a GPU holder")
assert.eq(fake.alive(prot), true)

-- force takes the protected one
r = gpu.kill({prot}, {force = true})
assert.eq(r.exited, 1)

-- a stale identity (pid reused) is never signalled
local fresh = fake.add_holder{mem = {[1] = 5}}
r = gpu.kill({pid = fresh, start_time = 1, boot_id = "boot-gpu01"})
assert.eq(fake.alive(fresh), true, "a holder with another start time is not the target")

-- empty target list: nothing to do, no helper call
local before = #fake.calls("kill")
r = gpu.kill({})
assert.eq(r.ok, true)
assert.eq(r.rows, {})
assert.eq(#fake.calls("kill"), before)

-- argument errors
assert.error(function() gpu.kill() end, "table expected")
assert.error(function() gpu.kill({pid = 5}) end, "needs pid and start_time")
assert.error(function() gpu.kill({pid = 1.5, start_time = 1}) end, "pid 1.5 is not an integer")
assert.error(function() gpu.kill({{pid = 1.5, start_time = 1}}) end, "pid 1.5 is not an integer")
assert.error(function() gpu.kill({pid = 5, start_time = 0.5}) end, "start_time 0.5 is not")
assert.error(function() gpu.kill({1.5}) end, "1.5 is not a pid")
assert.error(function() gpu.kill({"x"}) end, "want a holder")
assert.error(function() gpu.kill({5}, {grase = "1s"}) end, "unknown option grase")
assert.error(function() gpu.kill({5}, {signal = "BOOM"}) end, "unknown signal")
assert.error(function() gpu.kill({5}, {grace = "soon"}) end, "duration")

-- stats count every outcome of the run; the stale identity was never signalled: skipped, as
-- the helper reports a reused pid, not gone
local st = fake.stats()
assert.eq(st.kills.exited, 1 + 2 + 1)
assert.eq(st.kills.gone, nil)
assert.eq(st.kills.skipped, 2)
assert.eq(st.kills.killed, 1)
assert.eq(st.kills.survived, 1)
