#!/usr/bin/env bash
# Sets everything up and runs the main demo through flashrec-launch: the example trainer (4
# data-parallel ranks on 2 virtual nodes + 1 hot spare), once without a failure and once with
# role dp1 SIGKILLed in the middle of step 20. The hot spare takes its role, its state comes back
# from a ring replica, and the run ends with final parameters bitwise identical to the first.
# Shows the launcher's progress and summary, and draws the failed run's job report (PNG).
#   scripts/demo.sh [OUTPUT_DIR]      (default: a new directory under /tmp; event logs, logs, PNG)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FLASHREC_BUILD_DIR:-$here/build}
out=${1:-$(mktemp -d /tmp/flashrec-demo.XXXXXX)}
mkdir -p "$out"
"$here/scripts/setup.sh"
cmake -S "$here" -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)" --target mlp_trainer flashrec-launch >/dev/null
launch=$build/launcher/flashrec-launch
# examples/mlp/train.yaml, with launch.program pointing at this build's trainer.
sed "s|^  program: .*|  program: $build/examples/mlp_trainer|" "$here/examples/mlp/train.yaml" >"$out/train.yaml"

# The launcher's own lines (progress, failures, summary), the fault injector's and the result.
shown='^flashrec-launch: |final_checksum=|fault injected'
run() {  # run NAME [launcher options...]
  local name=$1
  shift
  "$here/tools/fr-run" --timeout 180 -- "$launch" "$out/train.yaml" --events "$out/$name.events.jsonl" "$@" \
    >"$out/$name.log" 2>&1 || { cat "$out/$name.log"; echo "demo: run '$name' failed" >&2; exit 1; }
  grep -E "$shown" "$out/$name.log"
}

echo "== run 1: no failure"
run clean
echo
echo "== run 2: role dp1 is SIGKILLed inside the gradient all-reduce of step 20"
run killed --fault role=1:step=20:phase=allreduce:action=kill
echo
echo "== the job report of run 2"
"$here/tools/flashrec-report" "$out/killed.events.jsonl" -o "$out/killed.report.png" --quiet
echo "wrote $out/killed.report.png"
echo
echo "== the same final_checksum twice means the failure changed nothing"
clean=$(grep -o 'final_checksum=[0-9a-f]*' "$out/clean.log")
killed=$(grep -o 'final_checksum=[0-9a-f]*' "$out/killed.log")
echo "no failure:       $clean"
echo "dp1 killed at 20: $killed"
if [ "$clean" = "$killed" ]; then echo "identical"; else echo "DIFFERENT" >&2; exit 1; fi
