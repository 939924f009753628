#!/usr/bin/env bash
# Facts behind the truth rules' defaults (probe_defaults.py), on the lent H200:
#   bash hw/h200/run-probe-defaults.sh
set -uo pipefail
export PATH=$PATH:/usr/local/nvidia/bin PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
cd "$(dirname "$0")"
python3 probe_defaults.py "$@" 2>&1 | tee "$out/h200-probe-defaults.log"
