-- --check and the run plan alike: what a unit's stop would end is left to it, gpu.free
-- plans its kills on what remains
fake.add_unit{name = "vllm.service"}
local w1 = fake.add_holder{mem = {[0] = 5000}, unit = "vllm.service"}
local w2 = fake.add_holder{mem = {[0] = 3000}}

fake.check(true)
systemd.stop("vllm.service")
local c = gpu.free{grace = "10ms", timeout = "1s"}
-- a script's own gpu.kill plans alike: the unit's worker is its stop's
local k = gpu.kill(gpu.holders())
assert.eq(#k.would, 1)
for _, x in ipairs(k.rows) do
  if x.pid == w1 then
    assert.eq(x.outcome, "skipped")
    assert.eq(x.reason, "the stop of vllm.service would end it")
  end
end
assert.eq(fake.stats().kills.would, 1, "w2 once, however often it is named")
fake.check(false)
assert.eq(c.rows[1].step, "would-kill")
assert.eq(c.rows[1].killed, tostring(w2), "the unit's worker is the stop's, not a kill's")
assert.eq(c.rows[1].before_mib, 8000)
local st = fake.stats()
assert.eq(st.units.would_stop, 1)
assert.eq(st.units.would_stop_mib, 5000)
assert.eq(st.kills.would, 1)
assert.eq(st.would_kill_mib, 3000)
assert.eq(fake.alive(w1), true)

systemd.stop("vllm.service")
local r = gpu.free{grace = "10ms", timeout = "1s"}
assert.eq(r.ok, true, r.reason)
assert.eq(r.rows[1].step, "stage 1")
assert.eq(r.rows[1].killed, c.rows[1].killed, "the run kills what check said")
assert.eq(r.rows[1].exited, tostring(w2))
assert.eq(r.rows[1].before_mib, 8000, "the row's before is the run's first reading, as the recap's")
st = fake.stats()
assert.eq(st.units.stopped, 1)
assert.eq(st.kills.exited, 1)

-- a GPU whose holders are all the unit's: released by the stop in both
fake.add_unit{name = "embed.service"}
fake.add_holder{mem = {[0] = 4000}, unit = "embed.service"}
fake.check(true)
systemd.stop("embed.service")
c = gpu.free{}
fake.check(false)
assert.eq(c.ok, true)
assert.eq(c.rows[1].step, "by-stop")
assert.eq(c.rows[1].killed, "")
assert.match(c.rows[1].reason, "^would be freed by the stop of embed.service")
systemd.stop("embed.service")
r = gpu.free{timeout = "1s"}
assert.eq(r.rows[1].step, "by-stop")
assert.eq(r.rows[1].freed, true)

-- units: a rerun's stop of a stopped unit changes nothing, a unit that does not exist is
-- never stopped
local before = fake.stats().units
systemd.stop("embed.service")
systemd.stop("nosuch.service")
st = fake.stats().units
assert.eq(st.stopped, before.stopped, "embed.service stays counted once")
assert.eq(st.failed, 1)
