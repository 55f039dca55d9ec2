# Shared by the `slurm` tests (sourced). Each test brings the test cluster up, and tears it
# down in an EXIT trap, also on failure. Every command that could block has a timeout, so
# the trap runs well before ctest's own TIMEOUT (which would SIGKILL the script).
set -euo pipefail

FRS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TC=$FRS_ROOT/slurm/testcluster
# First of all: a Slurm client without a configuration asks DNS for the controller.
export SLURM_CONF=${FLASHREC_SLURM_STATE:-/tmp/flashrec-slurm}/etc/slurm.conf
T0=$(date +%s.%N)

elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "[$(elapsed)s] $*"; }
# The reason is said again as the test's last line, after the logs on_exit prints.
fail() { FRS_FAILURE="$*"; echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "the Slurm test cluster needs root (network namespaces, cgroups)"
grep -q ' - cgroup2 ' /proc/self/mountinfo || skip "no cgroup v2 hierarchy mounted"

# wait_until <seconds> <what> <command...>: poll every 0.2 s.
wait_until() {
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$(awk -v t="$(date +%s.%N)" -v l="$limit" 'BEGIN { printf "%.3f", t + l }')
    until "$@"; do
        if awk -v d="$deadline" -v t="$(date +%s.%N)" 'BEGIN { exit !(t > d) }'; then
            fail "$what: not reached within $limit s"
        fi
        sleep 0.2
    done
}

# node_state <node>: Slurm's state, e.g. idle, mixed, down*, drained ("*" = not responding).
node_state() { timeout 10 sinfo -h -N -n "$1" -o '%T' | head -n 1; }
node_is() { [ "$(node_state "$1")" = "$2" ]; }
all_idle() { [ "$(timeout 10 sinfo -h -N -o '%T' | grep -cx idle)" = "$1" ]; }

# shm_clean <flashrec job name> <Slurm job id>: true when no running node's /dev/shm holds a
# snapshot segment of the job or its epilog marker (slurm/epilog/flashrec-epilog). For wait_until.
shm_clean() {
    local i node left
    for ((i = 1; i <= FLASHREC_SLURM_NODES; i++)); do
        node=frnode$i
        [ "$("$TC/node.sh" status "$node")" = running ] || continue
        left=$("$TC/node.sh" exec "$node" ls /dev/shm | grep -E "^flashrec\.$1\.|^flashrec-slurm-job\.$2\." || true)
        [ -z "$left" ] || { FRS_SHM_LEFT="$node: $(echo $left)"; return 1; }
    done
}

# job_state <id>: PENDING, RUNNING, COMPLETED, ... from the controller.
job_state() { timeout 10 scontrol show job -o "$1" | tr ' ' '\n' | sed -n 's/^JobState=//p'; }
job_done() { case $(job_state "$1") in PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUED) return 1 ;; esac; }

# release_requeued <job>: true once a requeued job runs again (or finished). Slurm holds a
# requeued job ~2 minutes (BeginTime); a test has no time for that. The hold is set once the
# requeue is complete (job PENDING again), so it is released only then, and again if the
# requeue set it after us. For wait_until.
release_requeued() {
    local info
    info=$(timeout 10 scontrol show job -o "$1")
    [[ $info == *Restarts=1* ]] || return 1
    [[ $info == *JobState=PENDING* ]] || { [[ $info == *JobState=RUNNING* || $info == *JobState=COMPLETED* ]]; return; }
    [[ $info == *Reason=BeginTime* ]] && timeout 10 scontrol update jobid="$1" StartTime=now
    return 1
}

on_exit() {
    local rc=$?
    trap - EXIT
    cd /
    if ((rc != 0 && rc != 77)) && [ -n "${FRS_JOB_DIR:-}" ]; then
        for f in "$FRS_JOB_DIR"/*.out; do
            [ -f "$f" ] && { echo "--- job output $f" >&2; tail -n 40 "$f" >&2; }
        done
    fi
    if ((rc != 0 && rc != 77)) && [ -d "${FLASHREC_SLURM_STATE:-}/log" ]; then
        echo "--- test failed (exit $rc): tails of the cluster's logs" >&2
        for f in "$FLASHREC_SLURM_STATE"/log/*.log; do
            echo "--- $f" >&2
            # (slurmd's mpi/pmix plugin complains that libpmix is missing: not used here)
            grep -v 'pmix\|MPI: Cannot create context' "$f" | tail -n 20 >&2
        done
    fi
    # FLASHREC_E2E_KEEP=<dir>: keep the job's event logs and output there (figures by hand).
    if [ -n "${FLASHREC_E2E_KEEP:-}" ] && [ -n "${FRS_JOB_DIR:-}" ]; then
        mkdir -p "$FLASHREC_E2E_KEEP" && cp -a "$FRS_JOB_DIR"/. "$FLASHREC_E2E_KEEP"/ 2>/dev/null || true
    fi
    [ -n "${FRS_JOB_DIR:-}" ] && rm -rf "$FRS_JOB_DIR"
    if ! timeout 60 "$TC/down.sh"; then
        echo "FAIL: down.sh could not tear the cluster down" >&2
        ((rc == 0)) && rc=1
    fi
    [ -n "${FRS_FAILURE:-}" ] && echo "FAIL (see above): $FRS_FAILURE" >&2
    exit "$rc"
}

# cluster_up [up.sh args]: serialize with other slurm tests, clean leftovers of a killed
# run, start the cluster, and take over the environment it prints.
cluster_up() {
    mkdir -p /run/lock
    exec 8>/run/lock/flashrec-slurm-tests.lock
    flock -w 600 8 || fail "another slurm test held the test-cluster lock for 600 s"
    timeout 60 "$TC/down.sh" >/dev/null 2>&1 || true
    trap on_exit EXIT
    local env
    env=$(timeout 90 "$TC/up.sh" "$@") || fail "slurm/testcluster/up.sh failed"
    eval "$env"
    # A directory every node sees (they share the filesystem) for job scripts and output.
    FRS_JOB_DIR=$(mktemp -d /tmp/flashrec-slurm-test.XXXXXX)
    chmod 755 "$FRS_JOB_DIR"
    say "cluster up: $FLASHREC_SLURM_NODES nodes"
}
