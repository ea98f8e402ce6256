#!/bin/sh
# install-deps.sh - install the Debian packages kiln builds, tests and runs with.
set -eu
PACKAGES="build-essential meson ninja-build pkg-config python3 \
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd oclgrind clinfo \
  libclblast-dev libopenblas-dev check valgrind"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# shellcheck disable=SC2086
$SUDO apt-get install -y --no-install-recommends $PACKAGES
