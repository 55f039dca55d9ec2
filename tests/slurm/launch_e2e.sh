#!/usr/bin/env bash
# slurm.launch.<mode>: flashrec-launch end to end on the Slurm test cluster, submitted with the
# sbatch template as a user would (example trainer, 4 active nodes + 1 spare node), with a real
# failure injected from outside the job. Every mode checks that the job finished with the final
# checksum of a failure-free run of the same train.yaml, and that the bad node is drained with
# flashrec's reason.
#   node_loss        a whole active node is killed (every process, cgroup.kill): tier 2, the
#                    spare node takes its ranks; prints the recovery timeline
#   node_freeze      a whole active node is frozen (cgroup.freeze): flashrec's heartbeats find it,
#                    tier 2 onto the spare node
#   ranks_of_node    only the trainer ranks of one node are SIGKILLed (its PRRTE daemon lives):
#                    tier 1, a replacement is spawned onto the spare node
#   ranks_of_node_hot the same with a hot spare waiting on the spare node: tier 1 without spawn
#   spares_exhausted no spare node (4 nodes), slurm.when_spares_exhausted: checkpoint-and-requeue:
#                    a node is killed, the launcher writes an HDF5 checkpoint, requeues the job,
#                    and the requeued job resumes from it
#   shrink           no spare node (4 nodes), slurm.when_spares_exhausted: shrink: a node is
#                    killed and its ranks double up on the other 3 nodes for the rest of the job
#   srun_launch      no failure: `srun flashrec-launch train.yaml` in a batch script, one task per
#                    node, FLASHREC_BTL_IF unset; exactly one task (task 0) launches, the others
#                    exit at once, and the launcher finds the nodes' subnet for MPI by itself
#   direct           slurm.launch: srun (direct launch, no mpirun), a hot spare on the spare node,
#                    no failure: the ranks are tasks of one srun --mpi=pmix step
#   direct_ranks_of_node_hot  direct launch; the trainer ranks of one node are SIGKILLed: tier 1,
#                    the hot spare on the spare node takes over, the step lives
#   direct_node_loss direct launch; a whole active node is killed (cgroup.kill): tier 1 in-job
#                    with the hot spare, no new MPI job
#   direct_node_freeze direct launch; a whole active node is frozen (cgroup.freeze): lost by the
#                    node timeout (detection.node_timeout_ms), tier 1 in-job with the hot spare;
#                    thawed once the job recovered: its rank must not come back (a zombie)
#   node_cut         a whole active node is cut off the network (node.sh cut: its veth down, no
#                    reset to anyone): the mpirun mode's answer, reconnected after the job
#   direct_node_cut  direct launch; the same cut: lost by the node timeout, tier 1 in-job with the
#                    hot spare; reconnected once the job recovered: its rank must end itself and
#                    the node stay drained
#   direct_spares_exhausted direct launch, 2 spare nodes: the rank of frnode3 is killed (the hot
#                    spare takes it, tier 1), then the rank of frnode2: no hot spare is left, the
#                    launcher starts a new srun step in the same allocation with a hot spare again
#   rank_hang        mpirun, 2 active nodes of 2 ranks, a hot spare: one rank of frnode2 is stopped
#                    (SIGSTOP): the launcher kills that rank alone on its node (srun --overlap,
#                    remote_kill), the hot spare takes over in-job, frnode2 is not drained
#   direct_node_loss2 direct launch, 2 active nodes of 2 ranks and 2 hot spares on the spare node:
#                    a whole active node is killed, both its ranks at once; tier 1 in-job (the
#                    8-GPU node's case: before trap 17's keeper, Slurm cancelled such a step)
#   direct_rank_hang the same under direct launch: the killed rank shares its node with another
#                    task of the step, whose end Slurm 22.05 answered by cancelling the step until
#                    the PMIx connection keeper (docs/ulfm-traps.md trap 17); the step lives on
# FLASHREC_E2E_HANG_MS overrides detection.hang_timeout_ms (3000; rank_hang 20000), e.g. to study a stall by hand.
source "$(dirname "$0")/lib.sh"
mode=${1:?usage: launch_e2e.sh <node_loss|node_freeze|node_cut|ranks_of_node|ranks_of_node_hot|spares_exhausted|shrink|srun_launch|direct|direct_ranks_of_node_hot|direct_node_loss|direct_node_freeze|direct_node_cut|direct_node_loss2|direct_rank_hang|direct_spares_exhausted|rank_hang> <flashrec-launch> <trainer>}
launcher=$(realpath "${2:?flashrec-launch executable}")
trainer=$(realpath "${3:?trainer executable}")
victim=frnode3  # an active node that is not the batch host (frnode1 runs the launcher)
steps=600
kill_after=80   # steps completed before the failure

