-- several units in one call: one helper request, one result per unit in the given order
fake.add_unit{name = "sglang.service", main_pid = 2000, restart = "always"}
fake.add_unit{name = "stubborn.service", stay = true}
local w = fake.add_holder{mem = {[0] = 5000}, unit = "sglang.service"}
local s = fake.add_holder{mem = {[0] = 100}, unit = "stubborn.service"}
local n = #fake.calls("unit")
-- a list with a unit systemd does not know (a typo) stops none of them
local rs = systemd.stop({"sglang.service", "typo.service", "stubborn.service", "typo2"})
assert.eq(#rs, 4)
assert.eq(rs[1].ok, false)
assert.eq(rs[1].missing, false)
assert.eq(rs[1].active_state, "active")
assert.eq(rs[1].reason, "no unit of the list was stopped: units typo.service, typo2.service are not found")
assert.eq(rs[2].missing, true)
assert.eq(rs[2].reason, "unit typo.service not found")
assert.eq(rs[4].unit, "typo2.service")
assert.eq(rs[4].missing, true)
assert.eq(fake.alive(w), true)
assert.eq(fake.alive(s), true)
-- and so under check: nothing would be stopped
fake.check(true)
rs = systemd.stop({"sglang.service", "typo.service"})
assert.eq(rs[1].ok, false)
assert.eq(rs[1].would, nil)
assert.eq(rs[1].action, "stop")
assert.eq(rs[1].reason, "no unit of the list was stopped: unit typo.service is not found")
assert.eq(rs[2].missing, true)
local one = systemd.stop("typo.service")
assert.eq(one.ok, false)
assert.eq(one.would, nil)
assert.eq(one.reason, "unit typo.service not found")
fake.check(false)

n = #fake.calls("unit")
rs = systemd.stop({"sglang.service", "stubborn.service"}, {timeout = "30s"})
local calls = fake.calls("unit")
assert.eq(#calls, n + 1)
assert.eq(calls[#calls].units, {"sglang.service", "stubborn.service"})
assert.eq(calls[#calls].timeout, "30s")
assert.eq(#rs, 2)
assert.eq(rs[1].unit, "sglang.service")
assert.eq(rs[1].ok, true)
assert.eq(rs[1].active_state, "inactive")
assert.eq(rs[1].restart, "always")
assert.eq(fake.alive(w), false)
assert.eq(rs[2].ok, false)
assert.eq(rs[2].rows[1].pid, s)
assert.eq(rs[2].holders[1].pid, s)

-- the table form without parentheses, and start/status of several
assert.eq(#systemd.start{"sglang.service", "stubborn.service"}, 2)
local st = systemd.status{"sglang.service", "stubborn.service"}
assert.eq(st[1].active_state, "active")
assert.eq(st[2].active_state, "active")

-- bad lists are argument errors naming the unit and its place; nothing reaches the helper
n = #fake.calls("unit")
assert.error(function() systemd.stop({"a.service", "--now"}) end, 'systemd.stop: unit 2 of the list: invalid unit name "--now"')
assert.error(function() systemd.stop({"a.service", 7}) end, "unit 2 of the list: number, want a unit name")
assert.error(function() systemd.stop({"a", "b", "a.service"}) end, 'unit 3 of the list: "a.service" repeats unit 1 (a.service)')
assert.error(function() systemd.stop({"x@.service"}) end, "unit 1 of the list: unit name \"x@.service\": template without an instance")
assert.error(function() systemd.stop({}) end, "the list of units is empty")
assert.error(function() systemd.stop({"a.service", name = "b"}) end, "want a list of unit names")
assert.eq(#fake.calls("unit"), n)

-- under check a list only looks, each unit marked would
fake.check(true)
local ws = systemd.stop{"sglang.service", "stubborn.service"}
assert.eq(ws[1].would[1].unit, "sglang.service")
assert.eq(ws[2].status, "would")
assert.eq(ws[2].action, "stop")
assert.eq(fake.calls("unit")[#fake.calls("unit")].action, "status")
