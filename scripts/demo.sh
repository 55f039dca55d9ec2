#!/usr/bin/env bash
# Sets everything up and runs the main demo: the example trainer (4 data-parallel ranks on 2
# virtual nodes + 1 hot spare) loses a rank to SIGKILL in the middle of step 20; the hot spare
# takes its role, its state comes back from a ring replica, and the run ends with final
# parameters bitwise identical to a run without the failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FLASHREC_BUILD_DIR:-$here/build}
"$here/scripts/setup.sh"
cmake -S "$here" -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)" --target mlp_trainer >/dev/null
trainer=$build/examples/mlp_trainer
config=$here/examples/mlp/train.yaml
echo "== run 1: no failure"
"$here/tools/fr-run" --timeout 120 -- "$here/tools/fr-mpirun" -n 5 "$trainer" --config "$config" \
  2>&1 | grep -E "^step|final_checksum|fr-run"
echo "== run 2: role dp1 is SIGKILLed inside the gradient all-reduce of step 20"
"$here/tools/fr-run" --timeout 120 -- "$here/tools/fr-mpirun" -n 5 "$trainer" --config "$config" \
  --fault role=1:step=20:phase=allreduce:action=kill \
  2>&1 | grep -E "^step|final_checksum|fault injected|flashrec-event: .*recovery|abandoned|fr-run"
echo "== the same final_checksum twice means the failure changed nothing"
