#!/usr/bin/env bash
# What a free costs on real hardware, two builds in one run: the same free_gpus.lua
# (local connection) against the same real CUDA holders (a 10 GiB worker and an
# orphaned 6 GiB one whose parent was killed), each build twice, alternating. The
# host's nvidia-smi is wrapped (host var gpush_nvidia_smi) to log each run's form:
# the -lms stream, --query-gpu one-shots, --query-compute-apps listings.
#   here:   mkdir -p .carry/A .carry/B; cp <gpush and gpush-helper-linux-amd64 of build A> .carry/A/ (B likewise)
#   device: bash hw/h200/run-smi-count.sh .carry/A .carry/B
# Output: stdout and $OUT/h200-smi-count.log when $OUT is set; one "COUNT" line per free.
set -uo pipefail
export PATH=$PATH:/usr/local/nvidia/bin NO_COLOR=1 PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
here=$(dirname "$(readlink -f "$0")")
smi=$(command -v nvidia-smi) || { echo "no nvidia-smi"; exit 1; }
work=$(mktemp -d)
cat > "$work/nvidia-smi" <<WRAP
#!/bin/sh
echo "\${1%%=*}" >> "$work/runs.log"
exec "$smi" "\$@"
WRAP
chmod +x "$work/nvidia-smi"
cat > "$work/inv.yaml" <<INV
all:
  hosts:
    localhost:
      ansible_connection: local
      gpush_nvidia_smi: $work/nvidia-smi
INV
free_once() {
  local name=$1 bin
  bin=$(readlink -f "$2")
  python3 "$here/hold.py" plain 10 > "$work/p1.log" & local p1=$!
  python3 "$here/hold.py" parent 3 6 > "$work/p3.log" & local p3=$!
  until grep -q ready "$work/p1.log"; do sleep 0.2; done
  until [ "$(grep -c ready "$work/p3.log")" = 2 ]; do sleep 0.2; done
  kill -9 $p3; wait $p3 2>/dev/null; sleep 0.5
  : > "$work/runs.log"
  local t0 t1 rc
  t0=$(date +%s%N)
  "$bin/gpush" run free_gpus.lua -i "$work/inv.yaml" -e grace=2s > "$work/free.log" 2>&1; rc=$?
  t1=$(date +%s%N)
  tail -3 "$work/free.log"
  echo "COUNT $name: exit $rc, $(( (t1-t0)/1000000 )) ms, nvidia-smi runs: stream $(grep -c '^-lms' "$work/runs.log"), query-gpu $(grep -c '^--query-gpu' "$work/runs.log"), compute-apps $(grep -c '^--query-compute-apps' "$work/runs.log"), all $(wc -l < "$work/runs.log")"
  "$smi" --query-compute-apps=pid,used_memory --format=csv,noheader
  pkill -9 -f hold.py; sleep 1
}
{
  "$smi" --query-gpu=index,name,memory.used,memory.total --format=csv
  for round in 1 2; do
    for b in "$@"; do free_once "$(basename "$b") round $round" "$b"; done
  done
  rm -rf "$work"
} 2>&1 | tee "$out/h200-smi-count.log"