nodes=4 ranks_per_node=1 spare_nodes=1 policy=shrink hot_spares=0 launch=mpirun spawn=true
idle_nodes=0    # cluster nodes outside the job's allocation
[ "$mode" = ranks_of_node_hot ] || [ "$mode" = rank_hang ] && hot_spares=1
[[ $mode == direct* ]] && launch=srun spawn=false hot_spares=1
# The requeued job needs as many nodes as the first start, the killed one down: one more in the cluster.
[ "$mode" = spares_exhausted ] && spare_nodes=0 policy=checkpoint-and-requeue idle_nodes=1
[ "$mode" = shrink ] && spare_nodes=0
# Two spare nodes: the hot spare's, and a free one for the new step after the hot spare is used.
[ "$mode" = direct_spares_exhausted ] && spare_nodes=2
# One rank of a node stopped must not look like the whole node silent (the node timeout): two per node.
[[ $mode == *rank_hang ]] && nodes=2 ranks_per_node=2 victim=frnode2
[ "$mode" = direct_node_loss2 ] && nodes=2 ranks_per_node=2 victim=frnode2 hot_spares=2
# rank_hang is judged by the hang timeout itself, and runs 5 ranks on this machine's 2 cores: their
# busy waits (1-2 million sched_yield/s while they train over TCP between the nodes' namespaces)
# delayed other processes by seconds: a sleeping process's wake-ups by up to 10 s (no page faults,
# no steal time: the scheduler), the heartbeats seen on the bridge likewise, and a rank was found
# hung that was not. Here the timeout is 20 s, twice the longest delay seen.
# Every mode's step waits 5 ms as on a GPU (trainer.device_ms), which leaves the cores idle between
# the exchanges; with the ranks yielding (below) a step without it took 3 ms, and the job ended
# before the failure could be injected.
hang_ms=3000 device_ms=5
[[ $mode == *rank_hang ]] && hang_ms=20000
# The cluster's nodes share this machine's 2 cores, which MPI cannot see: a waiting rank yields
# (mpi.yield_when_idle: true). Busy-polling instead (auto: Open MPI's choice, which never yields
# under srun) made each message between the nodes wait for the peer's time slice: a 5-rank
# barrier 10 ms instead of 41 us, a repair's rebuild 0.3-1.5 s (docs/slurm.md). For the
# busy-polling figures: FLASHREC_E2E_YIELD=auto. FLASHREC_E2E_TRANSPORT sets mpi.transport.
yield_when_idle=${FLASHREC_E2E_YIELD:-true} transport=${FLASHREC_E2E_TRANSPORT:-auto}
spare_node=frnode$((nodes + 1))
cluster_up --nodes $((nodes + spare_nodes + idle_nodes))

