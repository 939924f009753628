-- gpu.free under check kills nothing: rows say what would be
fake.check(true)
local w = fake.add_holder{mem = {[0] = 1000}}
local child = fake.add_holder{gpus = {1}, uvm = false}
fake.ghost(453, "python3", 1, 8802, child)
local r = gpu.free{grace = "10ms"}
assert.eq(r.ok, true)
assert.eq(r.rows[1].step, "would-kill")
assert.eq(r.rows[1].killed, tostring(w))
assert.eq(r.rows[1].freed, false)
assert.eq(r.rows[2].step, "would-kill", "no owner left, memory held: stage 2 would take the child")
assert.eq(r.rows[2].killed, tostring(child))
assert.eq(fake.alive(w), true)
assert.eq(fake.alive(child), true)
assert.eq(fake.calls("kill")[1].dry_run, true)
assert.eq(#fake.calls("wait-free"), 0)
assert.eq(r.kills[1].outcome, "would-kill")
-- the one result form under check: the plan is would, the same rows
assert.eq({r.status, #r.would, r.would[1].gpu}, {"would", #r.rows, r.rows[1].gpu})
