#!/usr/bin/env bash
# The install tests (tests/install/CMakeLists.txt sets RT_*): `tree` installs the build into
# RT_PREFIX and checks what is where, `cpp_api` builds and runs the installed C++ example
# against it, `lmod` loads the installed modulefile. Every failure ends with one clear line.
set -euo pipefail

P="$RT_PREFIX"
die() {
  echo "install.$check: FAIL: $*" >&2
  exit 1
}
need() {  # need -f|-x|-d PATH WHAT
  test "$1" "$2" || die "$3 missing after cmake --install: $2"
}

check_tree() {
  rm -rf "$P"
  "$RT_CMAKE" --install "$RT_BUILD" --prefix "$P" >"$RT_WORK/install.log" 2>&1 ||
    { cat "$RT_WORK/install.log"; die "cmake --install $RT_BUILD --prefix $P failed"; }
  need -x "$P/bin/ringtrain" "the executable"
  need -f "$P/include/ringtrain/train/data_parallel_step.hpp" "a public header"
  need -f "$P/$RT_LIBDIR/libringtrain_core.a" "a module library"
  need -f "$P/$RT_LIBDIR/cmake/ringtrain/ringtrainConfig.cmake" "the CMake package"
  need -f "$P/$RT_LIBDIR/cmake/ringtrain/ringtrainConfigVersion.cmake" "the CMake package version"
  need -f "$P/$RT_LIBDIR/cmake/ringtrain/ringtrainTargets.cmake" "the exported targets"
  need -x "$P/share/ringtrain/jobs/train.sbatch" "a job script (executable)"
  need -f "$P/share/ringtrain/jobs/common/env.sh" "the job scripts' env.sh"
  need -f "$P/share/ringtrain/examples/fashion_mnist/cnn.toml" "an example config"
  need -f "$P/share/ringtrain/examples/cpp_api/main.cpp" "the C++ API example"
  need -f "$P/share/modulefiles/ringtrain/$RT_VERSION.lua" "the Lmod modulefile"
  local bad
  bad="$(grep -rlE '#include *[<"](mpi|hdf5|cuda[a-z_]*|cublas[A-Za-z]*|cudnn|nccl)\.h' "$P/include" || true)"
  [ -z "$bad" ] || die "public headers include MPI/HDF5/CUDA headers: $bad"
  local version
  version="$("$P/bin/ringtrain" --version 2>&1)" || die "$P/bin/ringtrain --version failed: $version"
  [[ "$version" == *"$RT_VERSION"* ]] || die "$P/bin/ringtrain --version printed '$version', not $RT_VERSION"
  # The installed job scripts find the installed executable without PATH or a checkout.
  local exe
  exe="$(env -u RINGTRAIN_EXE -u RINGTRAIN_ROOT PATH=/usr/bin:/bin \
    bash -c "source '$P/share/ringtrain/jobs/common/env.sh' && rt_require_exe && echo \"\$RINGTRAIN_EXE\"")" ||
    die "the installed jobs/common/env.sh did not find the executable"
  [ "$exe" -ef "$P/bin/ringtrain" ] || die "the installed jobs/common/env.sh chose $exe, not $P/bin/ringtrain"
  echo "install.tree: PASS: $P ($(find "$P" -type f | wc -l) files)"
}

check_cpp_api() {
  local src="$P/share/ringtrain/examples/cpp_api" build="$RT_WORK/cpp_api-build" out
  rm -rf "$build"
  "$RT_CMAKE" -S "$src" -B "$build" -G "$RT_GENERATOR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" \
    -DCMAKE_CXX_COMPILER="$RT_CXX" || die "configuring $src against $P failed (find_package(ringtrain))"
  "$RT_CMAKE" --build "$build" || die "building $src against $P failed"
  # shellcheck disable=SC2086  # RT_MPIRUN is the launcher and its flags
  out="$($RT_MPIRUN "$build/cpp_api" 2>&1)" || { echo "$out"; die "$build/cpp_api failed under $RT_MPIRUN"; }
  echo "$out"
  grep -q '^PASS: .* 2 rank(s)' <<<"$out" || die "$build/cpp_api printed no PASS line for 2 ranks"
}

check_lmod() {
  local init="${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash" found
  [ -f "$init" ] || die "Lmod not found ($init): install it (tools/install-deps installs Debian's lmod) or set LMOD_PKG"
  set +u  # Lmod's shell functions read unset variables
  # shellcheck source=/dev/null
  source "$init"
  module use "$P/share/modulefiles"
  module load ringtrain || die "module load ringtrain failed (MODULEPATH=$MODULEPATH)"
  set -u
  found="$(command -v ringtrain || true)"
  [ "$found" = "$P/bin/ringtrain" ] || die "after module load, ringtrain on PATH is '$found', not $P/bin/ringtrain"
  [[ ":$CMAKE_PREFIX_PATH:" == *":$P:"* ]] || die "CMAKE_PREFIX_PATH ($CMAKE_PREFIX_PATH) lacks $P"
  [ "$RINGTRAIN_ROOT" = "$P/share/ringtrain" ] || die "RINGTRAIN_ROOT is '$RINGTRAIN_ROOT', not $P/share/ringtrain"
  ringtrain --version >/dev/null || die "ringtrain --version failed after module load"
  set +u
  module unload ringtrain
  set -u
  [ "$(command -v ringtrain || true)" != "$P/bin/ringtrain" ] || die "module unload ringtrain left $P/bin on PATH"
  echo "install.lmod: PASS: module load ringtrain -> $found, CMAKE_PREFIX_PATH has $P"
}

check="${1:-}"
case "$check" in
  tree) check_tree ;;
  cpp_api) check_cpp_api ;;
  lmod) check_lmod ;;
  *) die "usage: $0 tree|cpp_api|lmod" ;;
esac
