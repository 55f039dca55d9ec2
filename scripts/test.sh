#!/usr/bin/env bash
# Sets everything up, builds with warnings as errors, and runs the whole test suite.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L ulfm
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FLASHREC_BUILD_DIR:-$here/build}
"$here/scripts/setup.sh"
cmake -S "$here" -B "$build" -DFLASHREC_WERROR=ON >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
grep -E "^-- flashrec:" "$build.configure.log" || true
if ! cmake --build "$build" -j "$(nproc)" >"$build.build.log" 2>&1; then
  grep -vE "^\[ *[0-9]+%\] (Building|Linking|Built)" "$build.build.log"
  echo "test.sh: build failed (full log: $build.build.log)" >&2
  exit 1
fi
grep -E "CUDA|\.cu\.o" "$build.build.log" | head -5 || true
cd "$build"
exec ctest --output-on-failure --timeout 600 "$@"
