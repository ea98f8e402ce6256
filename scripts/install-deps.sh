#!/bin/sh
# install-deps.sh - install the Debian packages kiln builds, tests and runs with
# (listed in scripts/debian-packages.txt, one per line).
set -eu
cd "$(dirname "$0")"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# shellcheck disable=SC2046
$SUDO apt-get install -y $(cat debian-packages.txt)
