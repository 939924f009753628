-- memory of a dead pid, kept by a fork+exec'd child that nvidia-smi does not list and that
-- maps nothing (a forked child that maps the context would be an owner: state held)
local child = fake.add_holder{pid = 516, gpus = {0}, monitor = true, comm = "python3"}
local parent = fake.add_holder{pid = 453, mem = {[0] = 8802}, heir = child}
local r = gpu.kill({parent})
assert.eq(r.exited, 1)
assert.eq(fake.used(0), 8802, "the child keeps the dead parent's memory")
local s = gpu.snapshot()
assert.len(s.ghosts, 1)
assert.eq(s.ghosts[1].pid, 453)
assert.eq(s.ghosts[1].gpu, 0)
assert.eq(s.ghosts[1].mem_mib, 8802)
assert.eq(s.ghosts[1].held_by, {child})
local st = s.status[1]
assert.eq(st.state, "memory-held")
assert.eq(st.owners, {})
assert.eq(st.others, {child})
assert.match(st.reason, "pid 453 %(python3%) is gone but 8802 MiB is still charged to it")
assert.match(st.reason, "pid 516 %(python3 train.py%)")
assert.eq(st.ghosts[1].pid, 453)
gpu.kill({child})
assert.eq(fake.used(0), 0)
assert.eq(gpu.snapshot().status[1].state, "free")
