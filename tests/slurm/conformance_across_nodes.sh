#!/usr/bin/env bash
# slurm.conformance_across_nodes: the ULFM conformance set between nodes (docs/ulfm-traps.md
# traps 13 and 14). A batch job on 3 nodes runs tests/ulfm/conformance.py twice, the victim
# always on a node other than mpirun's, and every survivor must go on working on the repaired
# communicator for a while (--live-on-ms) before it reports:
#  1. one rank a node (the victim, rank 2, under a remote PRRTE daemon): every death by signal,
#     an exit(3) (which a flashrec rank's step loop ends by SIGKILL, trap 14) and an exit(0)
#     without MPI_Finalize, in each operation, over shm and tcp (50 cases).
#     Open MPI's lazy endpoint set-up hung most of the receive and agreement cases in
#     PMIx_Get; tools/fr-mpirun sets every endpoint up in MPI_Init (trap 13).
#  2. two ranks a node, 4 processes (the victim, rank 3, on the second node): exits with a code,
#     the trainer's exit(3) and _exit(3) and flashrec's own _exit(76) (18 cases). PRRTE counts an
#     _exit(n) 3 times toward the job's end (trap 14): at 3 processes it ends the job under the
#     survivors, at 4 they live on.
source "$(dirname "$0")/lib.sh"
program=$(realpath "${1:?usage: conformance_across_nodes.sh <ulfm_conformance executable>}")
cluster_up --nodes 3

cat > "$FRS_JOB_DIR/job.sh" <<JOB
#!/usr/bin/env bash
cd "$FRS_ROOT"
echo "batch host: \$(hostname), nodes: \$SLURM_JOB_NODELIST"
python3 tests/ulfm/conformance.py --program "$program" --transports shm,tcp --kinds kill,segv,abort,exit3,exit0 \
    --timeout 20 --live-on-ms 500 --mpirun-args "--prtemca plm_slurm_args --no-kill --map-by ppr:1:node" \
    --json "$FRS_JOB_DIR/mpirun-1.json" --verbose
echo "conformance exit: \$?"
python3 tests/ulfm/conformance.py --program "$program" --transports shm,tcp --kinds exit3,_exit3,end76 \
    --ops allreduce,recv,agree --ranks 4 --timeout 20 --live-on-ms 500 \
    --mpirun-args "--prtemca plm_slurm_args --no-kill --map-by ppr:2:node" --json "$FRS_JOB_DIR/mpirun-2.json" --verbose
echo "conformance exit: \$?"
JOB
chmod +x "$FRS_JOB_DIR/job.sh"

say "sbatch --no-kill -N3"
job=$(timeout 10 sbatch --parsable --no-kill -N3 -t 15 -J fr-conformance -o "$FRS_JOB_DIR/%x-%j.out" "$FRS_JOB_DIR/job.sh")
wait_until 600 "job $job finished" job_done "$job"
out="$FRS_JOB_DIR/fr-conformance-$job.out"
cat "$out"
say "job $job: $(job_state "$job")"
# The cases as JSON, for whoever compares the modes (FLASHREC_CONFORMANCE_JSON_DIR;
# bench/direct_launch/conformance_table.py).
[ -n "${FLASHREC_CONFORMANCE_JSON_DIR:-}" ] && mkdir -p "$FLASHREC_CONFORMANCE_JSON_DIR" &&
    cp "$FRS_JOB_DIR"/mpirun-*.json "$FLASHREC_CONFORMANCE_JSON_DIR"/ 2>/dev/null || true
grep -q '^conformance: 50 cases, 0 failed$' "$out" || fail "not every death by signal or exit(3) across nodes was repaired (see the table above)"
grep -q '^conformance: 18 cases, 0 failed$' "$out" || fail "not every non-zero exit in the 4-process job was repaired (see the second table)"
[ "$(grep -c '^conformance exit: 0$' "$out")" = 2 ] || fail "conformance.py did not exit 0 twice"
say "ok"
