"""Host CPU of one free on the lent H200: gpush's whole host side against the seeds' one-liner,
the same holders each time (hold.py: "one" a plain 10 GiB holder; "trio" that, a SIGTERM-ignoring
4 GiB one and an orphaned 6 GiB one).

  gpush     `gpush run free_gpus.lua -e grace=2s` over the gpush_command transport, whose command
            is cpuwrap.py around the host-side argv: every process gpush starts on the host (the
            warm check's sh, the helper's serve session with its nvidia-smi runs) is counted, the
            controller is not (it runs on another machine in a fleet). Warm: a gpu_status.lua
            run per build places the helper first.
  one-liner `bash -c 'fuser -k /dev/nvidia*; sleep 5; nvidia-smi --query-gpu=...'` under the same
            wrapper (no systemctl here: the H200 runs no systemd).

usage: host_cpu.py RUNS DIR...   (each DIR holds gpush; its name labels the build)
"""
import os
import statistics
import subprocess
import sys
import tempfile

from hwcheck import check, log, failures
from free_ratio import holders

HERE = os.path.dirname(os.path.abspath(__file__))
WRAP = os.path.join(HERE, "cpuwrap.py")


def inventory(d, cpulog):
    path = os.path.join(d, "inv.yaml")
    with open(path, "w") as f:
        f.write("all:\n  hosts:\n    h200:\n      ansible_connection: gpush_command\n"
                f"      gpush_command: [{sys.executable!r}, {WRAP!r}, {cpulog!r}, '{{argv}}']\n")
    return path


def cpu_of(cpulog):
    total, n = 0.0, 0
    if os.path.exists(cpulog):
        for ln in open(cpulog):
            total += float(ln.split()[0])
            n += 1
    return total, n


def free_gpush(build, scenario, d):
    cpulog = os.path.join(d, f"cpu-{os.path.basename(build)}.log")
    inv = inventory(d, cpulog)
    pids, procs = holders(scenario)
    if os.path.exists(cpulog):
        os.remove(cpulog)
    g = subprocess.run([os.path.join(build, "gpush"), "run", "free_gpus.lua", "-i", inv, "-e", "grace=2s"],
                       capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, cwd=HERE)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    name = os.path.basename(build)
    check(g.returncode == 0 and "freed 1/1 GPUs" in g.stdout,
          f"{name} {scenario}: exit {g.returncode}, {g.stdout.strip()[-300:] or g.stderr[-300:]}")
    cpu, n = cpu_of(cpulog)
    log(f"CPU {name} {scenario}: {1000*cpu:.0f} ms on the host in {n} commands: "
        + "; ".join(ln.strip() for ln in open(cpulog)) if n else f"CPU {name} {scenario}: no commands logged")
    return cpu


def free_oneliner(scenario, d):
    cpulog = os.path.join(d, "cpu-oneliner.log")
    if os.path.exists(cpulog):
        os.remove(cpulog)
    pids, procs = holders(scenario)
    smi = "/usr/local/nvidia/bin/nvidia-smi"
    o = subprocess.run([sys.executable, WRAP, cpulog, "bash", "-c",
                        f"fuser -k /dev/nvidia*; sleep 5; {smi} --query-gpu=index,memory.used,memory.total --format=csv"],
                       capture_output=True, text=True)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    check(o.returncode == 0, f"one-liner {scenario}: exit {o.returncode} {o.stderr[-300:]}")
    cpu, _ = cpu_of(cpulog)
    log(f"CPU one-liner {scenario}: {1000*cpu:.0f} ms ({o.stdout.strip().splitlines()[-1] if o.stdout.strip() else ''})")
    return cpu


def main():
    runs, builds = int(sys.argv[1]), [os.path.abspath(b) for b in sys.argv[2:]]
    d = tempfile.mkdtemp(prefix="gpush-hostcpu-")
    for b in builds:
        inv = inventory(d, os.path.join(d, "warm.log"))
        w = subprocess.run([os.path.join(b, "gpush"), "run", "gpu_status.lua", "-i", inv], capture_output=True, text=True, cwd=HERE)
        check(w.returncode == 0, f"warm-up {b}: exit {w.returncode} {w.stdout[-300:]} {w.stderr[-300:]}")
    cpus = {}
    for _ in range(runs):
        for scenario in ("one", "trio"):
            for b in builds:
                cpus.setdefault((os.path.basename(b), scenario), []).append(free_gpush(b, scenario, d))
            cpus.setdefault(("one-liner", scenario), []).append(free_oneliner(scenario, d))
    for (name, scenario), xs in sorted(cpus.items()):
        base = statistics.median(cpus[("one-liner", scenario)])
        log(f"RESULT {name} {scenario}: host CPU per free over {len(xs)} runs: median {1000*statistics.median(xs):.0f} ms "
            f"({' '.join(f'{1000*x:.0f}' for x in xs)}); / one-liner median {statistics.median(xs)/base:.2f}x")
    log(f"{len(failures)} failed: {failures}" if failures else "ALL CHECKS PASSED")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
