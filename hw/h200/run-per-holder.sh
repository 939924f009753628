#!/usr/bin/env bash
# Per-holder memory, units vs containers and wait-free for given holders on the lent H200
# (see per_holder.py):
#   here:   mkdir -p .carry && CGO_ENABLED=0 go build -o .carry/gpush-helper-linux-amd64 ./cmd/gpush-helper
#   device: bash hw/h200/run-per-holder.sh .carry
# Output: stdout and $OUT/h200-per-holder.log when $OUT is set.
set -uo pipefail
bin=$(readlink -f "${1:?usage: run-per-holder.sh DIR-WITH-gpush-helper}")
export PATH=$PATH:/usr/local/nvidia/bin PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
  cat /proc/self/cgroup
  python3 per_holder.py "$bin"
} 2>&1 | tee "$out/h200-per-holder.log"
