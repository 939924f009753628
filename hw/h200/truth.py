"""The truth rules on real hardware (run by run-truth.sh): gpush must never say "freed" where the GPU
is not free, and must never kill what holds no memory while memory can be freed otherwise.

Real CUDA holders (torch), on GPU 0:
  A. a forked child keeps its dead parent's memory; an NVML monitor must survive the free;
  B. a respawning supervisor (a shell loop restarting its worker after 2 s): no "freed"
     while it lives, its pid named; with stop_restarters=true it is freed and stays free;
  C. a holder in its own PID namespace;
  D. another user's holder freed with a users filter, root's holder left alone;
  E. kill-to-verified-free (SIGKILL sent -> wait-free says freed, its memory stream on) against
     the driver's own release (NVML polled every 2 ms by a monitor process), 10 and 100 GiB,
     3 runs each: killverify.py.
Exits non-zero on any failed check.
"""
import json
import os
import signal
import subprocess
import sys
import time

import killverify
from hwcheck import alive, check, failures, log, used

BIN = sys.argv[1]
GPUSH = os.path.join(BIN, "gpush")
HELPER = os.path.join(BIN, "gpush-helper-linux-amd64")
HERE = os.path.dirname(os.path.abspath(__file__))
procs = []




def start(argv, want=("ready",), **kw):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)
    procs.append(p)
    got = {}
    while len(got) < len(want):
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"{argv} died before it was ready")
        k, _, v = line.strip().partition(" ")
        if k in want:
            got[k] = int(v)
    return p, got


def hold(gib, *pre):
    return start([*pre, sys.executable, os.path.join(HERE, "hold.py"), "plain", str(gib)])


def helper(verb, req=None):
    p = subprocess.run([HELPER, verb], input=json.dumps(req or {}).encode(), capture_output=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"helper {verb}: exit {p.returncode}: {p.stdout.decode()} {p.stderr.decode()}")
    return json.loads(p.stdout)


def gpush_free(*extra):
    t0 = time.monotonic()
    p = subprocess.run([GPUSH, "run", "free_gpus.lua", "-i", "localhost", "--json", "-e", "grace=2s", *extra],
                       capture_output=True, text=True, timeout=300)
    dt = time.monotonic() - t0
    res = None
    for line in p.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("host") == "localhost":
            res = o
    if res is None:
        raise SystemExit(f"gpush run printed no host result (exit {p.returncode}): {p.stdout} {p.stderr}")
    msgs = [e["message"] for e in res.get("log") or []]
    log(f"gpush run free_gpus.lua {' '.join(extra)}: exit {p.returncode}, {res['status']} in {dt:.1f} s")
    for m in msgs:
        log("   |", m)
    if res.get("error"):
        log("   error:", res["error"])
    return p.returncode, res, msgs, dt


def snapshot_status():
    s = helper("snapshot")
    st = s["status"][0]
    log(f"snapshot: GPU 0 {st['state']}: {st.get('reason', '')}; ghosts {s.get('ghosts')}")
    return s, st


IDLE = used()
log(f"idle memory.used {IDLE} MiB")
monitor, m = start([sys.executable, os.path.join(HERE, "monitor.py")])
mon = m["ready"]

log("== A. forked child keeps its dead parent's memory; an NVML monitor must survive")
fk, ids = start([sys.executable, os.path.join(HERE, "forked.py"), "8"], want=("ready", "child"))
parent, child = ids["ready"], ids["child"]
os.kill(parent, signal.SIGKILL)
fk.wait()
time.sleep(0.5)
snap, st = snapshot_status()
ghosts = snap.get("ghosts") or []
check(any(g["pid"] == parent and child in (g.get("held_by") or []) for g in ghosts),
      f"snapshot names dead pid {parent} as a ghost held by its child {child}")
