#!/usr/bin/env bash
# Sets everything up, builds with warnings as errors (gcc, and a compile-only second build with
# clang), and runs the whole test suite once, on the gcc build.
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
# The same tree compiled with clang, warnings as errors; nothing of it runs (the suite is the
# gcc build's). CUDA stays off there: the gcc build compiles the CUDA paths.
clang_build=$build-clang
cmake -S "$here" -B "$clang_build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DFLASHREC_WERROR=ON -DFLASHREC_WITH_CUDA=OFF >"$clang_build.configure.log" 2>&1 \
  || { cat "$clang_build.configure.log"; exit 1; }
if ! cmake --build "$clang_build" -j "$(nproc)" >"$clang_build.build.log" 2>&1; then
  grep -vE "^\[ *[0-9]+%\] (Building|Linking|Built)" "$clang_build.build.log"
  echo "test.sh: the clang build failed (full log: $clang_build.build.log)" >&2
  exit 1
fi
echo "test.sh: clang build ($(clang++ --version | head -1)): ok"
cd "$build"
exec ctest --output-on-failure --timeout 600 "$@"
