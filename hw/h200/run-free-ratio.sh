#!/usr/bin/env bash
# The whole `gpush run free_gpus.lua -i localhost` against the driver's release (free_ratio.py),
# builds alternating, each run traced (GPUSH_TRACE):
#   here:   make build && mkdir -p .carry/A && cp bin/gpush .carry/A/   (build B likewise)
#   device: bash hw/h200/run-free-ratio.sh RUNS .carry/A [.carry/B ...]
# With STREAM_PROBE=1 it first times nvidia-smi -lms 1, 2, 5 and 10 (line gaps over 1 s, CPU).
# Output: stdout and $OUT/h200-free-ratio.log when $OUT is set.
set -uo pipefail
export PATH=$PATH:/usr/local/nvidia/bin PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv
  if [ "${STREAM_PROBE:-}" = 1 ]; then
    for ms in 1 2 5 10; do
      python3 - "$ms" <<'PY'
import os, subprocess, sys, time
ms = sys.argv[1]
t0 = time.time(); r0 = os.times()
p = subprocess.Popen(["nvidia-smi", "-lms", ms, "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits"],
                     stdout=subprocess.PIPE, text=True)
ts = []
first = None
while time.time() - t0 < 1.5:
    line = p.stdout.readline()
    now = time.time()
    if first is None:
        first = now - t0
    if now - t0 > 0.5:
        ts.append(now)
p.kill(); p.wait()
r1 = os.times()
gaps = sorted(1000 * (b - a) for a, b in zip(ts, ts[1:]))
cpu = (r1.children_user + r1.children_system) - (r0.children_user + r0.children_system)
print(f"STREAM -lms {ms}: first line {1000*first:.1f} ms after start; gaps over 1 s: n {len(gaps)}, "
      f"median {gaps[len(gaps)//2]:.2f} ms, p95 {gaps[int(len(gaps)*0.95)]:.2f} ms, max {gaps[-1]:.2f} ms; CPU {1000*cpu:.0f} ms in 1.5 s")
PY
    done
    for q in --query-gpu=index,memory.used --query-compute-apps=pid,used_memory; do
      t0=$(date +%s%N); nvidia-smi $q --format=csv,noheader >/dev/null; t1=$(date +%s%N)
      echo "ONESHOT $q: $(( (t1-t0)/1000000 )) ms"
    done
  fi
  python3 free_ratio.py "$@"
} 2>&1 | tee "$out/h200-free-ratio.log"
