#!/usr/bin/env bash
# down.sh: tear the test cluster down completely: daemons (and every job process on the
# nodes), cgroups, network namespaces, veths, the bridge, the tagged /etc/hosts lines and the
# state directory with its slurm.conf. Safe to run twice, and after a failed or killed up.sh.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
[ "$(id -u)" = 0 ] || frs_die "needs root"
frs_lock
if frs_teardown; then
    frs_log "down"
else
    frs_die "teardown incomplete (see above)"
fi
