# Shared names and helpers of the single-machine Slurm test cluster (sourced, not run).
# Everything the cluster creates carries the "frslurm" prefix or the hosts tag below, so
# down.sh can find and remove exactly that, even after a half-finished up.sh.

FRS_STATE=${FLASHREC_SLURM_STATE:-/tmp/flashrec-slurm}
FRS_BRIDGE=frslurm0
FRS_SUBNET=10.200.0.0/24
FRS_BRIDGE_IP=10.200.0.1          # the machine's side: clients (srun, sbatch) come from here
FRS_CTL_IP=10.200.0.2             # slurmctld and munged, in their own namespace
FRS_CTL_NAME=frctl
FRS_NODE_PREFIX=frnode            # nodes are frnode1..frnodeN at 10.200.0.(10+i)
FRS_NETNS_PREFIX=frslurm-         # network namespaces: frslurm-frctl, frslurm-frnode1, ...
FRS_VETH_PREFIX=frs-              # the machine's end of each veth: frs-frctl, frs-frnode1, ...
FRS_NODE_IF=fr0                   # the interface name inside every namespace
FRS_HOSTS_TAG="# flashrec-slurm-testcluster"
FRS_CTLD_PORT=16817
FRS_SLURMD_PORT=16818             # one port for all: each slurmd has its own network namespace
FRS_LOCK=/run/lock/flashrec-slurm-testcluster.lock
FRS_CG_NAME=flashrec-slurm        # cgroup (v2) holding one child per daemon group

frs_log() { echo "testcluster: $*" >&2; }
frs_die() { echo "testcluster: error: $*" >&2; exit 1; }

frs_node_name() { echo "${FRS_NODE_PREFIX}$1"; }
frs_node_ip() { echo "10.200.0.$((10 + $1))"; }

# The cgroup v2 hierarchy: /sys/fs/cgroup on a pure v2 system, /sys/fs/cgroup/unified on a
# hybrid one (this container). cgroup.kill needs Linux >= 5.14; node.sh falls back otherwise.
frs_cgroup_root() {
    local mnt
    mnt=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
    [ -n "$mnt" ] || return 1
    echo "$mnt/$FRS_CG_NAME"
}

# Does the cgroup hold any process? (cgroupfs files report size 0, so test the content.)
frs_cgroup_busy() { [ -n "$(cat "$1/cgroup.procs" 2>/dev/null)" ]; }

# Kill every process of one cgroup (thawed first: a frozen task cannot act on SIGKILL while
# it stays frozen) and wait until it is empty. Returns 1 if something survived 5 s.
frs_cgroup_kill() {
    local cg=$1 i
    [ -d "$cg" ] || return 0
    [ -e "$cg/cgroup.freeze" ] && echo 0 > "$cg/cgroup.freeze" 2>/dev/null
    if [ -e "$cg/cgroup.kill" ]; then
        echo 1 > "$cg/cgroup.kill"
    fi
    for i in $(seq 50); do
        frs_cgroup_busy "$cg" || return 0
        # Fallback for kernels without cgroup.kill, and for stragglers forked meanwhile.
        xargs -r kill -KILL < "$cg/cgroup.procs" 2>/dev/null
        sleep 0.1
    done
    frs_cgroup_busy "$cg" && return 1
    return 0
}

# Serialize up.sh/down.sh/node.sh against each other (fd 9 stays open until the script ends).
frs_lock() {
    mkdir -p "$(dirname "$FRS_LOCK")"
    exec 9>"$FRS_LOCK"
    flock -w 120 9 || frs_die "another up.sh/down.sh holds $FRS_LOCK for more than 120 s"
}

FRS_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FRS_CONF=$FRS_STATE/etc/slurm.conf
FRS_MARKER=$FRS_STATE/.flashrec-slurm-state   # rm -rf only a directory that carries this

# Start (or restart) node i's slurmd in its cgroup/namespaces. The node registers by itself;
# ReturnToService=2 brings a node that was DOWN back to idle.
frs_start_node() {
    local i=$1 name cgroot cg
    name=$(frs_node_name "$i")
    cgroot=$(frs_cgroup_root) || frs_die "no cgroup v2 hierarchy mounted (looked in /proc/self/mountinfo)"
    cg=$cgroot/$name
    [ -e "/run/netns/${FRS_NETNS_PREFIX}$name" ] || frs_die "node $name has no network namespace; is the cluster up?"
    mkdir -p "$cg" "$FRS_STATE/spool/$name" "$FRS_STATE/tmp/$name"
    if frs_cgroup_busy "$cg"; then
        frs_die "node $name is still running (pids $(tr '\n' ' ' < "$cg/cgroup.procs")); kill it first"
    fi
    SLURM_CONF=$FRS_CONF setsid "$FRS_HERE/spawn.sh" "$cg" "${FRS_NETNS_PREFIX}$name" "$name" \
        slurmd -D -N "$name" -f "$FRS_CONF" < /dev/null >> "$FRS_STATE/log/$name.out" 2>&1 &
    disown
}

# rmdir a cgroup whose processes are gone. The kernel refuses (EBUSY) while exiting tasks are
# still being released, after cgroup.procs already reads empty: seen once in ~40 teardowns.
frs_rmdir_cgroup() {
    local i
    for i in $(seq 50); do
        rmdir "$1" 2>/dev/null && return 0
        [ -d "$1" ] || return 0
        sleep 0.1
    done
    return 1
}

# Remove everything a cluster (or a failed up.sh) left: daemons, cgroups, namespaces, veths,
# bridge, hosts lines, state directory. Every step tolerates the thing being absent already.
frs_teardown() {
    local cgroot cg ns link rc=0 tmp
    if cgroot=$(frs_cgroup_root) && [ -d "$cgroot" ]; then
        for cg in "$cgroot"/*/; do
            [ -d "$cg" ] || continue
            frs_cgroup_kill "${cg%/}" || { frs_log "processes in ${cg%/} survived SIGKILL"; rc=1; }
            frs_rmdir_cgroup "${cg%/}" || true
        done
        frs_rmdir_cgroup "$cgroot" || { frs_log "could not remove cgroup $cgroot"; rc=1; }
    fi
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$FRS_NETNS_PREFIX" || true); do
        ip netns del "$ns" 2>/dev/null || { frs_log "could not delete netns $ns"; rc=1; }
    done
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$FRS_VETH_PREFIX" || true); do
        ip link del "$link" 2>/dev/null || true
    done
    if ip link show "$FRS_BRIDGE" >/dev/null 2>&1; then
        ip link del "$FRS_BRIDGE" || { frs_log "could not delete bridge $FRS_BRIDGE"; rc=1; }
    fi
    if grep -qF "$FRS_HOSTS_TAG" /etc/hosts 2>/dev/null; then
        # Rewrite in place: /etc/hosts may be a bind mount that a rename cannot replace.
        tmp=$(mktemp)
        grep -vF "$FRS_HOSTS_TAG" /etc/hosts > "$tmp" || true
        cat "$tmp" > /etc/hosts
        rm -f "$tmp"
    fi
    if [ -e "$FRS_MARKER" ]; then
        rm -rf "$FRS_STATE"
    elif [ -d "$FRS_STATE" ] && [ -n "$(ls -A "$FRS_STATE")" ]; then
        frs_log "left $FRS_STATE alone: it is not a test-cluster state directory (no $(basename "$FRS_MARKER"))"
    else
        rmdir "$FRS_STATE" 2>/dev/null || true
    fi
    return $rc
}
