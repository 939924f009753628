local r = ssh.run({"echo", "a b", "$HOME"})
assert.eq(r, {ok = true, status = "done", code = 0, stdout = "a b $HOME\n", stderr = ""})
local runs = fake.runs()
assert.eq(runs[1].argv, {"echo", "a b", "$HOME"}, "argv travels as is")

r = ssh.run("exit 3")
assert.eq(r.ok, false)
assert.eq(r.code, 3)
assert.eq({r.ok, r.status, r.reason}, {false, "failed", "exit status 3"})
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

-- max_output reaches remote as the per-stream cap; 0 (the default) is remote's 16 MiB
assert.eq(ssh.run({"cap"}).stdout, "0")
assert.eq(ssh.run({"cap"}, {max_output = 1048576}).stdout, "1048576")
assert.error(function() ssh.run({"cap"}, {max_output = 0}) end, "max_output: 0 is not a positive number of bytes")
