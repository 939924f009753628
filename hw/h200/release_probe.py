"""The driver's own release, timed from the holders' death: a protected NVML probe (its name
dcgm-probe matches gpush's protected dcgm*; it owns no memory) polls every 1 ms until every pid
given is dead (gone, or a zombie) and GPU 0's used memory is back at idle + 64 MiB or less.

usage: release_probe.py IDLE_MIB PID...   prints "ready <pid>", then at the end one JSON line
{"death": T, "release": T} in CLOCK_REALTIME seconds (time.time(), the clock gpush's trace uses)."""
import ctypes
import json
import sys
import time

import pynvml

ctypes.CDLL(None).prctl(15, b"dcgm-probe", 0, 0, 0)  # PR_SET_NAME
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
idle, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]


def used():
    return pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used >> 20


def dead(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


held = used() > idle + 64
print("ready", flush=True)
death = release = None
end = time.time() + 30
while time.time() < end and (death is None or release is None):
    now = time.time()
    if death is None and all(dead(p) for p in pids):
        death = now
    u = used()
    if not held and u > idle + 64:
        held = True
    if held and release is None and u <= idle + 64:
        release = time.time()
    time.sleep(0.001)
print(json.dumps({"death": death, "release": release}), flush=True)
