#!/usr/bin/env bash
# Speed: gpush (warm run of free_gpus.lua) vs `pdsh -R ssh true` on 50 lab
# hosts behind one loopback sshd. Needs openssh-server and pdsh, and root
# (the lab's sshd). Extra arguments go to the Go program: -n, -runs, -gpush.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [ -x bin/gpush ]; then args+=(-gpush bin/gpush); fi
exec go run ./bench "${args[@]}" "$@"
