#!/usr/bin/env bash
# What brings a worker back, on the lent H200 (no sshd, no systemd there):
#   here:   make build && mkdir -p .carry && cp bin/gpush remote/helperbin/bin/gpush-helper-linux-amd64 .carry/
#   device: bash hw/h200/run-restarters.sh .carry [SECTIONS, default ABCD]
# Output: stdout and $OUT/h200-restarters.log when $OUT is set.
set -uo pipefail
bin=$(readlink -f "${1:?usage: run-restarters.sh DIR-WITH-gpush-AND-gpush-helper}")
export PATH=$PATH:/usr/local/nvidia/bin NO_COLOR=1 PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
  python3 restarters.py "$bin" ${2:-}
  rc=$?
  echo "== after"; "$bin/gpush-helper-linux-amd64" snapshot --table
  exit $rc
} 2>&1 | tee "$out/h200-restarters.log"
