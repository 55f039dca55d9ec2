#!/usr/bin/env bash
# flashrec-report renders a job report from a checked-in launcher event log (and from a captured
# run output) and the PNG is real: a PNG signature, a sensible size, and the summary it prints
# names the three recoveries of the sample.
#   tests/report/test_report.sh [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
report="$root/tools/flashrec-report"
fail() { echo "FAIL: $*" >&2; exit 1; }

check_png() {  # path, minimum bytes
  [ -s "$1" ] || fail "$1 was not written"
  local sig size
  sig=$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')
  [ "$sig" = "89504e470d0a1a0a" ] || fail "$1 is not a PNG (signature $sig)"
  size=$(stat -c %s "$1")
  [ "$size" -ge "$2" ] || fail "$1 is only $size bytes (expected >= $2): an empty plot?"
}

# 1. The launcher's JSON-lines event log (real timestamps; two in-job recoveries and a warm relaunch).
out=$("$report" "$here/sample.events.jsonl" -o "$work/sample.png" --summary-json "$work/sample.json")
echo "$out"
check_png "$work/sample.png" 30000
grep -q "recoveries: 3 (tier 1: 2, tier 2: 1)" <<<"$out" || fail "summary does not count 3 recoveries (2 tier 1, 1 tier 2)"
grep -q "tier 1 spawned, roles dp2.tp0.pp0" <<<"$out" || fail "summary misses the spawned recovery"
grep -q "outcome: completed" <<<"$out" || fail "summary misses job_end"
python3 - "$work/sample.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["time_axis"] == "real", s["time_axis"]
assert s["recovery_count"] == 3 and s["steps_replayed_total"] == 2, s
first = s["recoveries"][0]
assert [p for p, _ in first["phases"]][0] == "detect", first["phases"]  # from fault_injected + failure_noticed
assert 300 < first["total_ms"] < 330, first["total_ms"]
PY

# 2. A captured run output (no timestamps: the timeline is rebuilt from line order).
cat > "$work/run.log" <<'LOG'
step 0 loss 10.761024
step 10 loss 8.395399
flashrec: fault injected: role=1:step=20:phase=allreduce:action=kill (pid 9804, unix_us 1795332954038000)
flashrec-event: {"event":"fault_injected","v":1,"fault":"role=1:step=20:phase=allreduce:action=kill","pid":9804,"unix_us":1795332954038000,"action":"kill","step":20,"phase":"allreduce"}
flashrec[dp0.tp0.pp0 pid 9799]: step 20 abandoned: rank 0: MPI_Alltoallv(gradients) on 'dp' failed
flashrec-event: {"event":"recovery","tier":1,"epoch":1,"failed_roles":["dp1.tp0.pp0"],"replacement":"hot","recovery_version":20,"resume_step":20,"steps_replayed":0,"bytes_restored_per_replacement":21064,"phases_ms":{"revoke":0.09,"shrink":0.46,"agree":0.14,"exchange":0.74,"rebuild":2.79,"restore":0.84,"resumed":0.39,"first_step":1.26},"total_ms":6.71,"failure_noticed_unix_us":1795332954043679}
step 20 loss 5.959075
some line the report does not know
flashrec-event: {"event":"job_stats","median_step_ms":1.08,"protection":true,"steps":61}
step 59 loss 2.010371
final_checksum=995bb8ddffb31c88
LOG
out=$("$report" "$work/run.log" -o "$work/run.png")
echo "$out"
check_png "$work/run.png" 20000
grep -q "reconstructed time" <<<"$out" || fail "a log without timestamps must say its time is reconstructed"
grep -q "tier 1 hot, roles dp1.tp0.pp0, 12.4" <<<"$out" || fail "detect (5.7 ms) + phases (6.71 ms) expected as 12.4 ms"

# 3. Nothing to report is an error, not an empty picture.
if printf 'hello\nworld\n' | "$report" - -o "$work/none.png" 2>/dev/null; then fail "accepted a log without events"; fi
echo "1 passed, 0 failed"
