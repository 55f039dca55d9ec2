#!/usr/bin/env bash
# up.sh [--nodes N] [--cpus C]: start a real Slurm cluster on this machine (needs root).
#
#   one controller (slurmctld + munged) at 10.200.0.2 and N compute nodes frnode1..frnodeN
#   at 10.200.0.11.., each slurmd in its own network namespace (a veth on the private bridge
#   frslurm0, 10.200.0.0/24), UTS namespace (its own hostname), mount namespace (its own
#   /dev/shm) and cgroup (node.sh kill|freeze|thaw acts on the whole node at once).
#
# Prints the environment to use (eval "$(up.sh)") on stdout; progress goes to stderr.
# Environment: FLASHREC_SLURM_STATE (state dir, default /tmp/flashrec-slurm),
#   FLASHREC_SLURM_NODES (default 5), FLASHREC_SLURM_CPUS (CPUs per node, default 4),
#   FLASHREC_SLURM_SLURMD_TIMEOUT (s, default 5), FLASHREC_SLURM_MESSAGE_TIMEOUT (s, default 3).
# On any failure it tears down what it built (down.sh does the same, and is safe to repeat).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

nodes=${FLASHREC_SLURM_NODES:-5}
cpus=${FLASHREC_SLURM_CPUS:-4}
slurmd_timeout=${FLASHREC_SLURM_SLURMD_TIMEOUT:-5}
message_timeout=${FLASHREC_SLURM_MESSAGE_TIMEOUT:-3}
while (($#)); do
    case $1 in
        -n|--nodes) nodes=$2; shift 2 ;;
        -c|--cpus) cpus=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) frs_die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $nodes =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 200)) || frs_die "--nodes must be 1..200, got '$nodes'"
[[ $cpus =~ ^[0-9]+$ ]] && ((cpus >= 1)) || frs_die "--cpus must be >= 1, got '$cpus'"
for t in slurmd_timeout message_timeout; do
    [[ ${!t} =~ ^[0-9]+$ ]] && ((${!t} >= 1)) || frs_die "$t must be a whole number of seconds >= 1, got '${!t}'"
done
[ "$(id -u)" = 0 ] || frs_die "needs root (network namespaces, cgroups, /etc/hosts)"

# --- packages (idempotent: only what is missing) -------------------------------------------
pkgs=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    frs_log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
fi
for c in slurmctld slurmd scontrol sinfo srun munged mungekey ip nsenter unshare flock setsid; do
    command -v "$c" >/dev/null || frs_die "'$c' not found (packages: slurmctld slurmd slurm-client munge iproute2 util-linux)"
done
cgroot=$(frs_cgroup_root) || frs_die "no cgroup v2 hierarchy mounted (needed to kill/freeze a node)"

