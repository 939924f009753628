"""Runs argv (stdin and stdout passed through) and appends one line to LOG: the CPU seconds
(user+sys) of argv and every descendant it reaped, the wall seconds, and the program's name.
The wrapper's own CPU is not counted (RUSAGE_CHILDREN).

usage: cpuwrap.py LOG ARGV...
"""
import os
import resource
import subprocess
import sys
import time

log, argv = sys.argv[1], sys.argv[2:]
t0 = time.time()
rc = subprocess.call(argv)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(log, "a") as f:
    f.write(f"{ru.ru_utime + ru.ru_stime:.6f} {time.time() - t0:.3f} {os.path.basename(argv[0])} {argv[1] if len(argv) > 1 else ''}\n")
sys.exit(rc)
