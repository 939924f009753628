#!/usr/bin/env bash
# Facts behind issue 7's defaults, on the lent H200: bash hw/h200/probe.sh
set -uo pipefail
export PATH=$PATH:/usr/local/nvidia/bin PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
python3 probe_timing.py "$@" 2>&1 | tee "$out/h200-probe.log"
