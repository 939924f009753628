-- a killed worker's live parent is a supervisor: recorded, then every wait settles and watches it
local sup = fake.add_proc{pid = 633, comm = "python3", cmdline = {"/usr/bin/python3", "train.py"}}
local w = fake.add_holder{mem = {[0] = 10240}, ppid = sup, respawn_after_polls = 20}
local r = gpu.kill({w})
assert.eq(r.exited, 1)
assert.len(r.managers, 1)
assert.eq(r.managers[1].pid, 633)
assert.eq(r.managers[1].children, {w})
assert.eq(r.managers[1].why, "pid 633 (python3 train.py) may restart its workers: kill 633")
assert.eq(r.rows[1].ppid, 633)

-- the GPU reads free at once; the respawned worker opens it 1.9s later, inside the settle
local wf = gpu.wait_free{gpus = {0}, timeout = "10s", settle = "5s"}
assert.eq(wf.ok, false)
assert.eq(wf.outcome, "new-holder")
assert.eq(wf.rows[1].state, "new-holder")
assert.match(wf.reason, "GPU 0: new holder pid %d+ %(python3 train.py%) 1.9s after it read free; pid 633")
assert.match(wf.reason, "pid 633 %(python3 train.py%) may restart its workers")
assert.eq(wf.managers[1].pid, 633)
local req = fake.calls("wait-free")
req = req[#req]
assert.eq(req.settle, "5s")
assert.eq(req.timeout, "15s", "the settle comes on top of the release timeout")
assert.eq(req.watch[1].pid, 633)

-- without settle given, the default one is sent while a supervisor is recorded
gpu.wait_free{gpus = {1}}
req = fake.calls("wait-free")
assert.eq(req[#req].settle, "10s")

-- a parent that is pid 1 is no supervisor
local orphan = fake.add_holder{mem = {[1] = 100}}
assert.eq(gpu.kill({orphan}).managers, {})
