"""The whole free against the driver's release (the lent H200): `gpush run free_gpus.lua -i
localhost -e grace=2s` against real torch holders, each build in turn, alternating.

  whole   = gpush's wall time, from just before its exec to its exit (time.time() around the run)
  release = the driver's release after the holders' death: release_probe.py, a protected NVML
            probe polling every 1 ms, sees the last holder dead (gone or a zombie), then GPU 0's
            used memory back at idle + 64 MiB or less; release = the second minus the first
  ratio   = whole / release (goal: at most 1.2)

Scenarios: "one", a plain 10 GiB holder; "trio", run-free.sh's: a plain 10 GiB, a SIGTERM-ignoring
4 GiB and an orphaned 6 GiB one (its parent killed first). Each run is traced (GPUSH_TRACE): the
trace's lines are printed against the exec, with the probe's death and release, for the first
run of each build and scenario, and "TIMES" sums up each run.

usage: free_ratio.py RUNS DIR...   (each DIR holds gpush; its name labels the build)
"""
import json
import os
import statistics
import subprocess
import sys
import time

from hwcheck import check, log, failures

HERE = os.path.dirname(os.path.abspath(__file__))


def ready(p):
    line = p.stdout.readline()
    if not line.startswith("ready"):
        raise SystemExit(f"{p.args} died before it was ready ({line!r})")


def holders(scenario):
    """Starts the scenario's holders; returns (their pids, processes to reap)."""
    hold = os.path.join(HERE, "hold.py")
    procs = [subprocess.Popen([sys.executable, hold, "plain", "10"], stdout=subprocess.PIPE, text=True)]
    if scenario == "trio":
        procs.append(subprocess.Popen([sys.executable, hold, "ignore-term", "4"], stdout=subprocess.PIPE, text=True))
        procs.append(subprocess.Popen([sys.executable, hold, "parent", "3", "6"], stdout=subprocess.PIPE, text=True))
    pids = []
    for p in procs[:2]:
        ready(p)
        pids.append(p.pid)
    if scenario == "trio":
        parent = procs[2]
        # The parent and its child share stdout: two "ready PID" lines, in either order.
        got = [int(parent.stdout.readline().split()[1]) for _ in range(2)]
        parent.kill()
        parent.wait()
        pids += [x for x in got if x != parent.pid]
        time.sleep(0.5)
    return pids, procs


def one(build, scenario, idle, show):
    pids, procs = holders(scenario)
    probe = subprocess.Popen([sys.executable, os.path.join(HERE, "release_probe.py"), str(idle), *map(str, pids)],
                             stdout=subprocess.PIPE, text=True)
    ready(probe)
    time.sleep(0.3)
    trace = f"/tmp/gpush-trace-{os.getpid()}"
    if os.path.exists(trace):
        os.remove(trace)
    env = {**os.environ, "GPUSH_TRACE": trace, "NO_COLOR": "1"}
    t0 = time.time()
    g = subprocess.run([os.path.join(build, "gpush"), "run", "free_gpus.lua", "-i", "localhost", "-e", "grace=2s"],
                       capture_output=True, text=True, env=env, cwd=HERE)
    t1 = time.time()
    r = json.loads(probe.stdout.readline())
    probe.wait()
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    lines = open(trace).read().splitlines() if os.path.exists(trace) else []
    name = os.path.basename(build.rstrip("/"))
    check(g.returncode == 0 and "freed 1/1 GPUs" in g.stdout,
          f"{name} {scenario}: exit {g.returncode}, {g.stdout.strip().splitlines()[-1] if g.stdout.strip() else g.stderr[-300:]}")
    if r["death"] is None or r["release"] is None:
        check(False, f"{name} {scenario}: the probe saw death {r['death']} release {r['release']}")
        return None
    whole, rel = t1 - t0, r["release"] - r["death"]
    if rel <= 0:
        # The memory came back before the last holder was seen dead: no driver latency to compare.
        log(f"SKIP {name} {scenario}: released {1000*(r['release']-t0):.0f} ms, last death {1000*(r['death']-t0):.0f} ms after the exec")
        return None
    smi = [ln for ln in lines if " exec nvidia-smi " in ln]
    after = [ln for ln in smi if int(ln.split()[1]) / 1e6 > r["release"]]
    log(f"TIMES {name} {scenario}: whole {1000*whole:.0f} ms; exec->death {1000*(r['death']-t0):.0f}, "
        f"death->release {1000*rel:.0f}, release->exit {1000*(t1-r['release']):.0f} ms; ratio {whole/rel:.2f}; "
        f"nvidia-smi one-shots {len(smi)}, {len(after)} after the release")
    if show:
        events = [(int(ln.split()[1]) / 1e6, ln.split(" ", 2)[2]) for ln in lines]
        events += [(r["death"], "PROBE: last holder dead"), (r["release"], "PROBE: driver released"), (t1, "exit seen")]
        for t, what in sorted(events):
            log(f"  {1000*(t-t0):8.1f} ms  {what}")
    return whole / rel


def main():
    runs, builds = int(sys.argv[1]), [os.path.abspath(b) for b in sys.argv[2:]]
    idle = int(subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, check=True).stdout.splitlines()[0])
    log(f"idle memory.used {idle} MiB")
    ratios = {}
    for run in range(runs):
        for scenario in ("one", "trio"):
            for b in builds:
                x = one(b, scenario, idle, show=run == 0)
                if x is not None:
                    ratios.setdefault((os.path.basename(b), scenario), []).append(x)
    for (name, scenario), xs in sorted(ratios.items()):
        log(f"RESULT {name} {scenario}: whole/release over {len(xs)} runs: median {statistics.median(xs):.2f}, "
            f"best {min(xs):.2f}, worst {max(xs):.2f} ({' '.join(f'{x:.2f}' for x in xs)})")
    log(f"{len(failures)} failed: {failures}" if failures else "ALL CHECKS PASSED")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
