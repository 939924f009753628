"""What brings a worker back, on real hardware (run by run-restarters.sh): gpush must never say
"freed" while something that restarts the worker lives, and must free for good when asked to
stop it. Real CUDA workers (torch, hold.py) on GPU 0:
  A. a worker's start-to-open time (start -> /dev/nvidiaN open -> memory held), 5 samples:
     what WorkerOpenTime (modules/gpu) must cover;
  B. a supervisor slower than the settle (restart 15 s after each death): free_gpus.lua fails
     naming it and the command that stops it, and the worker does come back; with
     stop_restarters=true the GPU is freed and still free 20 s later;
  C. a growing back-off (1, 2, 4, 8, 16 s): five runs in a row, none says freed;
  D. a plain 4 GiB worker beside a protected name owning 1 GiB (a disguised dcgm-exporter): the
     worker is freed, the GPU fails for the suspicious share alone, named with its MiB.
Exits non-zero on any failed check.
"""
import json
import os
import signal
import subprocess
import sys
import time

from hwcheck import alive, check, failures, log, used

BIN = sys.argv[1]
SECTIONS = sys.argv[2] if len(sys.argv) > 2 else "ABCD"
GPUSH = os.path.join(BIN, "gpush")
HELPER = os.path.join(BIN, "gpush-helper-linux-amd64")
HERE = os.path.dirname(os.path.abspath(__file__))
procs = []




def owners():
    p = subprocess.run([HELPER, "snapshot"], input=b"{}", capture_output=True, timeout=120)
    return [h for h in json.loads(p.stdout)["holders"] if h.get("owner")]


def gpush(script, *extra):
    t0 = time.monotonic()
    p = subprocess.run([GPUSH, "run", script, "-i", "localhost", "--json", *extra],
                       capture_output=True, text=True, timeout=300)
    dt = time.monotonic() - t0
    res = {}
    for line in p.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("host") == "localhost":
            res = o
    msgs = [e["message"] for e in res.get("log") or []]
    log(f"gpush run {script} {' '.join(extra)}: exit {p.returncode}, {res.get('status')} in {dt:.1f} s")
    for m in msgs:
        log("   |", m)
    if res.get("error"):
        log("   error:", res["error"])
    return p.returncode, res, " ".join(msgs) + " " + (res.get("error") or ""), dt


def free(*extra):
    return gpush("free_gpus.lua", "-e", "grace=2s", *extra)


def supervisor(gib, delays):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "supervise.py"), str(gib), delays],
                         stdout=subprocess.PIPE, text=True)
    procs.append(p)
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit("the supervisor died before its worker was ready")
        if line.startswith("ready"):
            return p


def wait_owner(timeout):
    """Seconds until GPU 0 has an owner again, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if owners():
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def nvidia_open(pid):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
            if t.startswith("/dev/nvidia") and t[len("/dev/nvidia"):].isdigit():
                return True
    except OSError:
        pass
    return False


IDLE = used()
log(f"idle memory.used {IDLE} MiB")


def section_A():
    log("== A. a worker's start-to-open time")
    opens, readies = [], []
    for i in range(5):
        t0 = time.monotonic()
        w = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), "plain", "1"], stdout=subprocess.PIPE, text=True)
        while not nvidia_open(w.pid) and w.poll() is None:
            time.sleep(0.01)
        opens.append(time.monotonic() - t0)
        w.stdout.readline()
        readies.append(time.monotonic() - t0)
        w.kill()
        w.wait()
    log("MEASURED start -> /dev/nvidia0 open: " + ", ".join(f"{x:.2f}" for x in opens) + " s")
    log("MEASURED start -> 1 GiB held: " + ", ".join(f"{x:.2f}" for x in readies) + " s")
    check(max(readies) < 8, f"WorkerOpenTime (8 s) covers every start-to-held ({max(readies):.2f} s)")
    time.sleep(1)


def section_B():
    log("== B. a supervisor slower than the settle (restarts 15 s after each death)")
    sup = supervisor(4, "15")
    rc, res, text, dt = gpush("gpu_holders.lua", "-e", "shared=false")
    check(f"pid {sup.pid}" in json.dumps(res), f"gpu_holders.lua names the worker's manager pid {sup.pid}")
    rc, res, text, dt = free()
    check(rc == 2 and res.get("status") == "failed", "free_gpus.lua fails while the slow supervisor lives")
    check("freed" not in text.replace("not freed", ""), "nothing says freed")
    check(f"pid {sup.pid}" in text and f"kill {sup.pid}" in text, f"the reason names the supervisor pid {sup.pid} and how to stop it")
    back = wait_owner(30)
    check(back is not None, f"the worker does come back ({back and round(back, 1)} s after the run)")
    rc, res, text, dt = free("-e", "stop_restarters=true")
    check(rc == 0 and res.get("status") == "ok", "with stop_restarters=true the GPU is freed")
    check(not alive(sup.pid), f"the supervisor {sup.pid} is stopped")
    log(f"MEASURED free with stop_restarters, settle included: {dt:.1f} s")
    time.sleep(20)
    check(used() <= IDLE + 64 and not owners(), f"20 s later GPU 0 is still free ({used()} MiB)")


def section_C():
    log("== C. a growing back-off (1, 2, 4, 8, 16 s): five runs, none says freed")
    sup = supervisor(2, "1,2,4,8,16")
    for n in range(5):
        if not owners() and wait_owner(40) is None:
            check(False, f"run {n + 1}: the worker came back")
            break
        rc, res, text, dt = free()
        check(rc == 2 and f"pid {sup.pid}" in text, f"run {n + 1}: fails naming the supervisor pid {sup.pid}")
    os.kill(sup.pid, signal.SIGKILL)
    sup.wait()
    for h in owners():
        os.kill(h["pid"], signal.SIGKILL)
    time.sleep(2)


def section_D():
    log("== D. a plain worker beside a protected name that owns memory")
    spoof = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), "plain", "1"], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "HOLD_COMM": "dcgm-exporter"})
    procs.append(spoof)
    spoof.stdout.readline()
    plain = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), "plain", "4"], stdout=subprocess.PIPE, text=True)
    procs.append(plain)
    plain.stdout.readline()
    rc, res, text, dt = free()
    check(rc == 2, "the GPU fails (a suspicious share is left)")
    check(not alive(plain.pid), f"the plain worker {plain.pid} is freed")
    check(alive(spoof.pid), f"the suspicious holder {spoof.pid} is left (no force)")
    check("MiB: protected name dcgm" in text and "4096" not in text,
          "the reason names the suspicious share with its MiB, not the freed one")
    log(f"after: {used()} MiB (idle {IDLE})")


for name in SECTIONS:
    globals()["section_" + name]()
for p in procs:
    if p.poll() is None:
        p.kill()
log(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
