#!/bin/sh
# gpu-carry.sh - prepare .carry/gpu (ignored by git) for scripts/gpu-check.sh on a machine with an
# NVIDIA GPU and no package registry: the Debian packages kiln builds and tests with there,
# downloaded with apt-get and extracted with dpkg -x (the OpenCL ICD loader and headers, CLBlast,
# Check, pkgconf). Run here, on a Debian machine; the result stays well under the 64 MiB that
# travels with the working tree.
set -eu
cd "$(dirname "$0")/.."
dir=.carry/gpu
pkgs="ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
      libclblast1 libclblast-dev check libsubunit0 libsubunit-dev pkgconf pkgconf-bin libpkgconf3"
rm -rf "$dir"
mkdir -p "$dir/debs" "$dir/root"
# shellcheck disable=SC2086
(cd "$dir/debs" && apt-get download $pkgs)
for f in "$dir"/debs/*.deb; do dpkg -x "$f" "$dir/root"; done
rm -rf "$dir/debs" "$dir/root/usr/share/doc" "$dir/root/usr/share/man" "$dir/root/usr/share/lintian"
find "$dir/root" -name 'libclblast.a' -delete # 13 MB, unused: kiln links the shared library
du -sh "$dir"
