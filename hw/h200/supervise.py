"""A supervisor for the H200 check: runs a real CUDA worker (hold.py plain GIB) and starts it
again after each death, waiting DELAYS seconds in turn (the last one repeats).

usage: supervise.py GIB DELAY[,DELAY...]
Prints "ready <pid>" for itself once its first worker holds memory, then "worker <pid> <t>" for
every worker it starts (t: its start, time.monotonic()).
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    gib, delays = sys.argv[1], [float(d) for d in sys.argv[2].split(",")]
    n = 0
    while True:
        t = time.monotonic()
        w = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), "plain", gib], stdout=subprocess.PIPE, text=True)
        print(f"worker {w.pid} {t:.3f}", flush=True)
        line = w.stdout.readline()
        if n == 0 and line.startswith("ready"):
            print(f"ready {os.getpid()}", flush=True)
        w.wait()
        time.sleep(delays[min(n, len(delays) - 1)])
        n += 1


if __name__ == "__main__":
    main()
