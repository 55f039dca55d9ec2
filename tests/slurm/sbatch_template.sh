#!/usr/bin/env bash
# slurm.sbatch_template: slurm/templates/flashrec.sbatch, submitted as a user would, with a
# stand-in for flashrec-launch. Checks: output file %x-%j.out in the submit directory, the
# launcher gets "train.yaml --resume-if-checkpoint" and the allocation (4 active + 1 spare),
# the template finds the inter-node interface by itself (fr0 here), flashrec's requeue
# (flashrec-slurm requeue -> requeue_job) restarts the job with SLURM_RESTART_COUNT=1 and
# the output appended, and mpirun runs across the nodes on the detected interface.
source "$(dirname "$0")/lib.sh"
tool=$(realpath "${1:?usage: sbatch_template.sh <flashrec-slurm executable>}")
templates=$FRS_ROOT/slurm/templates
bash -n "$templates/flashrec.sbatch" || fail "flashrec.sbatch: syntax error"
bash -n "$templates/flashrec-cuda.sbatch" || fail "flashrec-cuda.sbatch: syntax error"
cluster_up --nodes 5

cat > "$FRS_JOB_DIR/fake-launch" <<STUB
#!/usr/bin/env bash
echo "launch: \$*"
echo "btl_if=\$FLASHREC_BTL_IF restart=\${SLURM_RESTART_COUNT:-0}"
"$tool" allocation 4 1 | grep -E '^(active|spare)='
if [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then
    "$tool" requeue "\$SLURM_JOB_ID"
    sleep 60
    echo "FAIL: still running after the requeue"
    exit 1
fi
# (sleep: see mpirun_in_allocation.sh, a PRRTE race with processes that exit at once)
timeout 30 "$FRS_ROOT/tools/fr-mpirun" -n 4 --map-by ppr:1:node sh -c 'sleep 0.5; hostname' | sed 's/^/host: /'
STUB
chmod +x "$FRS_JOB_DIR/fake-launch"

say "sbatch flashrec.sbatch train.yaml (no interface given)"
cd "$FRS_JOB_DIR"
job=$(env -u FLASHREC_BTL_IF -u PRTE_MCA_oob_tcp_if_include FLASHREC_LAUNCH="$FRS_JOB_DIR/fake-launch" \
      timeout 10 sbatch --parsable "$templates/flashrec.sbatch" train.yaml)
out="$FRS_JOB_DIR/flashrec-$job.out"
wait_until 40 "job $job requeued and started again" release_requeued "$job"
wait_until 90 "job $job finished" job_done "$job"
cat "$out"
say "job $job: $(job_state "$job")"
[ "$(job_state "$job")" = COMPLETED ] || fail "job $job ended $(job_state "$job")"
grep -qx "launch: train.yaml --resume-if-checkpoint" "$out" || fail "the launcher did not get 'train.yaml --resume-if-checkpoint'"
grep -q "^btl_if=fr0 restart=0$" "$out" || fail "first start: interface not detected as fr0"
grep -q "^btl_if=fr0 restart=1$" "$out" || fail "no second start after the requeue (or its output was not appended)"
[ "$(grep -c '^active=frnode1 frnode2 frnode3 frnode4$' "$out")" = 2 ] || fail "active nodes wrong"
grep -qx "spare=frnode5" "$out" || fail "spare node wrong"
[ "$(sed -n 's/^host: //p' "$out" | sort -u | wc -l)" = 4 ] || fail "mpirun did not reach 4 hosts"
grep -q '^FAIL' "$out" && fail "the stand-in launcher reported FAIL"
say "ok"
