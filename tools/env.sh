# shellcheck shell=bash
# Sourced by tools/* scripts: build folder, parallelism, and what mpirun needs as root.
RINGTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RINGTRAIN_BUILD="${RINGTRAIN_BUILD:-$RINGTRAIN_ROOT/build}"
# The sanitizer build (clang, ASan + UBSan, libFuzzer coverage): tests and fuzz targets.
RINGTRAIN_SANITIZE_BUILD="${RINGTRAIN_SANITIZE_BUILD:-$RINGTRAIN_ROOT/build-sanitize}"
RINGTRAIN_JOBS="${RINGTRAIN_JOBS:-$(nproc)}"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Containers often forbid the cross-process memory attach Open MPI tries first.
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"

# Configure the shared build folder (Release, Ninja); extra arguments go to cmake.
ringtrain_configure() {
  cmake -S "$RINGTRAIN_ROOT" -B "$RINGTRAIN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
}

# Configure, then build every target (the executable, tests, CUDA test binaries).
ringtrain_configure_and_build() {
  ringtrain_configure "$@"
  cmake --build "$RINGTRAIN_BUILD" -j "$RINGTRAIN_JOBS"
}

# Configure the sanitizer build folder (clang, Release with ASan + UBSan, no CUDA: the sanitizers
# check host code; precompiled headers, as the Release build checks each file's includes); extra
# arguments go to cmake.
ringtrain_configure_sanitize() {
  CC=clang CXX=clang++ cmake -S "$RINGTRAIN_ROOT" -B "$RINGTRAIN_SANITIZE_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DRINGTRAIN_SANITIZE=ON -DRINGTRAIN_WITH_CUDA=OFF -DRINGTRAIN_PRECOMPILE_HEADERS=ON "$@"
}
