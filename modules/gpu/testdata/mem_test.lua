-- gpu.mem and gpu.snapshot over an idle and a busy host
local m = gpu.mem()
assert.len(m, 2)
assert.eq(m[1].index, 0)
assert.eq(m[1].used_mib, 0)
assert.eq(m[1].total_mib, 143771)
assert.eq(m[2].name, "NVIDIA H200")
assert.match(m[1].uuid, "^GPU%-")
assert.truthy(m[1].bus_id)

local pid = fake.add_holder{mem = {[0] = 10850}}
fake.add_holder{mem = {[0] = 4706, [1] = 100}}
m = gpu.mem()
assert.eq(m[1].used_mib, 10850 + 4706)
assert.eq(m[2].used_mib, 100)

local s = gpu.snapshot()
assert.eq(s.hostname, "gpu01")
assert.eq(s.boot_id, "boot-gpu01")
assert.eq(s.smi, true)
assert.len(s.gpus, 2)
assert.len(s.holders, 2)
assert.eq(s.warnings, {})
local h = s.holders[1]
assert.eq(h.pid, pid)
assert.eq(h.comm, "python3")
assert.eq(h.cmdline, "/usr/bin/python3 train.py")
assert.eq(h.gpus, {0})
assert.eq(h.devices, {"nvidia0", "nvidiactl", "nvidia-uvm"})
assert.eq(h.mem_mib, 10850)
assert.eq(h.shared_only, false)
assert.eq(h.protected, false)
assert.eq(h.unit, nil, "no unit is nil, not an empty string")

-- stats: first reading kept as before, last as after
local st = fake.stats()
assert.eq(st.gpus[1].before_mib, 0)
assert.eq(st.gpus[1].after_mib, 15556)

-- every request carries the host's helper config
local calls = fake.calls("snapshot")
assert.len(calls, 3)
assert.eq(calls[1].dev_dir, "/lab/dev")
assert.eq(calls[1].protected, {"myexporter"})
