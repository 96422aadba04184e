#!/usr/bin/env bash
# Build bench/ns3/build/dumbbell against the Debian ns-3 packages (bench/ns3/install.sh).
# Rebuilds only when dumbbell.cc is newer than the binary.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build
if [ build/dumbbell -nt dumbbell.cc ] && [ build/dumbbell -nt build.sh ]; then
    exit 0
fi
# Debian's ns3-*.pc files carry a broken -I flag ("-I/usr;"), so the libraries are listed here;
# the headers are in /usr/include/ns3/ (on the default include path).
LIBS="-lns3-applications -lns3-internet -lns3-traffic-control -lns3-point-to-point -lns3-bridge -lns3-network -lns3-core"
[ -e /usr/include/ns3/core-module.h ] || { echo "ns-3 headers not found: run bench/ns3/install.sh" >&2; exit 1; }
${CXX:-g++} -O2 -std=c++17 -o build/dumbbell dumbbell.cc $LIBS
echo "built bench/ns3/build/dumbbell"
