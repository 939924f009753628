-- operational failures raise Lua errors naming the call and the host
fake.add_holder{mem = {[0] = 1}}
fake.lose()
local err = assert.error(function() gpu.mem() end, "gpu.mem: gpu01: helper snapshot: ")
assert.match(err, "connection lost")
assert.error(function() gpu.kill({1}) end, "gpu.kill")
assert.error(function() gpu.wait_free() end, "gpu.wait_free")
