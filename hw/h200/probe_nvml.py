"""One-process probe (the lent H200: python3 hw/h200/probe_nvml.py): what would a free's GPU
readings cost the host if the helper asked NVML itself instead of starting nvidia-smi? A fresh
child process loads libnvidia-ml through ctypes and times, in CPU (getrusage of the child, every
thread) and wall, each step a free needs: the library's load, nvmlInit_v2, the device handles, one
memory reading and one compute-apps listing per GPU (each repeated to get a per-call figure), and
nvmlShutdown. Beside it, in the same run, the nvidia-smi one-shots the helper starts today (CPU
from wait4) and a run nvidia-smi refuses for its arguments (what its start costs before any NVML
call). A torch holder (hold.py, 10 GiB) runs throughout so that the listing is not empty."""
import os
import subprocess
import sys

SMI = "nvidia-smi"
REPEAT = 200

# The child: ctypes only, so that the figures are NVML's and not a Python binding's.
CHILD = r"""
import ctypes, resource, sys, time

def now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return 1000 * (r.ru_utime + r.ru_stime), 1000 * time.monotonic()

class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

class Proc(ctypes.Structure):  # nvmlProcessInfo_t of the _v3 calls
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

n = int(sys.argv[1])
steps = []
c0, w0 = now()
def step(name, calls=1):
    global c0, w0
    c, w = now()
    steps.append((name, (c - c0) / calls, (w - w0) / calls, calls))
    c0, w0 = now()

lib = ctypes.CDLL("libnvidia-ml.so.1")
step("load libnvidia-ml")
rc = lib.nvmlInit_v2()
assert rc == 0, "nvmlInit_v2: %d" % rc
step("nvmlInit_v2")
count = ctypes.c_uint()
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
handles = []
for i in range(count.value):
    h = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    handles.append(h)
step("count and handles")
mem = Mem()
for _ in range(n):
    for h in handles:
        assert lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0
step("memory reading, every GPU", n)
procs = (Proc * 64)()
listed = 0
for _ in range(n):
    for h in handles:
        k = ctypes.c_uint(64)
        assert lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(k), procs) == 0
        listed = k.value
step("compute-apps listing, every GPU", n)
lib.nvmlShutdown()
step("nvmlShutdown")
for name, cpu, wall, calls in steps:
    print("%-32s cpu %7.3f ms  wall %7.3f ms%s" % (name, cpu, wall, "  (per call, %d calls)" % calls if calls > 1 else ""))
print("gpus %d, listed %d, used %d MiB" % (len(handles), listed, mem.used >> 20))
"""


def child_cpu(argv):
    """Runs argv to its end; returns (cpu ms from wait4, stdout)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read().decode()
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    return 1000 * (ru.ru_utime + ru.ru_stime), out


def main():
    hold = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold.py")
    hp = subprocess.Popen([sys.executable, hold, "plain", "10"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    try:
        ready = hp.stdout.readline().strip()
        if not ready.startswith("ready"):
            sys.exit("hold.py did not start: no holder, nothing to list")
        print(ready)
        base = [child_cpu([sys.executable, "-c", "import ctypes, resource, time"])[0] for _ in range(3)]
        print("python with ctypes, nothing else: cpu %s ms" % " ".join("%.1f" % c for c in base))
        for run in range(3):
            cpu, out = child_cpu([sys.executable, "-c", CHILD, str(REPEAT)])
            print("in-process NVML, run %d: the whole child cpu %.1f ms" % (run + 1, cpu))
            print(out.rstrip())
        forms = {
            "query-gpu": ["--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"],
            "query-compute-apps": ["--query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory",
                                   "--format=csv,noheader,nounits"],
            "refused arguments (start only)": ["-q", "-x", "-d", "MEMORY"],
        }
        for name, args in forms.items():
            cpus = [child_cpu([SMI] + args)[0] for _ in range(5)]
            print("nvidia-smi %s: cpu %s ms" % (name, " ".join("%.1f" % c for c in cpus)))
    finally:
        hp.kill()
        hp.wait()


if __name__ == "__main__":
    main()
