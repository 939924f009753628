-- gpu.free and a supervisor that restarts its workers
local sup = fake.add_proc{pid = 633, comm = "python3", cmdline = {"/usr/bin/python3", "train.py"}}
local w = fake.add_holder{mem = {[0] = 10240}, ppid = sup, respawn_after_polls = 20}
local r = gpu.free{grace = "10ms", timeout = "1s", settle = "5s"}
assert.eq(r.ok, false, "a worker came back inside the settle: never freed")
assert.eq(r.rows[1].step, "not-freed")
assert.eq(r.rows[1].state, "new-holder")
assert.match(r.rows[1].reason, "pid 633 %(python3 train.py%) may restart its workers: kill 633")
assert.match(r.rows[1].reason, "%(stop_restarters=true stops it before the kill%)$", "back in the settle: the option is named")
assert.eq(r.managers[1].pid, 633)
assert.eq(r.rows[2].step, "already-free", "GPU 1 stayed free through its own settle")
local wf = fake.calls("wait-free")
assert.eq(wf[#wf].gpus, {1})
assert.eq(wf[#wf].settle, "5s")
assert.eq(fake.alive(sup), true)
local back = fake.holders_of(0)
assert.len(back, 1)

-- stop_restarters: the supervisor is stopped (its tree from the top) before the kill, then
-- the GPU frees and stays free
local calls = #fake.calls("managers")
r = gpu.free{grace = "10ms", timeout = "1s", settle = "5s", stop_restarters = true}
assert.eq(r.ok, true, r.reason)
assert.eq(r.rows[1].step, "by-stop", "the supervisor's stop ended its worker: nothing left to kill")
assert.eq(r.rows[1].killed, "")
assert.match(r.rows[1].stopped_by, "^the stop of pid 633")
assert.eq(#r.rows[1].restarters, 0)
assert.eq(r.rows[2].step, "already-free")
assert.eq(fake.alive(sup), false)
assert.eq(fake.alive(back[1]), false)
local m = fake.calls("managers")
assert.eq(m[calls + 1].action, "stop")
assert.eq(m[calls + 1].managers[1].pid, 633)
assert.eq(r.stopped[1].pid, 633)
assert.eq(r.stopped[1].outcome, "stopped")
assert.eq(m[#m].action, "status", "the end reads the managers again")
assert.len(r.managers, 0, "nothing alive restarts the workers")
-- the waits settled and watched
wf = fake.calls("wait-free")
assert.eq(wf[#wf].settle, "5s")

-- a live supervisor after the settle keeps the GPU from freed, unless accepted
local sup4 = fake.add_proc{comm = "python3", cmdline = {"/usr/bin/python3", "supervise.py"}}
fake.add_holder{mem = {[0] = 300}, ppid = sup4}
r = gpu.free{gpus = {0}, grace = "10ms", timeout = "1s", settle = "200ms"}
assert.eq(r.ok, false)
assert.eq(r.rows[1].freed, false)
assert.eq(r.rows[1].step, "not-freed")
assert.match(r.rows[1].reason, "^free now, but pid " .. sup4 .. " %(python3 supervise.py%) may restart its workers: kill " .. sup4)
assert.match(r.rows[1].reason, "%(stop_restarters=true stops it before the kill; accept_restarters=true accepts it%)$")
assert.eq(r.rows[1].restarters[1].pid, sup4)
assert.match(r.rows[1].restarters[1].label, "pid " .. sup4)
assert.eq(r.managers[1].pid, sup4)
assert.eq(r.managers[1].kind, "process")
fake.add_holder{mem = {[0] = 300}, ppid = sup4}
r = gpu.free{gpus = {0}, grace = "10ms", timeout = "1s", settle = "200ms", accept_restarters = true}
assert.eq(r.ok, true, r.reason)
assert.eq(r.rows[1].freed, true)
assert.match(r.rows[1].note, "^free now; pid " .. sup4 .. " %(python3 supervise.py%) may restart it %(accepted%)")
assert.eq(fake.alive(sup4), true, "accepted: left alone")
-- under check, stop_restarters says what it would stop and stops nothing
fake.add_holder{mem = {[0] = 300}, ppid = sup4}
fake.check(true)
r = gpu.free{gpus = {0}, stop_restarters = true}
fake.check(false)
assert.eq(r.rows[1].step, "by-stop", "the plan: the supervisor's stop would end its worker, as in the run")
assert.match(r.rows[1].reason, "^would be freed by the stop of pid " .. sup4)
assert.eq(r.rows[1].killed, "")
assert.eq(r.stopped[1].outcome, "would-stop")
assert.eq(fake.stats().managers.would_stop, 1)
assert.eq(fake.alive(sup4), true)
gpu.free{gpus = {0}, grace = "10ms", settle = "200ms", stop_restarters = true}
assert.eq(fake.alive(sup4), false)

-- a GPU a wait already kept free for the settle needs no second settle,
-- until a new supervisor is recorded
local waits = #fake.calls("wait-free")
assert.eq(gpu.wait_free{gpus = {1}, settle = "1s"}.ok, true)
r = gpu.free{gpus = {1}, settle = "1s"}
assert.eq(r.rows[1].step, "already-free")
assert.eq(#fake.calls("wait-free"), waits + 1, "gpu.free did not settle GPU 1 again")
local sup2 = fake.add_proc{comm = "bash"}
gpu.kill({fake.add_holder{mem = {[0] = 10}, ppid = sup2}})
r = gpu.free{gpus = {1}, settle = "1s"}
assert.eq(#fake.calls("wait-free"), waits + 2, "a new supervisor: GPU 1 is watched again")
assert.eq(r.ok, true)

-- a worker back before the GPU ever read free: the row says so (the fake's wait calls it a
-- new holder; a helper that calls the GPU held gets "taken again"), and who restarts it
local sup3 = fake.add_proc{comm = "bash", cmdline = {"/bin/bash", "run.sh"}}
local w3 = fake.add_holder{mem = {[1] = 500}, ppid = sup3, respawn_after_polls = 1}
r = gpu.free{gpus = {1}, grace = "10ms", timeout = "1s", settle = "1s"}
assert.eq(r.rows[1].step, "not-freed")
assert.truthy(r.rows[1].reason:match("^taken again after the kill: new holder pid %d+") or r.rows[1].reason:match("^taken again after the kill: held by pid %d+"), r.rows[1].reason)
assert.match(r.rows[1].reason, "pid " .. sup3 .. " %(bash run.sh%) may restart its workers")
assert.match(r.rows[1].reason, "%(stop_restarters=true stops it before the kill%)$", "taken again: the option is named")
assert.eq(select(2, r.rows[1].reason:gsub("stop_restarters", "")), 1, "named once: " .. r.rows[1].reason)
assert.eq(r.rows[1].killed, tostring(w3))

-- restarted before the wait even began: started after the kill's since, it is a new holder at the first poll, "taken again after the kill"
assert.eq(gpu.free{gpus = {1}, grace = "10ms", settle = "1s", stop_restarters = true}.ok, true)
assert.eq(fake.alive(sup3), false)
sup3 = fake.add_proc{comm = "bash", cmdline = {"/bin/bash", "run.sh"}}
fake.add_holder{mem = {[1] = 500}, ppid = sup3, respawn_after_polls = -1}
r = gpu.free{gpus = {1}, grace = "10ms", timeout = "300ms", settle = "1s"}
assert.eq(r.rows[1].state, "new-holder", r.rows[1].reason)
assert.match(r.rows[1].reason, "^taken again after the kill: new holder pid %d+ %(python3 train.py%); held by pid %d+ %(python3 train.py%) 500 MiB")
assert.match(r.rows[1].reason, "pid " .. sup3 .. " %(bash run.sh%) may restart its workers")
assert.match(r.rows[1].reason, "%(stop_restarters=true stops it before the kill%)$", "held again: the option is named")
