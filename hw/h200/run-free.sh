#!/usr/bin/env bash
# The main job on real hardware: `gpush run free_gpus.lua -i localhost` (local
# connection, no SSH: the H200 machine has no sshd) against real CUDA holders.
#   here:   make build && mkdir -p .carry && cp bin/gpush remote/helperbin/bin/gpush-helper-linux-amd64 .carry/
#   device: bash hw/h200/run-free.sh .carry
# Output: stdout and $OUT/h200-free.log when $OUT is set.
set -uo pipefail
bin=$(readlink -f "${1:?usage: run-free.sh DIR-WITH-gpush-AND-gpush-helper}")
export PATH=$PATH:/usr/local/nvidia/bin NO_COLOR=1 PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
here=$(dirname "$(readlink -f "$0")")
cd "$here"
{
  echo "== idle"; nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader
  python3 hold.py plain 10 > /tmp/p1.log & p1=$!
  python3 hold.py ignore-term 4 > /tmp/p2.log & p2=$!
  python3 hold.py parent 3 6 > /tmp/p3.log & p3=$!
  for f in /tmp/p1.log /tmp/p2.log; do until grep -q ready $f; do sleep 0.2; done; done
  until [ "$(grep -c ready /tmp/p3.log)" = 2 ]; do sleep 0.2; done
  kill -9 $p3; sleep 0.5   # the parent dies: its worker lives on under pid 1
  echo "== holders (plain $p1, ignore-term $p2, orphan of $p3)"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  ps -o pid,ppid,stat,cmd -p "$(pgrep -d, -f hold.py)"
  echo "== gpush-helper snapshot --table"; "$bin/gpush-helper-linux-amd64" snapshot --table
  echo "== gpush run gpu_status.lua -i localhost"; "$bin/gpush" run gpu_status.lua -i localhost
  echo "== gpush run free_gpus.lua -i localhost --check"; "$bin/gpush" run free_gpus.lua -i localhost --check -e grace=2s; echo "exit $?"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  echo "== gpush run free_gpus.lua -i localhost"
  t0=$(date +%s%N)
  "$bin/gpush" run free_gpus.lua -i localhost -e grace=2s; rc=$?
  t1=$(date +%s%N)
  echo "exit $rc; whole run $(( (t1-t0)/1000000 )) ms (grace 2s for the SIGTERM-ignoring holder)"
  echo "== after"; nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  echo "== --json of a second run (nothing left to free)"; "$bin/gpush" run free_gpus.lua -i localhost --json
  pkill -9 -f hold.py
  exit $rc
} 2>&1 | tee "$out/h200-free.log"
