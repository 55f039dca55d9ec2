#!/usr/bin/env bash
# Kills a whole job at random instants (mid-step, mid-replication) and checks that a new
# process finds, for every role, its own snapshot and every ring replica complete and
# verified in /dev/shm, with versions at most one apart: what a warm relaunch needs.
#   kill_all_and_verify.sh <tools dir> <trainer> <endless config> <finite config> <flashrec-snapshots> <trials>
set -euo pipefail
tools=$1 trainer=$2 config=$3 finite=$4 snapshots=$5 trials=$6
job_of() { sed -n 's/.*name: *\([A-Za-z0-9_-]*\).*/\1/p' "$1" | head -1; }
job=$(job_of "$config")
passed=0 failed=0
for i in $(seq 1 "$trials"); do
  # A random instant up to 1.4 s after step 0 was logged (version 0 is then committed
  # everywhere), in a run that would never end. Counted from the job's start, the instant fell
  # before the stores existed when the machine was busy (startup took > 0.76 s under ctest -j2).
  t=$(python3 -c "import random; print(round(random.uniform(0.05, 1.4), 2))")
  "$tools/fr-run" --timeout "$t" --timeout-from '^step 0 ' -- "$tools/fr-mpirun" -n 4 "$trainer" --config "$config" \
    >/dev/null 2>&1 || true
  out=$("$snapshots" verify "$job" || true)
  versions=$(echo "$out" | sed -n 's/^ok .* version \([0-9]*\).*/\1/p' | sort -n | uniq)
  lo=$(echo "$versions" | head -1) hi=$(echo "$versions" | tail -1)
  stores=$(echo "$out" | grep -c '^ok' || true)
  if echo "$out" | grep -q '^BAD' || [ "$stores" -ne 8 ] || [ $((hi - lo)) -gt 1 ]; then
    echo "trial $i (killed $t s after step 0): FAIL"; echo "$out"; failed=$((failed + 1))
  else
    echo "trial $i (killed $t s after step 0): $stores stores verified, versions $lo..$hi"; passed=$((passed + 1))
  fi
  "$snapshots" remove "$job" >/dev/null
done
# A job that ends normally leaves nothing behind in /dev/shm.
"$tools/fr-run" --timeout 60 --expect '^final_checksum=' -- "$tools/fr-mpirun" -n 4 "$trainer" --config "$finite" >/dev/null 2>&1 \
  && left=$(ls /dev/shm | grep -c "^flashrec\.$(job_of "$finite")\." || true) && [ "$left" -eq 0 ] \
  && { echo "normal end: no segment left"; passed=$((passed + 1)); } \
  || { echo "normal end: FAIL (${left:-?} segments left or run failed)"; failed=$((failed + 1)); }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
