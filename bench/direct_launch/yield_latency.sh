#!/usr/bin/env bash
# What busy-polling costs when the test cluster's nodes share this machine's cores (issue 47, the
# repair's rebuild phase; docs/slurm.md "Where a repair's time goes"): bench/latency.cpp
# (ping-pong, barrier, agreement, shrink, MPI_Comm_dup: medians) as the tasks of one
# `srun --mpi=pmix` step, one task a node, with the environment flashrec's direct launch gives its
# tasks over tcp, once with Open MPI's default under srun (it never yields: busy-polling) and once
# with mpi.yield_when_idle: true (OMPI_MCA_mpi_yield_when_idle=true). Prints both rows and the
# ratio busy/yield of each column: one run, one machine state.
#   yield_latency.sh <bench_latency executable> [--nodes N] [--reps N]
# A figure, not a test. Takes the test cluster's lock and brings the cluster down at the end.
source "$(dirname "$0")/../../tests/slurm/lib.sh"
bench=$(realpath "${1:?usage: yield_latency.sh <bench_latency> [--nodes N] [--reps N]}")
shift
nodes=5 reps=100
while (($#)); do
    case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        *) fail "unknown argument '$1'" ;;
    esac
done
MPI_PREFIX=$(cd "$FRS_ROOT/.deps/openmpi" 2>/dev/null && pwd) || skip "no .deps/openmpi (scripts/setup.sh)"
cluster_up --nodes "$nodes"

cat > "$FRS_JOB_DIR/job.sh" <<JOB
#!/usr/bin/env bash
# tools/fr-mpirun's tcp flags as the tasks' variables (launcher/core/direct_launch.cpp).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPAL_PREFIX=$MPI_PREFIX \
    LD_LIBRARY_PATH=$MPI_PREFIX/lib OMPI_MCA_mpi_ft_enable=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self \
    OMPI_MCA_btl_tcp_if_include=$FLASHREC_BTL_IF OMPI_MCA_mpi_add_procs_cutoff=16384 \
    OMPI_MCA_async_mpi_finalize=true OMPI_MCA_coll=^han SLURM_PMIX_FENCE=ring
step() { srun --mpi=pmix --overlap -N$nodes -n$nodes --ntasks-per-node 1 "$bench" $reps; }
echo "busy \$(step)"
echo "yield \$(OMPI_MCA_mpi_yield_when_idle=true step)"
JOB
chmod +x "$FRS_JOB_DIR/job.sh"
job=$(timeout 10 sbatch --parsable --no-kill -N"$nodes" --ntasks-per-node=1 -t 10 -J fr-yield-latency \
      -o "$FRS_JOB_DIR/out" "$FRS_JOB_DIR/job.sh")
wait_until 500 "job $job finished" job_done "$job"
python3 - "$FRS_JOB_DIR/out" "$(nproc)" <<'PY' || fail "no figures: $(tail -n 3 "$FRS_JOB_DIR/out")"
import sys
rows = {}
for line in open(sys.argv[1]):
    name, _, rest = line.partition(" ")
    if name in ("busy", "yield") and rest.startswith("latency "):
        rows[name] = dict(kv.split("=") for kv in rest.split()[1:])
busy, yld = rows["busy"], rows["yield"]
print(f"{busy['ranks']} ranks, one a node, on a machine of {sys.argv[2]} cores (medians, us)")
cols = ["pingpong_us", "barrier_us", "agree_us", "shrink_us", "dup_us"]
print(f"{'':>22}" + "".join(f"{c:>13}" for c in cols))
print(f"{'busy-polling (auto)':>22}" + "".join(f"{float(busy[c]):>13.1f}" for c in cols))
print(f"{'yield_when_idle: true':>22}" + "".join(f"{float(yld[c]):>13.1f}" for c in cols))
print(f"{'ratio busy/yield':>22}" + "".join(f"{float(busy[c]) / float(yld[c]):>13.1f}" for c in cols))
PY
