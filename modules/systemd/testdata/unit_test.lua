-- stop a unit whose workers hold the GPU
fake.add_unit{name = "sglang.service", main_pid = 2000}
local w = fake.add_holder{mem = {[0] = 5000}, unit = "sglang.service"}
local st = systemd.status("sglang.service")
assert.eq(st.ok, true)
assert.eq(st.active_state, "active")
assert.eq(st.main_pid, 2000)
assert.eq(st.holders[1].pid, w)
assert.eq(st.rows[1].pid, w, "a status lists what is in the unit's cgroup, as the helper does")

local r = systemd.stop("sglang.service", {timeout = "60s"})
assert.eq(r.ok, true)
assert.eq(r.action, "stop")
assert.eq(r.active_state, "inactive")
assert.eq(fake.alive(w), false)
local req = fake.calls("unit")
assert.eq(req[#req].timeout, "1m0s")
assert.eq(req[#req].action, "stop")

assert.eq(systemd.start("sglang.service").active_state, "active")
assert.eq(systemd.restart("sglang.service").ok, true)

-- a unit whose worker survives the stop: structured result, holders killable
fake.add_unit{name = "stubborn.service", stay = true}
local s = fake.add_holder{mem = {[0] = 100}, unit = "stubborn.service"}
r = systemd.stop("stubborn.service")
assert.eq(r.ok, false)
assert.match(r.reason, "still alive")
assert.eq(r.rows[1].pid, s)
assert.eq(gpu.kill(r.holders).exited, 1)
assert.eq(fake.alive(s), false)

-- bad names and options are argument errors; nothing reaches the helper
local n = #fake.calls("unit")
assert.error(function() systemd.stop("--now") end, "invalid unit name")
assert.error(function() systemd.stop("a b") end, "invalid unit name")
assert.error(function() systemd.stop("x;reboot") end, "invalid unit name")
assert.error(function() systemd.stop() end, "string expected")
assert.error(function() systemd.stop("a.service", {time = 1}) end, "unknown option time")
assert.eq(#fake.calls("unit"), n)

-- changed, as Ansible's: a stop of an inactive unit changes nothing
fake.add_unit{name = "idle2.service", active = false}
local again = systemd.stop("idle2.service")
assert.eq(again.changed, false)
assert.eq(again.prior_active_state, "inactive")
fake.add_unit{name = "busy2.service"}
local once = systemd.stop("busy2.service")
assert.eq(once.changed, true)
assert.eq(once.prior_active_state, "active")
assert.eq(once.kill_mode, "control-group")
assert.eq(systemd.stop("nosuch2.service").changed, false)
