#!/usr/bin/env bash
# slurm.cluster_smoke: the test cluster comes up, srun reaches 4 distinct nodes, every node
# is idle, each node sees only the private bridge and has its own /dev/shm; then down.
source "$(dirname "$0")/lib.sh"
cluster_up

say "srun -N4 hostname"
out=$(timeout 30 srun -N4 hostname) || fail "srun -N4 hostname failed: $out"
echo "$out"
hosts=$(sort -u <<<"$out")
[ "$(wc -l <<<"$hosts")" = 4 ] || fail "expected 4 distinct host names, got: $(echo $hosts)"
grep -qvx 'frnode[0-9]*' <<<"$hosts" && fail "a task reported a host name that is not a test node: $(echo $hosts)"

say "sinfo: all $FLASHREC_SLURM_NODES nodes idle"
timeout 10 sinfo
wait_until 10 "all nodes idle" all_idle "$FLASHREC_SLURM_NODES"

say "a node's network is the private bridge only (MPI can never pick the machine's interface)"
addrs=$(timeout 30 srun -N1 -w frnode2 ip -o -4 addr show | awk '{print $2, $4}')
echo "$addrs"
[ "$addrs" = "$(printf 'lo 127.0.0.1/8\nfr0 10.200.0.12/24')" ] || fail "unexpected interfaces on frnode2"
timeout 30 srun -N1 -w frnode2 ip route | grep -q default && fail "frnode2 has a default route"

say "/dev/shm is per node"
timeout 30 srun -N1 -w frnode2 touch /dev/shm/flashrec-smoke || fail "cannot write frnode2's /dev/shm"
timeout 30 srun -N1 -w frnode2 test -e /dev/shm/flashrec-smoke || fail "frnode2 lost its own /dev/shm file"
timeout 30 srun -N1 -w frnode3 test -e /dev/shm/flashrec-smoke 2>/dev/null && fail "frnode3 sees frnode2's /dev/shm"
[ -e /dev/shm/flashrec-smoke ] && fail "the machine sees frnode2's /dev/shm"
say "ok"
