-- under check stop only looks
fake.check(true)
fake.add_unit{name = "vllm.service"}
local w = fake.add_holder{mem = {[0] = 5000}, unit = "vllm.service"}
local r = systemd.stop("vllm.service")
assert.eq(r.ok, true)
assert.eq({r.status, r.would[1].unit, r.would[1].action}, {"would", "vllm.service", "stop"})
assert.eq(r.action, "stop")
assert.eq(r.active_state, "active")
assert.eq(fake.alive(w), true)
assert.eq(fake.calls("unit")[1].action, "status")
-- status is read-only: no would flag
assert.eq(systemd.status("vllm.service").would, nil)
