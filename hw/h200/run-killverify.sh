#!/usr/bin/env bash
# Kill-to-verified against the driver's release alone on the lent H200 (killverify.py; truth.py
# section E runs the same after the truth checks):
#   here:   mkdir -p .carry && CGO_ENABLED=0 go build -o .carry/gpush-helper-linux-amd64 ./cmd/gpush-helper
#   device: bash hw/h200/run-killverify.sh .carry
# Output: stdout and $OUT/h200-killverify.log when $OUT is set. The numbers: the
# "MEASURED kill-to-verified" lines (one per run) and the "RESULT kill-to-verified" line.
set -uo pipefail
bin=$(readlink -f "${1:?usage: run-killverify.sh DIR-WITH-gpush-helper}")
export PATH=$PATH:/usr/local/nvidia/bin PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
  python3 killverify.py "$bin" "${@:2}"
} 2>&1 | tee "$out/h200-killverify.log"
