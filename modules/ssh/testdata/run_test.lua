local r = ssh.run({"echo", "a b", "$HOME"})
assert.eq(r, {ok = true, code = 0, stdout = "a b $HOME\n", stderr = ""})
local runs = fake.runs()
assert.eq(runs[1].argv, {"echo", "a b", "$HOME"}, "argv travels as is")

r = ssh.run("exit 3")
assert.eq(r.ok, false)
assert.eq(r.code, 3)
assert.eq(r.stderr, "bye\n")
assert.eq(fake.runs()[2].argv, {"sh", "-c", "exit 3"})

r = ssh.run({"cat"}, {stdin = "hello", sudo = true, timeout = "2s"})
assert.eq(r.stdout, "hello")
local last = fake.runs()[3]
assert.eq(last.sudo, true)
assert.eq(last.timeout, 2)

assert.error(function() ssh.run({}) end, "empty argv")
assert.error(function() ssh.run("  ") end, "empty command")
assert.error(function() ssh.run({"ls", 5}) end, "want a string")
assert.error(function() ssh.run(5) end, "want an argv table")
assert.error(function() ssh.run({"ls"}, {sudoo = true}) end, "unknown option sudoo")
