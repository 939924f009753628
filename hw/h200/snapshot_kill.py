"""Real-hardware check of gpush-helper on a host with NVIDIA GPUs (run by run-snapshot-kill.sh).

Starts real CUDA holders (plain, SIGTERM-ignoring, a parent whose child is orphaned),
then checks that `gpush-helper snapshot` lists each with the right GPU and memory
matching nvidia-smi, that killing the parent leaves an orphan the helper still finds,
and that `kill` + `wait-free` bring the GPU back to its idle baseline. Prints a log
and the measured time from kill to verified free; exits non-zero on any mismatch.
"""
import json
import os
import subprocess
import sys
import time

from hwcheck import check, failures, log

HELPER = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def helper(verb, req):
    t0 = time.monotonic()
    p = subprocess.run([HELPER, verb], input=json.dumps(req).encode(), capture_output=True, timeout=120)
    dt = (time.monotonic() - t0) * 1000
    if p.returncode != 0:
        log(f"helper {verb} exit {p.returncode}: {p.stdout.decode()} {p.stderr.decode()}")
        raise SystemExit(1)
    return json.loads(p.stdout), dt


def smi(*args):
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True).stdout


def compute_apps():
    out = smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    return {int(p): int(m) for p, m in (l.split(", ") for l in out.strip().splitlines() if l)}


def used():
    out = smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
    return {int(i): int(m) for i, m in (l.split(", ") for l in out.strip().splitlines())}


def start(*args, expect=1):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), *args], stdout=subprocess.PIPE, text=True)
    pids = []
    while len(pids) < expect:
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"holder {args} died before ready")
        if line.startswith("ready "):
            pids.append(int(line.split()[1]))
    return p, pids


def holders_by_pid(snap):
    return {h["pid"]: h for h in snap["holders"]}


baseline = used()
log("idle memory.used per GPU:", baseline)
version = subprocess.run([HELPER, "version"], capture_output=True, text=True).stdout.strip()
log("helper:", version, "size", os.path.getsize(HELPER), "bytes")

plain, (p_plain,) = start("plain", "10")
stubborn, (p_stub,) = start("ignore-term", "4")
parent, pids = start("parent", "3", "6", expect=2)
p_parent = parent.pid
p_child = [p for p in pids if p != p_parent][0]
log(f"holders: plain={p_plain} ignore-term={p_stub} parent={p_parent} child={p_child}")
time.sleep(0.5)

snap, dt = helper("snapshot", {})
log(f"snapshot took {dt:.1f} ms; smi={snap['smi']} gpus={[(g['index'], g['mem_used_mib'], g['mem_total_mib']) for g in snap['gpus']]}")
for w in snap.get("warnings") or []:
    log("warning:", w)
apps = compute_apps()
hs = holders_by_pid(snap)
for h in snap["holders"]:
    log(f"  pid={h['pid']} ppid={h['ppid']} comm={h['comm']} state={h['state']} gpus={h['gpus']} mem={h['mem_mib']} shared_only={h['shared_only']} protected={h['protected']} devices={h['devices']}")
for name, pid in [("plain", p_plain), ("ignore-term", p_stub), ("parent", p_parent), ("child", p_child)]:
    h = hs.get(pid)
    check(h is not None, f"snapshot lists the {name} holder {pid}")
    if h:
        check(h["gpus"] == [0], f"{name} holder is on GPU 0 (got {h['gpus']})")
        check(h["mem_mib"] == apps.get(pid), f"{name} memory {h['mem_mib']} MiB matches nvidia-smi {apps.get(pid)} MiB")
smi_total = used()[0]
check(snap["gpus"][0]["mem_used_mib"] > 0 and abs(snap["gpus"][0]["mem_used_mib"] - smi_total) < 1024,
      f"GPU 0 used {snap['gpus'][0]['mem_used_mib']} MiB vs nvidia-smi {smi_total} MiB")

