-- lose the connection: an error naming the call and the host
fake.lose()
local err = assert.error(function() systemd.status("x.service") end, "systemd.status: gpu02: helper unit: ")
assert.match(err, "connection lost")
