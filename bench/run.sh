#!/usr/bin/env bash
# The bench: gpush free_gpus.lua (warm) vs the seeds' one-liner over one ssh
# per host vs pdsh -R ssh running a read-only status, on lab hosts with
# leftovers, each behind its own latency proxy. Needs root (the lab's sshd),
# openssh-server, pdsh and psmisc (fuser). Extra arguments go to the Go
# program: -n 50, -rtt 0,20ms,100ms, -gpush, -sleep. Default: 50 hosts at
# 0 and 20 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [ -x bin/gpush ]; then args+=(-gpush bin/gpush); fi
if [ $# -eq 0 ]; then set -- -n 50 -rtt 0,20ms; fi
exec go run ./bench "${args[@]}" "$@"
