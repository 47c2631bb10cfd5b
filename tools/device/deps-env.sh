# shellcheck shell=bash
# Sourced: points CMake, the compilers and the programs at the Debian packages that
# tools/device/fetch-deps unpacked (RINGTRAIN_DEPS, default .device-deps in the checkout):
# Open MPI relocated with OPAL_PREFIX, parallel HDF5 through its h5pcc, OpenBLAS, the rest.
_rt_deps="${RINGTRAIN_DEPS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.device-deps}"
if [ ! -d "$_rt_deps/core/usr" ]; then
  echo "deps-env.sh: no $_rt_deps/core/usr (run tools/device/fetch-deps, or unpack .device-carry/deps.tar.xz)" >&2
  return 1
fi
export RINGTRAIN_DEPS_PREFIX="$_rt_deps/core/usr"  # read by the patched h5pcc
# cudnn-frontend's headers, where fetch-deps packed them (CMake's find of the fused attention).
if [ -z "${CUDNN_FRONTEND_HOME:-}" ] && [ -f "$_rt_deps/cudnn-frontend/include/cudnn_frontend.h" ]; then
  export CUDNN_FRONTEND_HOME="$_rt_deps/cudnn-frontend"
fi
_rt_lib="$RINGTRAIN_DEPS_PREFIX/lib/x86_64-linux-gnu"

# The common system libraries (system/) only for the sonames this machine lacks: linked into
# missing-lib/, so the machine's own (often newer) copies stay first for everything else.
_rt_missing="$_rt_deps/missing-lib"
rm -rf "$_rt_missing"
mkdir -p "$_rt_missing"
_rt_have="$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null) | awk '{print $1}')"
for _rt_so in "$_rt_deps"/system/{usr/,}lib/x86_64-linux-gnu/lib*.so.[0-9]*; do
  _rt_name="${_rt_so##*/}"
  [[ "$_rt_name" =~ \.so\.[0-9]+$ ]] || continue  # sonames only (libssl.so.3, not libkrb5.so.3.3)
  grep -qxF "$_rt_name" <<<"$_rt_have" || ln -s "$_rt_so" "$_rt_missing/$_rt_name"
done
# shellcheck disable=SC2012  # sonames linked above
RINGTRAIN_DEPS_MISSING="$(cd "$_rt_missing" && ls | tr '\n' ' ')"
export RINGTRAIN_DEPS_MISSING

export PATH="$RINGTRAIN_DEPS_PREFIX/bin:$PATH"
export LD_LIBRARY_PATH="$_rt_lib:$_rt_deps/core/lib/x86_64-linux-gnu:$_rt_lib/openmpi/lib:$_rt_lib/openblas-pthread:$_rt_missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$RINGTRAIN_DEPS_PREFIX"        # Open MPI: libdir, MCA components, help and wrapper data
export PMIX_INSTALL_PREFIX="$_rt_lib/pmix2"         # Debian's PMIx lives under its own prefix
# mpirun refuses to start when its remote agent (ssh, rsh) is missing, even for local ranks.
command -v ssh >/dev/null || command -v rsh >/dev/null || export OMPI_MCA_plm_rsh_agent=false
export MPI_HOME="$RINGTRAIN_DEPS_PREFIX"            # FindMPI: mpicc/mpiexec from here
export CMAKE_PREFIX_PATH="$RINGTRAIN_DEPS_PREFIX${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export CMAKE_INCLUDE_PATH="$RINGTRAIN_DEPS_PREFIX/include/x86_64-linux-gnu/openblas-pthread:$RINGTRAIN_DEPS_PREFIX/include"
export CMAKE_LIBRARY_PATH="$_rt_lib/openblas-pthread:$_rt_lib"
export CPATH="$RINGTRAIN_DEPS_PREFIX/include${CPATH:+:$CPATH}"
unset _rt_deps _rt_lib _rt_missing _rt_have _rt_so _rt_name
