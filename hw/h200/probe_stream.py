"""Memory-stream probe (the lent H200, from the repo root: python3 hw/h200/probe_stream.py): does one
long-running `nvidia-smi -lms 10` see a release as soon as NVML does? A torch holder (hold.py) is
SIGKILLed; an NVML poller here (every 1 ms) and the stream's lines are timed against the kill.
Also times one --query-compute-apps and one --query-gpu process."""
import os
import signal
import subprocess
import sys
import threading
import time

import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)


def used():
    return pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used >> 20


idle = used()
print("idle v2", idle)
s = subprocess.Popen(["nvidia-smi", "-lms", "10", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                     stdout=subprocess.PIPE, text=True)
lines = []


def rd():
    for line in s.stdout:
        lines.append((time.monotonic(), line.strip()))


threading.Thread(target=rd, daemon=True).start()
time.sleep(1.0)
for gib in (10, 100):
    for r in range(3):
        hp = subprocess.Popen([sys.executable, "hw/h200/hold.py", "plain", str(gib)], stdout=subprocess.PIPE, text=True)
        hp.stdout.readline()
        time.sleep(0.3)
        base = used()
        n0 = len(lines)
        t0 = time.monotonic()
        os.kill(hp.pid, signal.SIGKILL)
        rel = None
        while time.monotonic() - t0 < 5:
            if used() <= idle + 64:
                rel = time.monotonic()
                break
            time.sleep(0.001)
        time.sleep(0.3)
        st = next((t for t, l in lines[n0:] if t > t0 and int(l.split(",")[1]) <= idle + 64), None)
        print(f"{gib}GiB held {base}MiB release {1000*(rel-t0):.1f}ms stream-saw {1000*((st or t0)-t0):.1f}ms")
        hp.wait()
gaps = [(b[0] - a[0]) * 1000 for a, b in zip(lines[5:], lines[6:])]
s.kill()
print("stream line gap: median %.1f ms, max %.1f ms" % (sorted(gaps)[len(gaps) // 2], max(gaps)))
for q in ("--query-compute-apps=pid,used_memory", "--query-gpu=index,memory.used"):
    t = time.monotonic()
    subprocess.run(["nvidia-smi", q, "--format=csv,noheader"], capture_output=True)
    print(q, "%.1f ms" % (1000 * (time.monotonic() - t)))
