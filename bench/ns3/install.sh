#!/usr/bin/env bash
# Install the Debian ns-3 development packages (headers + shared libraries) and a C++ toolchain
# for bench/ns3/dumbbell.cc. Idempotent: does nothing when everything is already installed.
# Needs root (or sudo) and Debian's package archive.
set -euo pipefail

PKGS=(libns3-dev libns3.37 g++ pkg-config)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "ns-3: all packages already installed (${PKGS[*]})"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "ns-3 install: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
fi
command -v apt-get >/dev/null || { echo "ns-3 install: apt-get not found (Debian/Ubuntu only); install ${missing[*]} by hand" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "ns-3 install: apt-get update failed" >&2; exit 1; }
for p in "${missing[@]}"; do
    if [ -z "$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)')" ]; then
        echo "ns-3 install: package '$p' is not available from the configured apt sources" \
             "(this script expects Debian 12 'bookworm', which ships ns-3.37)" >&2
        exit 1
    fi
done
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    || { echo "ns-3 install: apt-get install ${missing[*]} failed" >&2; exit 1; }
echo "ns-3: installed ${missing[*]}"