# Kill the parent alone: its child must survive as an orphan that the helper still finds.
ph = hs[p_parent]
kr, dt = helper("kill", {"targets": [{"pid": ph["pid"], "start_time": ph["start_time"], "boot_id": ph["boot_id"]}], "grace": "3s"})
log(f"kill parent: {[(r['pid'], r['outcome']) for r in kr['results']]} in {dt:.0f} ms")
parent.wait(timeout=10)
snap2, _ = helper("snapshot", {})
orphan = holders_by_pid(snap2).get(p_child)
check(orphan is not None and orphan["ppid"] != p_parent, f"orphaned child {p_child} still listed, re-parented to {orphan and orphan['ppid']}")
check(orphan is not None and orphan["mem_mib"] > 5000, f"orphan still holds its memory ({orphan and orphan['mem_mib']} MiB)")

# A stale identity (right pid, wrong start time) must never be signalled.
st = holders_by_pid(snap2)[p_plain]
kr, _ = helper("kill", {"targets": [{"pid": p_plain, "start_time": st["start_time"] + 1, "boot_id": st["boot_id"]}], "grace": "1s"})
check(kr["results"][0]["outcome"] == "skipped" and plain.poll() is None, f"stale identity skipped ({kr['results'][0].get('reason')}), process alive")

# Kill everything left, then verify free.
targets = [{"pid": h["pid"], "start_time": h["start_time"], "boot_id": h["boot_id"]} for h in snap2["holders"] if not h["protected"]]
t0 = time.monotonic()
kr, kill_ms = helper("kill", {"targets": targets, "grace": "2s"})
wf, wf_ms = helper("wait-free", {"timeout": "30s"})
total_ms = (time.monotonic() - t0) * 1000
for r in kr["results"]:
    log(f"  kill pid={r['pid']} comm={r['comm']} outcome={r['outcome']} signals={r.get('signals')} reason={r.get('reason', '')}")
check({r["pid"]: r["outcome"] for r in kr["results"]}.get(p_stub) == "killed", "SIGTERM-ignoring holder needed KILL")
check(all(r["outcome"] in ("exited", "killed") for r in kr["results"]), "every holder gone after kill")
log(f"wait-free: ok={wf['ok']} outcome={wf['outcome']} polls={wf['polls']} elapsed={wf['elapsed']} thresholds={wf.get('threshold_mib')}")
for s in wf["timeline"][:5] + wf["timeline"][-3:]:
    log("  t", s["t"], "used", s["used_mib"], "holders", s["holders"])
check(wf["ok"] and wf["outcome"] == "freed", "wait-free says freed")
after = used()
check(all(after[i] <= baseline[i] for i in baseline), f"nvidia-smi back at idle baseline {baseline}: {after}")
log(f"MEASURED kill (grace 2s, one holder ignores TERM) {kill_ms:.0f} ms + wait-free {wf_ms:.0f} ms = {total_ms:.0f} ms from kill to verified free")

# Without a stubborn holder: a plain holder, kill to verified free.
plain2, (p2,) = start("plain", "8")
snap3, _ = helper("snapshot", {})
h = holders_by_pid(snap3)[p2]
t0 = time.monotonic()
kr, kill_ms = helper("kill", {"targets": [{"pid": h["pid"], "start_time": h["start_time"], "boot_id": h["boot_id"]}], "grace": "5s"})
wf, wf_ms = helper("wait-free", {"timeout": "30s"})
total_ms = (time.monotonic() - t0) * 1000
check(wf["ok"], f"plain 8 GiB holder freed ({wf['outcome']})")
log(f"MEASURED plain holder: kill {kill_ms:.0f} ms ({kr['results'][0]['outcome']}) + wait-free {wf_ms:.0f} ms ({wf['polls']} polls) = {total_ms:.0f} ms from kill to verified free")

for p in (plain, stubborn, plain2):
    p.kill()
log(f"{len(failures)} failed: {failures}" if failures else "ALL CHECKS PASSED")
sys.exit(1 if failures else 0)