frs_lock
# Names and addresses are fixed: one cluster per machine, whatever its state dir.
for cg in "$cgroot"/*/; do
    if [ -d "$cg" ] && frs_cgroup_busy "${cg%/}"; then
        frs_die "a test cluster is already running (cgroup ${cg%/}); run slurm/testcluster/down.sh first"
    fi
done
export SLURM_CONF=$FRS_CONF   # before any Slurm client runs: never a DNS SRV lookup

up_ok=0
on_exit() {
    local rc=$?
    ((up_ok)) && return 0
    ((rc)) || rc=1
    frs_log "up failed (exit $rc); logs:"
    for f in "$FRS_STATE"/log/*; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    frs_log "tearing down what was built"
    frs_teardown || true
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

frs_teardown >/dev/null 2>&1 || true   # leftovers of a killed run (nothing of ours is up)
started=$(date +%s.%N)

# --- state directory -----------------------------------------------------------------------
if [ -d "$FRS_STATE" ] && [ -n "$(ls -A "$FRS_STATE")" ]; then
    frs_die "$FRS_STATE exists, is not empty and is not a test-cluster state dir; choose FLASHREC_SLURM_STATE"
fi
mkdir -p "$FRS_STATE"
touch "$FRS_MARKER"
mkdir -p "$FRS_STATE"/{etc,munge,log,run,ctld,spool,tmp}
chmod 755 "$FRS_STATE/munge"   # the socket must be reachable; the key itself is 0600

# --- network: bridge on the machine, one namespace + veth per daemon host -------------------
ip link add "$FRS_BRIDGE" type bridge
ip addr add "$FRS_BRIDGE_IP/24" dev "$FRS_BRIDGE"
ip link set "$FRS_BRIDGE" up
add_host_ns() {   # name ip
    local name=$1 addr=$2 ns=${FRS_NETNS_PREFIX}$1 veth=${FRS_VETH_PREFIX}$1
    ip netns add "$ns"
    ip link add "$veth" type veth peer name "$FRS_NODE_IF" netns "$ns"
    ip link set "$veth" master "$FRS_BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev "$FRS_NODE_IF"
    ip -n "$ns" link set "$FRS_NODE_IF" up
    # No default route: nothing started inside can reach beyond 10.200.0.0/24.
    echo "$addr $name $FRS_HOSTS_TAG" >> /etc/hosts
}
add_host_ns "$FRS_CTL_NAME" "$FRS_CTL_IP"
node_lines=()
for i in $(seq "$nodes"); do
    add_host_ns "$(frs_node_name "$i")" "$(frs_node_ip "$i")"
    node_lines+=("NodeName=$(frs_node_name "$i") NodeAddr=$(frs_node_ip "$i") NodeHostname=$(frs_node_name "$i")")
done

# --- slurm.conf ----------------------------------------------------------------------------
S=$FRS_STATE
# Every task (batch script, srun step, PRRTE daemon) gets TMPDIR in its node's own directory:
# the nodes share /tmp, and the session directories of a killed node's daemons would stay
# behind there (and could meet a reused pid); down.sh removes these with the state dir.
printf '#!/bin/sh\necho "export TMPDIR=%s/tmp/$(hostname)"\n' "$S" > "$S/etc/task_prolog.sh"
chmod 755 "$S/etc/task_prolog.sh"
# slurmd runs its health check with an empty environment: squeue there needs this cluster's
# slurm.conf (a site's is at the default path).
printf '#!/bin/sh\nSLURM_CONF=%s exec %s\n' "$FRS_CONF" "$(cd "$FRS_HERE/../epilog" && pwd)/flashrec-epilog" > "$S/etc/health_check.sh"
chmod 755 "$S/etc/health_check.sh"
cat > "$FRS_CONF" <<EOF
# Generated by slurm/testcluster/up.sh: a $nodes-node test cluster on one machine.
ClusterName=flashrec
SlurmctldHost=$FRS_CTL_NAME($FRS_CTL_IP)
SlurmctldPort=$FRS_CTLD_PORT
SlurmdPort=$FRS_SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.socket
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Per-node TmpFS: the nodes share /tmp, and PMIx's per-job dirs would collide.
TmpFS=$S/tmp/%n
TaskProlog=$S/etc/task_prolog.sh
# flashrec's cleanup of /dev/shm (docs/slurm.md, "Cleaning up /dev/shm"): a job's snapshot
# segments leave a node when the job ends (Epilog), and where Slurm sends no epilog (a node
# removed from its job while frozen, thawed later) once the job no longer runs there.
Epilog=$(cd "$FRS_HERE/../epilog" && pwd)/flashrec-epilog
HealthCheckProgram=$S/etc/health_check.sh
HealthCheckInterval=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
# A node that comes back (node.sh start) returns to service by itself.
ReturnToService=2
# The nodes have fewer real cores than declared here; trust this file.
SlurmdParameters=config_overrides
# Short timeouts: a killed node shows up as not responding within seconds.
SlurmdTimeout=$slurmd_timeout
MessageTimeout=$message_timeout
InactiveLimit=0
KillWait=2
MinJobAge=300
JobRequeue=1
MailProg=/bin/true
NodeName=DEFAULT CPUs=$cpus State=UNKNOWN
$(printf '%s\n' "${node_lines[@]}")
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

# --- daemons -------------------------------------------------------------------------------
mkdir -p "$cgroot/$FRS_CTL_NAME"
mungekey -c -k "$S/munge/munge.key" -b 1024 2>/dev/null || dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$S/munge/munge.key"
setsid "$FRS_HERE/spawn.sh" "$cgroot/$FRS_CTL_NAME" "${FRS_NETNS_PREFIX}$FRS_CTL_NAME" "$FRS_CTL_NAME" \
    munged -F --force --socket="$S/munge/munge.socket" --key-file="$S/munge/munge.key" \
    --pid-file="$S/run/munged.pid" --log-file="$S/log/munged.log" --seed-file="$S/munge/munged.seed" \
    < /dev/null > "$S/log/munged.out" 2>&1 &
disown
for _ in $(seq 100); do [ -S "$S/munge/munge.socket" ] && break; sleep 0.05; done
[ -S "$S/munge/munge.socket" ] || { frs_log "munged did not create its socket"; false; }

setsid "$FRS_HERE/spawn.sh" "$cgroot/$FRS_CTL_NAME" "${FRS_NETNS_PREFIX}$FRS_CTL_NAME" "$FRS_CTL_NAME" \
    slurmctld -D -c -f "$FRS_CONF" < /dev/null > "$S/log/slurmctld.out" 2>&1 &
disown
for _ in $(seq 100); do
    timeout 5 scontrol ping 2>/dev/null | grep -q "is UP" && break
    sleep 0.1
done
timeout 5 scontrol ping 2>/dev/null | grep -q "is UP" || { frs_log "slurmctld does not answer scontrol ping"; false; }

for i in $(seq "$nodes"); do frs_start_node "$i"; done
want=$nodes
for _ in $(seq 200); do
    idle=$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l || true)
    ((idle == want)) && break
    sleep 0.1
done
((idle == want)) || { frs_log "only $idle of $want nodes became idle:"; timeout 5 sinfo -N >&2 || true; false; }

cat > "$S/env.sh" <<EOF
# The environment of the flashrec Slurm test cluster (source it, or eval up.sh's output).
export SLURM_CONF=$FRS_CONF
export FLASHREC_SLURM_STATE=$S
export FLASHREC_SLURM_NODES=$nodes
# MPI between test nodes: only the private bridge (PRRTE ignores loopback when another
# interface exists; inside a node namespace the only other one is $FRS_NODE_IF).
export FLASHREC_BTL_IF=$FRS_SUBNET
export PRTE_MCA_oob_tcp_if_include=$FRS_SUBNET
EOF
up_ok=1
frs_log "up: controller $FRS_CTL_NAME ($FRS_CTL_IP), nodes $(frs_node_name 1)..$(frs_node_name "$nodes"), $cpus CPUs each, in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $started}") s"
frs_log "state dir $S (logs in $S/log); tear down with slurm/testcluster/down.sh"
cat "$S/env.sh"
