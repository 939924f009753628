-- under check gpu.kill sends dry_run and nothing dies
fake.check(true)
local p = fake.add_holder{mem = {[0] = 1000}}
local r = gpu.kill(gpu.holders())
assert.eq(r.ok, true)
assert.eq(#r.would, 1)
assert.eq(r.rows[1].outcome, "would-kill")
assert.eq(fake.alive(p), true)
assert.eq(fake.calls("kill")[1].dry_run, true)
r = gpu.kill({p})
assert.eq(#r.would, 1)
assert.eq(fake.stats().kills.would, 1, "the same process named twice is one")

fake.check(false)
r = gpu.kill({p})
assert.eq(r.exited, 1)
assert.eq(fake.calls("kill")[3].dry_run, nil, "dry_run is omitted outside check")
