#!/usr/bin/env bash
# Sets everything up and runs the main demo.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FLASHREC_BUILD_DIR:-$here/build}
"$here/scripts/setup.sh"
cmake -S "$here" -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
echo "demo: 4 ranks, one is SIGKILLed inside MPI_Allreduce, a replacement is spawned,"
echo "      and the job goes on with 4 ranks in the original order"
exec "$here/tools/fr-run" --timeout 60 -- "$here/tools/fr-mpirun" -n 4 "$build/tests/ulfm_repair" --mode spawn
