-- gpu.holders filters
local a = fake.add_holder{mem = {[0] = 1000}, user = "alice", comm = "python3", unit = "sglang-7.service"}
local b = fake.add_holder{mem = {[1] = 2000}, user = "bob", comm = "pt_main_thread",
  cmdline = {"/opt/venv/bin/torchrun", "--nproc=8"}}
local c = fake.add_holder{mem = {}, user = "root", comm = "nvidia-smi", monitor = true} -- nvidiactl only
local d = fake.add_holder{mem = {[0] = 50}, user = "root", comm = "nv-hostengine", protected = true}

local function pids(list)
  local out = {}
  for _, h in ipairs(list) do out[#out + 1] = h.pid end
  return out
end

assert.eq(pids(gpu.holders()), {a, b, c, d})
assert.eq(pids(gpu.holders{gpus = {1}}), {b})
assert.eq(pids(gpu.holders{gpus = 0}), {a, d}, "a single number is a list of one")
assert.eq(pids(gpu.holders{users = {"alice", "bob"}}), {a, b})
assert.eq(pids(gpu.holders{units = {"sglang*"}}), {a})
assert.eq(pids(gpu.holders{commands = {"python*"}}), {a})
assert.eq(pids(gpu.holders{commands = {"torchrun"}}), {b}, "argv[0] basename matches")
assert.eq(pids(gpu.holders{shared = false}), {a, b, d})
assert.eq(pids(gpu.holders{protected = false}), {a, b, c})
assert.eq(pids(gpu.holders{gpus = {0}, protected = false}), {a})
assert.eq(gpu.holders{users = {"nobody"}}, {})

local shared = gpu.holders{commands = {"nvidia-smi"}}[1]
assert.eq(shared.shared_only, true)
assert.eq(shared.gpus, {})
local prot = gpu.holders{protected = true, commands = {"nv-*"}}[1]
assert.eq(prot.protected, true)
assert.eq(prot.protected_why, "nv-hostengine")

-- bad filters are argument errors
assert.error(function() gpu.holders{gpu = {0}} end, "unknown option gpu")
assert.error(function() gpu.holders{users = {1}} end, "want a string")
assert.error(function() gpu.holders{gpus = {"0"}} end, "want a whole number")
assert.error(function() gpu.holders{units = {"[x"}} end, "bad glob")
assert.error(function() gpu.holders("alice") end, "options must be a table")

-- an empty list never widens to "every holder" (users = {vars.user} with vars.user nil)
local nothing = nil
assert.error(function() gpu.holders{users = {nothing}} end, "option users: empty list")
assert.error(function() gpu.holders{gpus = {}} end, "option gpus: empty list")
assert.error(function() gpu.holders{units = {}} end, "option units: empty list")
assert.error(function() gpu.holders{commands = {}} end, "option commands: empty list")

-- owner=true: memory or a compute context; owner=false: monitors and the like
assert.eq(pids(gpu.holders{owner = true}), {a, b, d})
assert.eq(pids(gpu.holders{owner = false}), {c})
assert.error(function() gpu.holders{owner = "yes"} end, "want true or false")
