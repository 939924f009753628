-- lose the connection: an error naming the call and the host
fake.lose()
local err = assert.error(function() systemd.status("x.service") end, "systemd.status: helper unit on gpu02")
assert.match(err, "connection lost")
