#!/usr/bin/env bash
# The truth rules on real CUDA holders (truth.py: forked child, respawning supervisor, NVML
# monitor, PID namespace, users filter, kill-to-verified), on the lent H200 (no sshd, no systemd there):
#   here:   make build && mkdir -p .carry && cp bin/gpush remote/helperbin/bin/gpush-helper-linux-amd64 .carry/
#   device: bash hw/h200/run-truth.sh .carry
# Output: stdout and $OUT/h200-truth.log when $OUT is set.
set -uo pipefail
bin=$(readlink -f "${1:?usage: run-truth.sh DIR-WITH-gpush-AND-gpush-helper}")
export PATH=$PATH:/usr/local/nvidia/bin NO_COLOR=1 PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
  python3 truth.py "$bin"
  rc=$?
  echo "== after"; "$bin/gpush-helper-linux-amd64" snapshot --table
  exit $rc
} 2>&1 | tee "$out/h200-truth.log"
