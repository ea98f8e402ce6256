#!/bin/sh
# gpu-carry.sh - prepare .carry/gpu (ignored by git) for scripts/gpu-check.sh on a machine with an
# NVIDIA GPU and no package registry: the Debian packages kiln builds and tests with there,
# downloaded with apt-get and extracted with dpkg -x (the OpenCL ICD loader and headers, CLBlast,
# Check, jansson, pkgconf). Run here, on a Debian machine; the result stays well under the 64 MiB
# that travels with the working tree.
#
# The .pc files are made relocatable (prefix=${pcfiledir}/...), so that pkg-config finds the
# carry's headers and libraries wherever the folder lies. `.ci/run carry` configures kiln with
# PKG_CONFIG_LIBDIR pointing into the carry alone (scripts/gpu-carry.sh --pc-path prints it), so
# a dependency that kiln needs and the carry lacks fails CI rather than the one GPU run.
#
# Usage: scripts/gpu-carry.sh            download and unpack into .carry/gpu
#        scripts/gpu-carry.sh --pc-path  print the carry's pkg-config folders (colon-separated)
# Environment: GPU_CARRY_DIR (default .carry/gpu), GPU_CARRY_PACKAGES (the package list instead
# of the one below; CI uses it to show that a missing package fails the check).
set -eu
cd "$(dirname "$0")/.."
dir=${GPU_CARRY_DIR:-.carry/gpu}
multiarch=usr/lib/x86_64-linux-gnu
if [ "${1:-}" = --pc-path ]; then
    abs=$(cd "$dir/root" && pwd)
    echo "$abs/$multiarch/pkgconfig:$abs/usr/share/pkgconfig"
    exit 0
fi
pkgs=${GPU_CARRY_PACKAGES:-"ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
      opencl-clhpp-headers libclblast1 libclblast-dev check libsubunit0 libsubunit-dev
      libjansson4 libjansson-dev pkgconf pkgconf-bin libpkgconf3"}
rm -rf "$dir"
mkdir -p "$dir/debs" "$dir/root"
# shellcheck disable=SC2086
(cd "$dir/debs" && apt-get download $pkgs)
for f in "$dir"/debs/*.deb; do dpkg -x "$f" "$dir/root"; done
rm -rf "$dir/debs" "$dir/root/usr/share/doc" "$dir/root/usr/share/man" "$dir/root/usr/share/lintian"
find "$dir/root" -name 'libclblast.a' -delete # 13 MB, unused: kiln links the shared library
# Relocatable .pc files: /usr becomes the carry's usr folder, seen from the .pc file's own folder
# (${pcfiledir} and ${prefix} are pkg-config's, not the shell's).
# shellcheck disable=SC2016
for pc in "$dir/root/$multiarch/pkgconfig"/*.pc; do
    [ -e "$pc" ] && sed -i 's|^prefix=/usr$|prefix=${pcfiledir}/../../..|; s|=/usr/|=${prefix}/|' "$pc"
done
# shellcheck disable=SC2016
for pc in "$dir/root/usr/share/pkgconfig"/*.pc; do
    [ -e "$pc" ] && sed -i 's|^prefix=/usr$|prefix=${pcfiledir}/../..|; s|=/usr/|=${prefix}/|' "$pc"
done
if grep -n -E '^[A-Za-z_]+=/usr|-[IL]/usr' "$dir/root/$multiarch/pkgconfig"/*.pc \
    "$dir/root/usr/share/pkgconfig"/*.pc >&2 2>/dev/null; then
    echo "gpu-carry: a .pc file still points into /usr (above)" >&2
    exit 1
fi
du -sh "$dir"
