#!/usr/bin/env bash
# node.sh <action> <node> [command...]: act on one test node (frnodeN, or just N) as a whole.
#   kill    SIGKILL everything on the node at once (cgroup.kill): slurmd, slurmstepd, every
#           job process. Slurm sees a dead node after SlurmdTimeout (see docs/slurm.md).
#   freeze  stop everything on the node (cgroup.freeze): a hung node; sockets stay open.
#   thaw    undo freeze.
#   cut     cut the node off the network: the machine's end of its veth goes down, so nothing
#           reaches it or leaves it and no peer gets a reset (a pulled cable, a dead switch
#           port); its processes run on.
#   reconnect undo cut.
#   start   start the node's slurmd again after a kill; it returns to idle by itself
#           (ReturnToService=2), with a fresh /dev/shm.
#   exec    run a command inside the node (its network, hostname, /dev/shm and cgroup),
#           e.g. node.sh exec frnode2 ls /dev/shm
#   status  running | frozen | cut | dead
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

usage() { sed -n '2,16p' "$0" >&2; exit 2; }
(($# >= 2)) || usage
action=$1 node=$2
shift 2
[[ $node =~ ^[0-9]+$ ]] && node=$(frs_node_name "$node")
[[ $node =~ ^${FRS_NODE_PREFIX}([0-9]+)$ ]] || frs_die "'$node' is not a test node name (${FRS_NODE_PREFIX}N)"
index=${BASH_REMATCH[1]}
[ "$(id -u)" = 0 ] || frs_die "needs root"
cgroot=$(frs_cgroup_root) || frs_die "no cgroup v2 hierarchy mounted"
cg=$cgroot/$node
[ -d "$cg" ] || frs_die "node $node has no cgroup ($cg): is the cluster up, with that many nodes?"

case $action in
    kill)
        frs_cgroup_kill "$cg" || frs_die "processes on $node survived SIGKILL: $(tr '\n' ' ' < "$cg/cgroup.procs")"
        frs_log "killed $node"
        ;;
    freeze|thaw)
        [ -e "$cg/cgroup.freeze" ] || frs_die "this kernel has no cgroup.freeze (cgroup v2 freezer, Linux >= 5.2)"
        if [ "$action" = freeze ]; then want=1; else want=0; fi
        echo "$want" > "$cg/cgroup.freeze"
        # The write only starts it; cgroup.events says when every task has stopped.
        for _ in $(seq 100); do
            grep -qx "frozen $want" "$cg/cgroup.events" && break
            sleep 0.02
        done
        grep -qx "frozen $want" "$cg/cgroup.events" || frs_die "$node did not reach frozen=$want within 2 s"
        frs_log "$action $node: done"
        ;;
    cut|reconnect)
        veth=${FRS_VETH_PREFIX}$node
        ip link show "$veth" >/dev/null 2>&1 || frs_die "$node has no veth $veth: is the cluster up?"
        if [ "$action" = cut ]; then state=down; else state=up; fi
        ip link set "$veth" "$state" || frs_die "could not set $veth $state"
        frs_log "$action $node: $veth $state"
        ;;
    start)
        [ -e "$FRS_CONF" ] || frs_die "no $FRS_CONF: the cluster is not up"
        frs_lock
        frs_start_node "$index"
        frs_log "started slurmd on $node"
        ;;
    exec)
        (($#)) || frs_die "exec needs a command"
        pid=$(head -n 1 "$cg/cgroup.procs" 2>/dev/null || true)
        [ -n "$pid" ] || frs_die "$node is dead (nothing in its cgroup); node.sh start $node first"
        # Join the node's cgroup first, so the command dies with the node like everything else.
        exec bash -c 'echo $$ > "$0/cgroup.procs" && exec nsenter -t "$1" -n -u -m -- "${@:2}"' "$cg" "$pid" "$@"
        ;;
    status)
        if ! frs_cgroup_busy "$cg"; then echo dead
        elif grep -qx "frozen 1" "$cg/cgroup.events"; then echo frozen
        elif ! ip link show "${FRS_VETH_PREFIX}$node" 2>/dev/null | grep -q ',UP'; then echo cut
        else echo running
        fi
        ;;
    *) usage ;;
esac
