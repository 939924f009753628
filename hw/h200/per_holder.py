"""Per-holder facts on real hardware: per-GPU memory, containers vs units, and
wait-free for given holders against the driver's own release (run by run-per-holder.sh).

Real CUDA holders (torch) on GPU 0: bob (4 GiB) and alice (2 GiB).
  1. snapshot: each holder's mem_by_gpu is its own memory on GPU 0 (nvidia-smi's
     compute apps), unit/container as the cgroup says (no container scope as a unit);
  2. bob is SIGKILLed; wait-free for bob alone ends released while alice still holds
     GPU 0 (state held, nothing waited for), timed against the driver;
  3. wait-free for alice (alive) times out naming her with her memory on GPU 0.
Exits non-zero on any failed check.
"""
import json
import os
import signal
import subprocess
import sys
import time

from hwcheck import check, failures, log

HELPER = os.path.join(sys.argv[1], "gpush-helper-linux-amd64")
HERE = os.path.dirname(os.path.abspath(__file__))


def helper(verb, req=None):
    p = subprocess.run([HELPER, verb], input=json.dumps(req or {}).encode(), capture_output=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"helper {verb}: exit {p.returncode}: {p.stdout.decode()} {p.stderr.decode()}")
    return json.loads(p.stdout)


def hold(gib):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), "plain", str(gib)], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    if not line or line[0] != "ready":
        raise SystemExit("hold.py died before it was ready")
    return p, int(line[1])


bob_p, bob = hold(4)
alice_p, alice = hold(2)
try:
    log(subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip())
    s = helper("snapshot")
    by = {h["pid"]: h for h in s["holders"]}
    for pid, name in ((bob, "bob"), (alice, "alice")):
        h = by.get(pid, {})
        log(f"{name}: pid {pid} mem_mib {h.get('mem_mib')} mem_by_gpu {h.get('mem_by_gpu')} gpus {h.get('gpus')} "
            f"unit {h.get('unit')!r} container {h.get('container')!r} runtime {h.get('runtime')!r} cgroup {h.get('cgroup')!r}")
    hb, ha = by.get(bob, {}), by.get(alice, {})
    check(hb.get("mem_by_gpu", {}).get("0", 0) >= 4096 and ha.get("mem_by_gpu", {}).get("0", 0) >= 2048 and
          hb["mem_by_gpu"]["0"] != ha["mem_by_gpu"]["0"], "each holder's own memory on GPU 0 (mem_by_gpu)")
    check(len(hb.get("unit") or "") <= 64, "no container scope shown as the unit")

    ident = {k: hb[k] for k in ("pid", "start_time", "boot_id")}
    t0 = time.monotonic()
    os.kill(bob, signal.SIGKILL)
    r = helper("wait-free", {"holders": [ident], "timeout": "20s", "interval": "20ms"})
    dt = time.monotonic() - t0
    st = (r.get("status") or [{}])[0]
    log(f"wait for bob: {r['outcome']} in {dt * 1000:.0f} ms ({r['polls']} polls), GPU 0 {st.get('state')} "
        f"waiting {st.get('waiting')} reason {r.get('reason')!r}; used {r['timeline'][0]['used_mib']} -> {r['timeline'][-1]['used_mib']}")
    check(r["ok"] and r["outcome"] == "released", "bob's release waited for: released")
    check(st.get("state") == "held" and alice in (st.get("owners") or []) and not st.get("waiting"),
          "GPU 0 still held by alice, nothing of bob's left")

    ident = {k: ha[k] for k in ("pid", "start_time", "boot_id")}
    r = helper("wait-free", {"holders": [ident], "timeout": "1s"})
    log(f"wait for alice (alive): {r['outcome']}: {r.get('reason')}")
    check(not r["ok"] and r["outcome"] == "timed-out" and f"still held by pid {alice}" in r.get("reason", "") and "MiB" in r["reason"],
          "a given holder that stays is named with its memory")
finally:
    for p in (bob_p, alice_p):
        p.kill()
        p.wait()
log("FAILED: " + "; ".join(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
