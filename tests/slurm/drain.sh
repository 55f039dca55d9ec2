#!/usr/bin/env bash
# slurm.drain: flashrec's drain (flashrec-slurm -> flashrec::slurm::drain_node) takes a node
# out with a formatted reason that sinfo -R shows; new jobs avoid it; resume brings it back.
source "$(dirname "$0")/lib.sh"
tool=$(realpath "${1:?usage: drain.sh <flashrec-slurm executable>}")
cluster_up --nodes 3

say "format the reason from the default template"
reason=$("$tool" reason classification=node_lost step=42)
[ "$reason" = "flashrec: node_lost at step 42" ] || fail "unexpected reason '$reason'"

say "drain frnode2"
"$tool" drain frnode2 --classification node_lost --step 42 || fail "flashrec-slurm drain failed"
wait_until 10 "frnode2 drained" node_is frnode2 drained
timeout 10 sinfo -R -o '%50E %N'
got=$(timeout 10 sinfo -R -h -o '%E|%N')
[ "$got" = "flashrec: node_lost at step 42|frnode2" ] || fail "sinfo -R shows '$got'"

say "a new 2-node job avoids the drained node"
out=$(timeout 30 srun -N2 hostname | sort | tr '\n' ' ')
[ "$out" = "frnode1 frnode3 " ] || fail "srun -N2 ran on: $out"

say "errors are clear: unknown node, bad name"
if err=$("$tool" drain frnode9 "flashrec: test" 2>&1); then fail "draining an unknown node succeeded"; fi
echo "$err"
grep -q "scontrol update nodename=frnode9 state=drain" <<<"$err" || fail "the error does not name the command"
if err=$("$tool" drain "frnode1,frnode2" "x" 2>&1); then fail "a node list was accepted as one node"; fi
echo "$err"

say "resume frnode2"
"$tool" resume frnode2 || fail "resume failed"
wait_until 10 "frnode2 idle again" node_is frnode2 idle
[ -z "$(timeout 10 sinfo -R -h)" ] || fail "a drain reason is still listed"
say "ok"
