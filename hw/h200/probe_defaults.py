"""Facts behind the truth rules' defaults, measured on the lent H200 (run by
hw/h200/run-probe-defaults.sh):

1. How long a restarted CUDA worker takes to come back: from fork/exec to its
   first /dev/nvidia* fd, to nvidia-uvm, to its memory being allocated. The
   settle time a free must wait while a supervisor lives is chosen from this.
2. What the driver shows for a forked child that inherits a parent's device
   files after the parent dies (memory charged to a dead pid?).
3. What an NVML monitor (pynvml) holds: device files, uvm, compute-app listing.
4. What pid nvidia-smi reports for a holder in its own PID namespace.
5. How long the driver takes to release 10 and 100 GiB after SIGKILL, NVML
   polled every 2 ms.
"""
import os
import signal
import subprocess
import sys
import time

import pynvml

HERE = os.path.dirname(os.path.abspath(__file__))
HOLD = os.path.join(HERE, "hold.py")


def nv_fds(pid):
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("/dev/nvidia"):
                out.add(link)
    except OSError:
        pass
    return out


def apps():
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return {p.pid: (p.usedGpuMemory or 0) >> 20 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}


def used_mib():
    """memory.used as nvidia-smi reports it (NVML's v2 memory info: reserved memory not counted)."""
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used >> 20


IDLE = 0


def wait_ready(p):
    line = p.stdout.readline()
    assert line.startswith("ready"), line
    return int(line.split()[1])


def respawn_timing(runs=3):
    print("== 1. worker start: fork -> first /dev/nvidia* fd -> nvidia-uvm -> listed by NVML -> ready")
    for i in range(runs):
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, HOLD, "plain", "1"], stdout=subprocess.PIPE, text=True)
        first = uvm = listed = None
        while True:
            fds = nv_fds(p.pid)
            now = time.monotonic() - t0
            if fds and first is None:
                first = now
                first_set = sorted(fds)
            if "/dev/nvidia-uvm" in fds and uvm is None:
                uvm = now
            if listed is None and p.pid in apps():
                listed = now
            if listed is not None:
                break
            time.sleep(0.005)
        wait_ready(p)
        ready = time.monotonic() - t0
        print(f"run {i}: first nvidia fd {first*1000:.0f} ms ({','.join(first_set)}), uvm {uvm*1000:.0f} ms, "
              f"NVML lists it {listed*1000:.0f} ms, memory allocated (ready) {ready*1000:.0f} ms; "
              f"fds when listed: {sorted(nv_fds(p.pid))}")
        p.kill()
        p.wait()
    time.sleep(0.5)


def forked_child():
    print("== 2. forked child inherits the parent's device files; the parent is killed")
    code = ("import os,sys,time,torch\n"
            "b=torch.empty(8<<30,dtype=torch.uint8,device='cuda'); b.fill_(1); torch.cuda.synchronize()\n"
            "pid=os.fork()\n"
            "if pid==0:\n"
            "    print('child',os.getpid(),flush=True); time.sleep(3600)\n"
            "print('ready',os.getpid(),flush=True); time.sleep(3600)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    lines = [p.stdout.readline().split(), p.stdout.readline().split()]
    parent = int([l for l in lines if l[0] == "ready"][0][1])
    child = int([l for l in lines if l[0] == "child"][0][1])
    time.sleep(0.3)
    print(f"parent {parent} child {child}; NVML apps {apps()}; used {used_mib()} MiB")
    print(f"child fds {sorted(nv_fds(child))}")
    os.kill(parent, signal.SIGKILL)
    p.wait()
    time.sleep(1.0)
    print(f"after SIGKILL of parent: NVML apps {apps()}; used {used_mib()} MiB; parent exists: {os.path.exists(f'/proc/{parent}')}")
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    print(f"nvidia-smi compute apps: {out!r}")
    os.kill(child, signal.SIGKILL)
    t0 = time.monotonic()
    while used_mib() > IDLE + 64 and time.monotonic() - t0 < 5:
        time.sleep(0.002)
    print(f"after SIGKILL of child: used {used_mib()} MiB after {1000*(time.monotonic()-t0):.0f} ms")


def monitor():
    print("== 3. an NVML monitor (pynvml in another process)")
    code = ("import pynvml,time,os\npynvml.nvmlInit()\nh=pynvml.nvmlDeviceGetHandleByIndex(0)\n"
            "pynvml.nvmlDeviceGetMemoryInfo(h)\nprint('ready',os.getpid(),flush=True)\ntime.sleep(3600)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid = wait_ready(p)
    time.sleep(0.2)
    print(f"monitor {pid} fds {sorted(nv_fds(pid))}; listed by NVML: {pid in apps()}; used {used_mib()} MiB")
    p.kill()
    p.wait()


def pidns():
    print("== 4. a holder in its own PID namespace (unshare --pid --fork)")
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, HOLD, "plain", "2"],
                         stdout=subprocess.PIPE, text=True)
    inner = wait_ready(p)
    time.sleep(0.3)
    a = apps()
    hostpids = [pid for pid in a]
    print(f"inside pid {inner}; NVML apps (host view) {a}")
    for pid in hostpids:
        try:
            with open(f"/proc/{pid}/status") as f:
                ns = [l for l in f if l.startswith("NSpid")]
            print(f"  /proc/{pid} NSpid: {ns[0].strip() if ns else '?'}")
        except OSError as e:
            print(f"  /proc/{pid}: {e}")
    p.kill()
    subprocess.run(["pkill", "-9", "-f", "hold.py plain 2"])
    p.wait()
    time.sleep(0.5)


def release(gib):
    p = subprocess.Popen([sys.executable, HOLD, "plain", str(gib)], stdout=subprocess.PIPE, text=True)
    pid = wait_ready(p)
    before = used_mib()
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while used_mib() > IDLE + 64 and time.monotonic() - t0 < 10:
        time.sleep(0.002)
    dt = time.monotonic() - t0
    p.wait()
    print(f"{gib} GiB: {before} MiB -> {used_mib()} MiB {dt*1000:.1f} ms after SIGKILL (NVML every 2 ms)")


def main():
    global IDLE
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h).used >> 20
    v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    IDLE = used_mib()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.reserved,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    print(f"idle: NVML v1 used {v1} MiB; v2 used {v2.used >> 20} MiB reserved {v2.reserved >> 20} MiB; "
          f"nvidia-smi used,reserved,total: {smi.stdout.strip()!r} {smi.stderr.strip()!r}")
    if "release" not in sys.argv[1:]:
        respawn_timing()
        forked_child()
        monitor()
        pidns()
    print("== 5. driver release after SIGKILL")
    for gib in (10, 10, 100, 100):
        release(gib)


if __name__ == "__main__":
    main()
