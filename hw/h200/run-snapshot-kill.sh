#!/usr/bin/env bash
# The helper's snapshot, kill and wait-free against real CUDA holders (snapshot_kill.py), on the lent H200 (no sshd, no systemd there):
#   here:   make helpers && mkdir -p .carry && cp remote/helperbin/bin/gpush-helper-linux-amd64 .carry/
#   device: bash hw/h200/run-snapshot-kill.sh .carry/gpush-helper-linux-amd64
# Output: the log on stdout and in $OUT/h200-snapshot-kill.log when $OUT is set.
set -uo pipefail
helper=$(readlink -f "${1:?usage: run-snapshot-kill.sh PATH-TO-gpush-helper}")
export PATH=$PATH:/usr/local/nvidia/bin
out=${OUT:-/tmp}
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
  PYTHONUNBUFFERED=1 python3 snapshot_kill.py "$helper"
  rc=$?
  echo "== human table after the run"
  "$helper" snapshot --table
  exit $rc
} 2>&1 | tee "$out/h200-snapshot-kill.log"