write_yaml() {  # <file> <checkpoint dir>
    cat > "$1" <<YAML
job: {name: fr-e2e-$mode, nodes: $nodes, ranks_per_node: $ranks_per_node, dp: 4, spare_nodes: $spare_nodes, hot_spares: $hot_spares, steps: $steps, seed: 7}
launch: {program: $trainer}
trainer: {model: {input: 16, hidden: 32, output: 4}, batch_per_rank: 8, lr: 0.01, log_every: 100, device_ms: $device_ms}
detection: {hang_timeout_ms: ${FLASHREC_E2E_HANG_MS:-$hang_ms}}
mpi: {transport: $transport, yield_when_idle: $yield_when_idle}
checkpoint: {dir: $2, every_steps: 50}
slurm: {when_spares_exhausted: $policy, launch: $launch}
recovery: {spawn: $spawn}
YAML
}

keepers_left() {  # the PMIx connection keepers (ft/pmix_connection_keeper.hpp) in any node's cgroup
    local pid node
    for ((node = 1; node <= FLASHREC_SLURM_NODES; node++)); do
        for pid in $(cat "$(source "$TC/common.sh" && frs_cgroup_root)/frnode$node/cgroup.procs" 2>/dev/null); do
            tr '\0' ' ' < /proc/"$pid"/cmdline 2>/dev/null | grep -q '^flashrec-pmix-keeper ' && echo "frnode$node:$pid"
        done
    done
    return 0
}

