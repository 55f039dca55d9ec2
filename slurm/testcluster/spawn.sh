#!/usr/bin/env bash
# spawn.sh <cgroup-dir> <netns> <hostname> <command...>   (internal helper of up.sh/node.sh)
# Starts one daemon the way a test node needs it, then execs the command:
#   1. joins <cgroup-dir> first, so everything it forks (slurmstepd, job steps, MPI ranks)
#      can be killed or frozen with one write to cgroup.kill / cgroup.freeze;
#   2. enters the network namespace <netns> (only lo and fr0 on the private bridge there);
#   3. gets its own hostname (new UTS namespace) and its own /dev/shm (new mount namespace,
#      fresh tmpfs): node-local shared memory dies with the node, as on real hardware.
set -euo pipefail
cg=$1 ns=$2 host=$3
shift 3
if [ "${FRS_SPAWN_INNER:-}" != 1 ]; then
    echo $$ > "$cg/cgroup.procs"
    # A daemon must not inherit its starter's descriptors: a lock fd held by slurmd would
    # block the next down.sh, an open pipe would keep a test's output open.
    for fd in /proc/$$/fd/*; do
        fd=${fd##*/}
        if ((fd > 2 && fd != 255)); then eval "exec $fd>&-"; fi
    done
    # The daemons are cluster infrastructure, not part of a test: drop fr-run's leak tag.
    exec env -u FLASHREC_TEST_TAG FRS_SPAWN_INNER=1 \
        nsenter --net="/run/netns/$ns" -- \
        unshare --uts --mount --propagation private -- "$0" "$cg" "$ns" "$host" "$@"
fi
unset FRS_SPAWN_INNER
hostname "$host"
mount -t tmpfs -o mode=1777 frslurm-shm /dev/shm
exec "$@"
