"""Kill-to-verified on real hardware: against the driver's release, memory stream on.

For each size: an NVML poller (monitor.py FILE, every 2 ms, independent of gpush) and a torch
holder start; then `gpush-helper wait-free` starts and is left waiting (its first poll sees the
holder; its nvidia-smi -lms memory stream is reading by then, as in a script's wait after a
systemd stop). Then SIGKILL goes to the holder, from here, at t0:
  release  = the poller's first reading at idle + 64 MiB or less, minus t0 (the driver's time)
  verified = wait-free's freed answer (its stdout closing), minus t0
and the ratio verified/release. The goal: at most 1.5.

Used by truth.py (section E); alone: python3 killverify.py BIN-DIR [GIB...]
Prints "MEASURED kill-to-verified ..." per run and one "RESULT kill-to-verified ..." line.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from hwcheck import check, log

HERE = os.path.dirname(os.path.abspath(__file__))


def _ready(p):
    line = p.stdout.readline()
    k, _, v = line.strip().partition(" ")
    if k != "ready":
        raise SystemExit(f"{p.args} died before it was ready ({line!r})")
    return int(v)


def stream_children(ppid):
    """The pids of ppid's children running nvidia-smi with -lms: wait-free's memory stream."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != ppid:
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if b"-lms" in argv and os.path.basename(argv[0]) == b"nvidia-smi":
            out.append(int(d))
    return out


def measure(helper, idle, sizes=(10, 100), runs=3, interval="100ms"):
    """Runs the measurement; returns the ratios. interval is wait-free's poll interval: the
    stream, not it, should set the latency (100ms is the default)."""
    ratios = []
    for gib in sizes:
        for run in range(runs):
            stamp = f"/tmp/gpush-release-{gib}-{run}"
            if os.path.exists(stamp):
                os.remove(stamp)
            poller = subprocess.Popen([sys.executable, os.path.join(HERE, "monitor.py"), stamp],
                                      stdout=subprocess.PIPE, text=True, env={**os.environ, "IDLE_MIB": str(idle)})
            hp = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), "plain", str(gib)],
                                  stdout=subprocess.PIPE, text=True)
            try:
                _ready(poller)
                pid = _ready(hp)
                wf = subprocess.Popen([helper, "wait-free"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
                wf.stdin.write(json.dumps({"timeout": "30s", "interval": interval}).encode())
                wf.stdin.close()
                time.sleep(1.0)  # its first poll and the stream's first readings
                if wf.poll() is not None:
                    check(False, f"{gib} GiB: wait-free still waiting while the holder lives "
                                 f"(exit {wf.returncode}: {wf.stdout.read()!r} {wf.stderr.read()!r})")
                    continue
                streams = stream_children(wf.pid)
                check(len(streams) == 1, f"{gib} GiB run {run}: wait-free reads memory from one nvidia-smi -lms "
                                         f"stream while it waits (children {streams})")
                t0 = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                out = wf.stdout.read()  # the answer comes as it ends
                t1 = time.monotonic()
                wf.wait()
                for _ in range(300):
                    if os.path.exists(stamp) and open(stamp).read().strip():
                        break
                    time.sleep(0.01)
                try:
                    rel = float(open(stamp).read().split()[0])
                except (OSError, IndexError, ValueError):
                    check(False, f"{gib} GiB run {run}: the NVML poller saw no release")
                    continue
                r = json.loads(out)
                check(r.get("ok") and r.get("outcome") == "freed",
                      f"{gib} GiB run {run}: wait-free says freed ({r.get('outcome')}: {r.get('reason', '')})")
                check("memory stream" not in r.get("reason", ""),
                      f"{gib} GiB run {run}: the memory stream lasted the wait ({r.get('reason', '')!r})")
                ratio = (t1 - t0) / (rel - t0)
                ratios.append(ratio)
                log(f"MEASURED kill-to-verified {gib} GiB run {run}: driver released {1000*(rel-t0):.1f} ms after "
                    f"SIGKILL, wait-free said freed at {1000*(t1-t0):.1f} ms ({r.get('polls')} polls in "
                    f"{r.get('elapsed')}): ratio {ratio:.2f}")
            finally:
                for p in (hp, poller):
                    if p.poll() is None:
                        p.kill()
                    p.wait()
    if ratios:
        met = max(ratios) <= 1.5
        log(f"RESULT kill-to-verified/release over {len(ratios)} runs: median {statistics.median(ratios):.2f}, "
            f"worst {max(ratios):.2f} (goal <= 1.5: {'met' if met else 'NOT met'})")
    return ratios


if __name__ == "__main__":
    bin_dir = sys.argv[1]
    sizes = tuple(int(a) for a in sys.argv[2:]) or (10, 100)
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    idle = int(out.splitlines()[0])
    log(f"idle memory.used {idle} MiB")
    measure(os.path.join(bin_dir, "gpush-helper-linux-amd64"), idle, sizes,
            interval=os.environ.get("WAIT_INTERVAL", "100ms"))
    from hwcheck import failures
    log(f"{len(failures)} failed: {failures}" if failures else "ALL CHECKS PASSED")
    sys.exit(1 if failures else 0)