trainer_ranks_on() {  # <node>: the trainer processes in the node's cgroup
    local pid
    for pid in $(cat "$(source "$TC/common.sh" && frs_cgroup_root)/$1/cgroup.procs" 2>/dev/null); do
        [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$(basename "$trainer" | cut -c1-15)" ] && echo "$pid"
    done
    return 0
}

# The failure-free reference: the same job on this machine (roles on virtual nodes; the result
# does not depend on placement, ft.mlp_repeatable_and_placement_independent).
write_yaml "$FRS_JOB_DIR/reference.yaml" "$FRS_JOB_DIR/reference-ckpt"
reference=$(cd "$FRS_JOB_DIR" && timeout 120 "$FRS_ROOT/tools/fr-mpirun" -n $((4 + hot_spares)) "$trainer" \
            --config "$FRS_JOB_DIR/reference.yaml" 2>/dev/null | sed -n 's/^final_checksum=//p')
[ -n "$reference" ] || fail "the failure-free reference run printed no final_checksum"
say "failure-free reference: final_checksum=$reference"

write_yaml "$FRS_JOB_DIR/train.yaml" "$FRS_JOB_DIR/ckpt"
cd "$FRS_JOB_DIR"
events="$FRS_JOB_DIR/fr-e2e-$mode.events.jsonl"
if [ "$mode" = srun_launch ]; then
    # Without FLASHREC_BTL_IF the launcher finds the network between the nodes by itself.
    job=$(env -u FLASHREC_BTL_IF timeout 10 sbatch --parsable --nodes=5 --ntasks-per-node=1 --no-kill --time=10 \
          -o "$FRS_JOB_DIR/srun-%j.out" --wrap "srun $launcher train.yaml")
    out="$FRS_JOB_DIR/srun-$job.out"
    say "job $job submitted: srun flashrec-launch train.yaml, 5 tasks"
    wait_until 150 "job $job finished" job_done "$job"
    grep -av '^step \|flashrec-launch: step \|checkpoint: step ' "$out" | sed 's/^/  | /'
    [ "$(job_state "$job")" = COMPLETED ] || fail "job $job ended $(job_state "$job")"
    [ "$(grep -ac '^flashrec-launch: job fr-e2e-srun_launch: [0-9]* ranks' "$out")" = 1 ] || fail "not exactly one launcher acted"
    [ "$(grep -ac 'the launcher runs in task 0; this task exits' "$out")" = 4 ] || fail "the other 4 tasks did not step aside"
    grep -aq 'MPI network: FLASHREC_BTL_IF=10\.200\.0\.0/24 ' "$out" || fail "the launcher did not find the inter-node subnet"
    final=$(grep -a '^final_checksum=' "$out" | tail -n 1 | sed 's/^final_checksum=//')
    [ "$final" = "$reference" ] || fail "final checksum $final differs from the failure-free run's $reference"
    say "ok: one launcher (task 0), 4 tasks stepped aside, checksum $final equal"
    exit 0
fi
job=$(FLASHREC_LAUNCH="$launcher" timeout 10 sbatch --parsable --nodes=$((nodes + spare_nodes)) --time=10 \
      "$FRS_ROOT/slurm/templates/flashrec.sbatch" train.yaml)
out="$FRS_JOB_DIR/flashrec-$job.out"
say "job $job submitted ($nodes active + $spare_nodes spare node(s), $steps steps)"

progressed() { grep -aqE "step ([0-9]+)/$steps" "$out" 2>/dev/null &&
               [ "$(grep -aoE "step [0-9]+/$steps" "$out" | tail -n 1 | sed 's/step \([0-9]*\).*/\1/')" -ge "$kill_after" ]; }
wait_until 90 "job $job past step $kill_after" progressed

kill_ms=$(date +%s%3N)
case $mode in
    direct)
        say "no failure (direct launch)" ;;
    node_loss | spares_exhausted | shrink | direct_node_loss | direct_node_loss2)
        "$TC/node.sh" kill "$victim" >/dev/null
        say "KILLED node $victim (every process on it)" ;;
    node_freeze | direct_node_freeze)
        "$TC/node.sh" freeze "$victim" >/dev/null
        say "FROZE node $victim (every process on it stopped)" ;;
    node_cut | direct_node_cut)
        "$TC/node.sh" cut "$victim" >/dev/null
        say "CUT node $victim off the network (its veth down; its processes run on)" ;;
    rank_hang | direct_rank_hang)
        mapfile -t ranks < <(trainer_ranks_on "$victim")
        ((${#ranks[@]} == 2)) || fail "expected 2 trainer ranks on $victim, found ${#ranks[@]}"
        hung=${ranks[0]}
        kill -STOP "$hung"
        say "STOPPED one trainer rank on $victim (pid $hung; the other, ${ranks[1]}, runs on)" ;;
    ranks_of_node | ranks_of_node_hot | direct_ranks_of_node_hot | direct_spares_exhausted)
        mapfile -t ranks < <(trainer_ranks_on "$victim")
        ((${#ranks[@]} > 0)) || fail "no trainer rank found on $victim"
        kill -KILL "${ranks[@]}"
        say "KILLED the ${#ranks[@]} trainer rank(s) on $victim (pids ${ranks[*]}); its PRRTE daemon lives" ;;
    *) fail "unknown mode $mode" ;;
esac

# What was injected, when, for bench/direct_launch/failure_table.py (FLASHREC_E2E_KEEP keeps it).
printf '{"mode": "%s", "victim": "%s", "injected_unix_ms": %s, "transport": "%s", "yield_when_idle": "%s"}\n' \
    "$mode" "$victim" "$kill_ms" "$transport" "$yield_when_idle" > "$FRS_JOB_DIR/injected.json"
if [ "$mode" = spares_exhausted ]; then
    wait_until 90 "job $job requeued and started again" release_requeued "$job"
fi
if [ "$mode" = direct_node_freeze ] || [ "$mode" = direct_node_cut ]; then
    recovered() { grep -aq 'RECOVERED tier' "$out"; }
    wait_until 60 "job $job recovered in-job" recovered
    if [ "$mode" = direct_node_freeze ]; then
        "$TC/node.sh" thaw "$victim" >/dev/null
        say "THAWED node $victim after the recovery"
    else
        "$TC/node.sh" reconnect "$victim" >/dev/null
        say "RECONNECTED node $victim after the recovery"
        # Its rank ran on through the cut: once it hears again that it was declared lost, it ends.
        no_rank_left() { [ -z "$(trainer_ranks_on "$victim")" ]; }
        wait_until 60 "the reconnected node's rank ended" no_rank_left
        say "the rank of the reconnected $victim ended (it does not rejoin)"
    fi
fi
if [ "$mode" = direct_spares_exhausted ]; then
    # The hot spare took frnode3's role; the next death finds no spare: the ranks end the step
    # (exit 77) and the launcher starts a new step in the same allocation.
    recovered() { grep -aq 'RECOVERED tier' "$out"; }
    wait_until 60 "job $job recovered in-job" recovered
    second=frnode2
    mapfile -t ranks < <(trainer_ranks_on "$second")
    ((${#ranks[@]} > 0)) || fail "no trainer rank found on $second"
    kill -KILL "${ranks[@]}"
    say "KILLED the trainer rank(s) on $second (pids ${ranks[*]}), no hot spare left"
fi
if [[ $mode == *rank_hang ]]; then
    killed() { ! kill -0 "$hung" 2>/dev/null; }
    wait_until 60 "the stopped rank $hung killed" killed
    say "the stopped rank (pid $hung) is gone; $victim's other rank: $(trainer_ranks_on "$victim" | tr '\n' ' ')"
fi
wait_until 150 "job $job finished" job_done "$job"
[ "$mode" = node_freeze ] && "$TC/node.sh" thaw "$victim" >/dev/null
[ "$mode" = node_cut ] && "$TC/node.sh" reconnect "$victim" >/dev/null
say "job $job: $(job_state "$job")"
grep -av '^step \|flashrec-launch: step \|checkpoint: step ' "$out" | sed 's/^/  | /'
[ "$(job_state "$job")" = COMPLETED ] || fail "job $job ended $(job_state "$job")"
# Nothing of the job stays in any node's /dev/shm: flashrec-launch removes the segments it can
# reach; the epilog the rest (a thawed node's, whose ranks Slurm killed after the job's end).
for _ in $(seq 150); do shm_clean "fr-e2e-$mode" "$job" && break; sleep 0.2; done
shm_clean "fr-e2e-$mode" "$job" || fail "30 s after the job's end, /dev/shm still holds the job's $FRS_SHM_LEFT"
say "every node's /dev/shm is free of the job's segments"
if [[ $mode == direct* ]]; then
    # Each rank's keeper ends within a second of its step's slurmstepd.
    no_keepers() { [ -z "$(keepers_left)" ]; }
    wait_until 20 "the PMIx connection keepers gone after the job" no_keepers
    say "no PMIx connection keeper left"
fi

final=$(grep -a '^final_checksum=' "$out" | tail -n 1 | sed 's/^final_checksum=//')
if [ "$mode" = direct ]; then
    python3 - "$events" <<'PY' || fail "the event log shows no single srun --mpi=pmix start"
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
# A step that crashed in MPI_Init and was started once more (start_retried) never ran the job.
retried = {r["attempt"] for r in recs if r["event"] == "start_retried"}
launches = [r for r in recs if r["event"] == "launch" and r["attempt"] not in retried]
if retried:
    print(f"start retried after Open MPI's start-up crash (attempt(s) {sorted(retried)}; docs/limitations.md)")
assert len(launches) == 1 and launches[0]["command"][:4] == ["srun", "--mpi=pmix", "--no-kill", "--kill-on-bad-exit=0"], launches
print("launch: " + " ".join(launches[0]["command"][:9]) + " ...")
PY
    [ "$final" = "$reference" ] || fail "final checksum $final differs from the failure-free run's $reference"
    say "ok: direct launch (srun --mpi=pmix, no mpirun), checksum $final equal to the mpirun reference"
    exit 0
fi
reason=$(timeout 10 sinfo -h -R -n "$victim" -o '%E')
if [[ $mode == *rank_hang ]]; then
    [[ $reason != flashrec:* ]] || fail "$victim was drained (\"$reason\"), though only one of its ranks hung"
    say "not drained: $victim (sinfo -R: \"$reason\")"
else
    say "drained: $victim: \"$reason\" (sinfo -R)"
    [[ $reason == "flashrec: "*" at step "* ]] || fail "$victim is not drained with flashrec's reason"
fi

# What the launcher recorded: where the ranks went, and when training resumed.
# (Its output is kept so that a failed assertion can be named in the last line of the test.)
checked=$(python3 - "$events" "$kill_ms" "$mode" "$victim" "$spare_node" 2>&1 <<'PY'
import json, sys
events, kill_ms, mode, victim, spare_node = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
recs = [json.loads(line) for line in open(events)]
def ts_ms(r):
    from datetime import datetime
    return datetime.strptime(r["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=__import__("datetime").timezone.utc).timestamp() * 1000
moves = [(r["from"], r["to"]) for r in recs if r["event"] == "role_moved"]
drained = sorted({r["node"] for r in recs if r["event"] == "node_drained"})
expected_drained = [] if mode.endswith("rank_hang") else ["frnode2", "frnode3"] if mode == "direct_spares_exhausted" else [victim]
assert drained == expected_drained, f"drained {drained}, expected {expected_drained}"
relayouts = [r for r in recs if r["event"] == "relayout"]
retried = {r["attempt"] for r in recs if r["event"] == "start_retried"}  # never ran the job
launches = [r for r in recs if r["event"] == "launch" and r["attempt"] not in retried]
for r in relayouts:
    print(f"relayout: bad {r['bad_nodes']} -> nodes {r['nodes']}, replaced {r['replaced']}, doubled up {r['doubled_up']}")
for f, t in moves:
    print(f"role moved: {f} -> {t}")
if mode == "direct_spares_exhausted":
    assert len(launches) == 2, f"{len(launches)} MPI jobs, expected the first and one new step"
    assert all(l["command"][:2] == ["srun", "--mpi=pmix"] for l in launches), "a start was not srun --mpi=pmix"
    first = [r for r in recs if r["event"] == "recovery"]
    assert first and first[0]["tier"] == 1 and first[0]["replacement"] == "hot", "the first death was not repaired by the hot spare"
    assert sorted(drained) == ["frnode2", "frnode3"], f"drained {drained}"
    # Exit 77 with the state intact: a warm relaunch (the new step), not an HDF5 restart.
    assert [r for r in recs if r["event"] == "warm_relaunch_before_hdf5"], "no warm_relaunch_before_hdf5 record"
    assert launches[1].get("kind") == "warm_relaunch", f"the new step was a {launches[1].get('kind')}"
    assert not [r for r in recs if r["event"] == "cold_restart"], "an HDF5 restart ran"
    second = launches[1]
    spares = [p for p in second.get("processes", []) if p.get("spare")] if isinstance(second.get("processes"), list) else None
    print(f"1st death: tier 1 (hot) in {first[0]['total_ms']:.0f} ms; 2nd death: new step #{second['attempt']} "
          f"({' '.join(second['command'][:8])} ...), nodes {second.get('nodes')}; relayouts {[(r['bad_nodes'], r['nodes']) for r in relayouts]}")
    for r in recs:
        if r["event"] in ("warm_relaunch", "cold_restart", "restart") and "outcome" in r:
            print(f"{r['event']}: {r.get('outcome')}, total {r.get('total_ms')} ms")
    sys.exit(0)
if mode == "spares_exhausted":
    req = [r for r in recs if r["event"] == "checkpoint_for_requeue"]
    assert req, "no checkpoint_for_requeue record"
    assert [r for r in recs if r["event"] == "requeue"], "no requeue record"
    assert relayouts and relayouts[0]["doubled_up"] == [victim], "the lost node's ranks were not doubled up"
    print(f"checkpoint for requeue: step {req[0]['step']}; requeued; resumed from it")
    sys.exit(0)
if mode.endswith("rank_hang"):
    kills = [r for r in recs if r["event"] == "remote_kill"]
    assert kills and kills[0]["node"] == victim and kills[0]["result"] == "killed", f"remote kills: {kills}"
    assert not [r for r in recs if r["event"] == "node_lost"], "a node was declared lost"
    hang = [r for r in recs if r["event"] == "hang_kill"]
    print(f"remote_kill: {kills[0]['role']} (pid {kills[0]['pid']}) on {kills[0]['node']}: {kills[0]['result']} "
          f"in {kills[0]['ms']:.0f} ms (srun --overlap); hang seen after {hang[0]['detection_latency_ms']} ms")
if mode in ("direct_node_freeze", "direct_node_cut"):
    lost = [r for r in recs if r["event"] == "node_lost" and r.get("node") == victim]
    assert lost, f"no node_lost record for {victim}"
    print(f"node_lost: {victim}, roles {lost[0]['roles']}, silent {lost[0]['silent_ms']} ms "
          f"(node timeout {lost[0]['node_timeout_ms']} ms, {lost[0]['evidence_heartbeats']} heartbeats of evidence)")
if mode.startswith("direct"):
    assert len(launches) == 1, f"direct launch: {len(launches)} MPI jobs started; a hot spare was left, so 1 was expected"
final_nodes = launches[-1].get("nodes") if len(launches) > 1 else None
if mode == "shrink":
    assert relayouts and relayouts[0]["doubled_up"] == [victim], "the lost node's ranks were not doubled up"
    assert victim not in relayouts[0]["nodes"] and len(relayouts[0]["nodes"]) == 3, f"relaunch nodes {relayouts[0]['nodes']}"
else:
    took_over = (spare_node in (final_nodes or [])) or (victim, spare_node) in moves
    assert took_over, f"the spare node {spare_node} did not take {victim}'s ranks (launch nodes {final_nodes}, moves {moves})"
relaunch = [r for r in recs if r["event"] == "warm_relaunch" and r.get("outcome") == "resumed"]
recovery = [r for r in recs if r["event"] == "recovery"]
if relaunch:
    r = relaunch[0]
    ph = r["phases_ms"]
    print(f"timeline (ms after the kill): launcher noticed {r['died_unix_ms'] - kill_ms:.0f}, "
          f"new mpirun started {ts_ms(launches[-1]) - kill_ms:.0f}, training resumed {r['resumed_unix_ms'] - kill_ms:.0f}")
    print("phases (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in ph.items()) + f"; total {r['total_ms']:.0f}")
    where = "on the 3 remaining nodes" if mode == "shrink" else "on the spare node"
    print(f"NODE-LOSS RECOVERY: kill -> training resumed {where} in {(r['resumed_unix_ms'] - kill_ms) / 1000:.2f} s "
          f"(tier 2, warm relaunch; {r['steps_replayed']} step(s) replayed)")
elif recovery:
    r = recovery[0]
    if mode in ("ranks_of_node_hot", "direct_ranks_of_node_hot", "direct_node_loss", "direct_node_freeze",
                "direct_node_cut", "direct_rank_hang", "rank_hang", "direct_node_loss2"):
        assert r["tier"] == 1 and r["replacement"] == "hot", f"expected a tier-1 hot-spare recovery, got {r['replacement']}"
    print(f"tier {r['tier']} in-job recovery ({r['replacement']}) in {r['total_ms']:.0f} ms: " +
          ", ".join(f"{k} {v:.0f}" for k, v in r["phases_ms"].items()))
    print(f"IN-JOB RECOVERY: kill -> failure noticed {r['failure_noticed_unix_us'] / 1000 - kill_ms:.0f} ms, "
          f"kill -> back in the training loop {r['back_in_loop_unix_us'] / 1000 - kill_ms:.0f} ms "
          f"(tier {r['tier']}, {r['replacement']}; {len(launches)} MPI job(s) in all)")
else:
    raise SystemExit("no recovery record")
PY
) || { echo "$checked"; fail "the event log does not show the expected recovery: $(tail -n 1 <<< "$checked")"; }
echo "$checked"
say "final checksum $final, failure-free $reference"
[ "$final" = "$reference" ] || fail "final checksum $final differs from the failure-free run's $reference"
say "ok: $mode survived, checksums equal"
