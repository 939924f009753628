"""An NVML monitor, as dcgm-exporter or nvitop would be: holds nvidiactl, nvidia0 and
nvidia-uvm open through NVML, owns no memory. With an argument FILE it polls every 2 ms and
writes the CLOCK_MONOTONIC time at which GPU 0's used memory (as nvidia-smi reports it)
first drops to at most the idle reading + 64 MiB after having been above it: the driver's
own release time, for kill-to-verified measurements. Prints "ready <pid>"."""
import os
import sys
import time

import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)


def used():
    return pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used >> 20


idle = int(os.environ.get("IDLE_MIB", "0"))
print("ready", os.getpid(), flush=True)
if len(sys.argv) < 2:
    while True:
        used()
        time.sleep(0.5)
out = sys.argv[1]
while True:
    while used() <= idle + 64:
        time.sleep(0.002)
    while used() > idle + 64:
        time.sleep(0.002)
    with open(out, "a") as f:
        f.write(f"{time.monotonic()}\n")