check(st["state"] != "free" and str(child) in st.get("reason", ""), f"GPU 0 is not free and its reason names the child {child}")
mh = {h["pid"]: h for h in snap["holders"]}.get(mon)
check(mh is not None and not mh["owner"], f"the NVML monitor {mon} is a holder but not an owner")
rc, res, msgs, _ = gpush_free()
check(rc == 0 and res["status"] == "ok", "free_gpus.lua frees GPU 0")
check(not alive(child), f"the child {child} was killed")
check(alive(mon), f"the NVML monitor {mon} is alive")
check(used() <= IDLE + 64, f"nvidia-smi back at idle ({used()} MiB)")

log("== B. a respawning supervisor (restart delay 2 s)")
loop = subprocess.Popen(["bash", "-c", f"while :; do {sys.executable} {HERE}/hold.py plain 2; sleep 2; done"],
                        stdout=subprocess.PIPE, text=True)
procs.append(loop)
loop.stdout.readline()
rc, res, msgs, dt = gpush_free("-e", "settle=10s")
text = " ".join(msgs) + " " + (res.get("error") or "")
check(rc == 2 and res["status"] == "failed", "free_gpus.lua does not say freed while the supervisor lives")
check(f"pid {loop.pid}" in text and "may restart its workers" in text, f"the report names the supervisor pid {loop.pid}")
log(f"MEASURED respawn caught {dt:.1f} s into the run")
rc, res, msgs, dt = gpush_free("-e", "settle=10s", "-e", "stop_restarters=true")
check(rc == 0 and res["status"] == "ok", "with stop_restarters=true the GPU is freed")
check(not alive(loop.pid), f"the supervisor {loop.pid} is gone")
time.sleep(8)
check(used() <= IDLE + 64 and not any(h for h in helper("snapshot")["holders"] if h["owner"]),
      "8 s later the GPU is still free (nothing came back)")
log(f"MEASURED free with a supervisor killed from the top, settle included: {dt:.1f} s")

log("== C. a holder in its own PID namespace")
ns, _ = hold(2, "unshare", "--pid", "--fork", "--mount-proc")
time.sleep(0.3)
snap, st = snapshot_status()
inner = [h for h in snap["holders"] if h["owner"] and len(h.get("nspid") or []) > 1]
check(len(inner) == 1 and inner[0]["nspid"][-1] == 1, f"the namespaced holder is found by its host pid ({[(h['pid'], h['nspid']) for h in inner]})")
rc, res, msgs, _ = gpush_free()
check(rc == 0 and used() <= IDLE + 64, "free_gpus.lua frees the namespaced holder")

log("== D. another user's holder, freed with a users filter")
mine, mi = hold(2)
try:
    theirs, ti = hold(2, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "HOME=/tmp")
except SystemExit as e:
    theirs = None
    check(False, f"start a holder as nobody: {e}")
if theirs is not None:
    time.sleep(0.3)
    rc, res, msgs, _ = gpush_free("-e", "users=nobody")
    text = " ".join(msgs) + " " + (res.get("error") or "")
    check(not alive(ti["ready"]), f"nobody's holder {ti['ready']} was killed")
    check(alive(mi["ready"]), f"root's holder {mi['ready']} was left alone")
    check(rc == 2 and f"pid {mi['ready']}" in text, "the host is not ok: GPU 0 is still held by root's holder, named")
mine.kill()
mine.wait()
time.sleep(0.5)

# E: kill-to-verified with the memory stream on, against the driver's release read by an
# independent NVML poller (see killverify.py). WAIT_INTERVAL=100ms is the default: the stream,
# not the interval, should set the latency.
WAIT_INTERVAL = os.environ.get("WAIT_INTERVAL", "100ms")
log(f"== E. kill to verified free, against the driver's release (memory stream, wait-free interval {WAIT_INTERVAL})")
monitor.kill()  # E's own poller replaces it
monitor.wait()
killverify.measure(HELPER, IDLE, (10, 100), runs=3, interval=WAIT_INTERVAL)

for p in procs:
    if p.poll() is None:
        p.kill()
log(f"{len(failures)} failed: {failures}" if failures else "ALL CHECKS PASSED")
sys.exit(1 if failures else 0)
