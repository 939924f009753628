"""A real CUDA holder for the H200 check: allocates GiB of device memory and sleeps.

usage: hold.py MODE GIB [CHILD_GIB]
  MODE plain        holds GIB until killed
  MODE ignore-term  holds GIB and ignores SIGTERM (needs SIGKILL)
  MODE parent       starts a child holding CHILD_GIB, then holds GIB itself;
                    when the parent dies the child lives on (the orphaned worker)
Prints "ready <pid>" once the memory is really allocated. With HOLD_COMM set, the process
renames itself (its comm) first: a worker under a protected name.
"""
import os
import signal
import subprocess
import sys
import time

import torch


def main():
    mode, gib = sys.argv[1], float(sys.argv[2])
    if os.environ.get("HOLD_COMM"):
        import ctypes
        ctypes.CDLL(None).prctl(15, os.environ["HOLD_COMM"].encode()[:15], 0, 0, 0)  # PR_SET_NAME
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "parent":
        child_gib = sys.argv[3]
        # The child is a plain holder; it inherits stdout so its "ready" line reaches the driver.
        subprocess.Popen([sys.executable, __file__, "plain", child_gib])
    buf = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    buf.fill_(1)
    torch.cuda.synchronize()
    print(f"ready {os.getpid()}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
