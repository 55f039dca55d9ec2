#!/usr/bin/env bash
# slurm.node_kill_detected: a --no-kill job holds 5 nodes; frnode3 is killed (cgroup.kill)
# and frnode4 frozen (cgroup.freeze) at the same moment. Slurm must mark both not
# responding and then down within the bounds docs/ulfm-traps.md gives; the job keeps
# running on the survivors and its live node list (flashrec-slurm job-nodes) drops both;
# flashrec can drain the dead node; both come back to idle afterwards.
source "$(dirname "$0")/lib.sh"
tool=$(realpath "${1:?usage: node_kill_detected.sh <flashrec-slurm executable>}")
cluster_up --nodes 5
eval "$(grep -E '^SlurmdTimeout=|^MessageTimeout=' "$SLURM_CONF")"
# Slurm pings every SlurmdTimeout/3 s and waits MessageTimeout for an answer; measured here:
# not responding after ~7 s, down after ~12 s (5/3). Allow well over that on a busy machine.
limit=$((4 * (SlurmdTimeout + MessageTimeout)))

job=$(timeout 10 sbatch --parsable --no-kill -N5 -J fr-nodekill -o "$FRS_JOB_DIR/%x-%j.out" --wrap 'sleep 600')
wait_until 15 "job $job running" eval '[ "$(job_state "$job")" = RUNNING ]'
say "job $job runs on $(timeout 10 squeue -h -j "$job" -o %N)"

t0=$(date +%s.%N)
"$TC/node.sh" kill frnode3
"$TC/node.sh" freeze frnode4
since() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
declare -A noresp down
deadline=$(awk -v t="$t0" -v l="$limit" 'BEGIN { printf "%.3f", t + l }')
while [ -z "${down[frnode3]:-}" ] || [ -z "${down[frnode4]:-}" ]; do
    awk -v d="$deadline" -v t="$(date +%s.%N)" 'BEGIN { exit !(t > d) }' &&
        fail "not both down within $limit s (states: frnode3=$(node_state frnode3) frnode4=$(node_state frnode4))"
    for n in frnode3 frnode4; do
        s=$(node_state "$n")
        [[ $s == *'*' && -z ${noresp[$n]:-} ]] && { noresp[$n]=$(since); say "$n: $s (not responding) after ${noresp[$n]} s"; }
        [[ $s == down* && -z ${down[$n]:-} ]] && { down[$n]=$(since); say "$n: $s after ${down[$n]} s"; }
    done
    sleep 0.25
done
echo "MEASURED killed frnode3: not-responding ${noresp[frnode3]} s, down ${down[frnode3]} s; frozen frnode4: not-responding ${noresp[frnode4]} s, down ${down[frnode4]} s (SlurmdTimeout=$SlurmdTimeout MessageTimeout=$MessageTimeout)"

say "the --no-kill job survives on the other nodes"
[ "$(job_state "$job")" = RUNNING ] || fail "job $job is $(job_state "$job"), expected RUNNING"
live=$("$tool" job-nodes "$job" | tr '\n' ' ')
echo "job-nodes $job: $live"
[ "$live" = "frnode1 frnode2 frnode5 " ] || fail "job-nodes should list frnode1 frnode2 frnode5, got: $live"

say "flashrec drains the dead node"
"$tool" drain frnode3 --classification node_lost --step 17
wait_until 10 "frnode3 drained" eval '[[ $(node_state frnode3) == drain* ]]'
timeout 10 sinfo -R -h -o '%E|%N' | grep -qx 'flashrec: node_lost at step 17|frnode3' || fail "drain reason missing"

say "both nodes come back"
timeout 10 scancel "$job"
"$TC/node.sh" thaw frnode4
"$TC/node.sh" start frnode3
"$tool" resume frnode3
wait_until 30 "frnode3 and frnode4 idle again" eval 'node_is frnode3 idle && node_is frnode4 idle'
say "ok"
