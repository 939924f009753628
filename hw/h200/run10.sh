#!/usr/bin/env bash
# Issue 10's scripting checks on the lent H200 (see check10.py):
#   here:   mkdir -p .carry && CGO_ENABLED=0 go build -o .carry/gpush-helper-linux-amd64 ./cmd/gpush-helper
#   device: bash hw/h200/run10.sh .carry
# Output: stdout and $OUT/h200-issue10.log when $OUT is set.
set -uo pipefail
bin=$(readlink -f "${1:?usage: run10.sh DIR-WITH-gpush-helper}")
export PATH=$PATH:/usr/local/nvidia/bin PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
  cat /proc/self/cgroup
  python3 check10.py "$bin"
} 2>&1 | tee "$out/h200-issue10.log"
