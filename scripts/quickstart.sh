#!/bin/sh
# quickstart.sh - set up kiln on a fresh Debian machine and run its main job: install the
# packages, build, list the devices, build kiln's kernels into the program cache for each device
# (kiln-info --prewarm: later programs start without compiling), and run the example on the best
# device ("auto"). build/ is a release build (-O3, NDEBUG): what a user trains with, and what
# scripts/gpu-check.sh builds on a GPU; developers set up their own (CONTRIBUTING.md).
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
if [ ! -d build ]; then meson setup build --buildtype=release; fi
meson compile -C build
./build/tools/kiln-info
./build/tools/kiln-info --prewarm
if [ -x build/examples/devices ]; then ./build/examples/devices; fi
