#!/usr/bin/env bash
# Build htsim (the packet-level simulator, https://github.com/Broadcom/csg-htsim, directory sim/)
# with its own Makefile (g++ -O3) into bench/htsim/build/src/sim/libhtsim.a, then link our driver
# bench/htsim/dumbbell.cpp against it into bench/htsim/build/dumbbell.
#
# Sources, in this order:
#   HTSIM_SRC=DIR      a checkout (its sim/ directory) or the sim/ directory itself
#   HTSIM_SRC=GITDIR   a git directory (bare or not) holding HTSIM_COMMIT
#   otherwise          git clone of HTSIM_URL, checked out at HTSIM_COMMIT (needs internet)
# Idempotent: the sources are fetched again only when the source or the commit changes, make
# rebuilds only what changed, and the driver is relinked only when it or the library is newer.
set -euo pipefail
cd "$(dirname "$0")"
HTSIM_URL=${HTSIM_URL:-https://github.com/Broadcom/csg-htsim}
HTSIM_COMMIT=${HTSIM_COMMIT:-841d9e7be46bb968eece766aa4b6c044c7799f67}
CXX=${CXX:-g++}
JOBS=${JOBS:-$(nproc)}
BUILD=build
SRC=$BUILD/src
mkdir -p "$BUILD"

if [ -n "${HTSIM_SRC:-}" ]; then
    src=$(cd "$HTSIM_SRC" && pwd)
    if [ -f "$src/sim/eventlist.h" ]; then
        origin="dir:$src/sim"
    elif [ -f "$src/eventlist.h" ]; then
        origin="dir:$src"
    elif git --git-dir="$src" rev-parse --verify -q "$HTSIM_COMMIT^{commit}" >/dev/null; then
        origin="git:$src@$HTSIM_COMMIT"
    else
        echo "htsim build: HTSIM_SRC=$HTSIM_SRC is neither an htsim checkout nor a git directory holding $HTSIM_COMMIT" >&2
        exit 1
    fi
else
    origin="url:$HTSIM_URL@$HTSIM_COMMIT"
fi

# Fetch the sources when they are missing or came from somewhere else. Without HTSIM_SRC, sources
# already there are kept (no network needed) if they are at HTSIM_COMMIT or were copied from a
# directory by an earlier HTSIM_SRC=DIR build.
have=$(cat "$SRC/.origin" 2>/dev/null || true)
if [ -z "${HTSIM_SRC:-}" ] && [ -f "$SRC/sim/Makefile" ] \
    && { [ "${have##*@}" = "$HTSIM_COMMIT" ] || [ "${have#dir:}" != "$have" ]; }; then
    origin=$have
fi
if [ ! -f "$SRC/sim/Makefile" ] || [ "$have" != "$origin" ]; then
    # Fetched beside the old copy, which is replaced only once the new one is complete.
    NEW=$BUILD/src.new
    rm -rf "$NEW" "$BUILD/clone"
    mkdir -p "$NEW"
    case "$origin" in
        dir:*)
            cp -a "${origin#dir:}" "$NEW/sim"
            ;;
        git:*)
            git --git-dir="$src" archive --prefix=sim/ "$HTSIM_COMMIT:sim" | tar -x -C "$NEW"
            ;;
        url:*)
            command -v git >/dev/null || { echo "htsim build: git not found" >&2; exit 1; }
            git clone --quiet --no-checkout "$HTSIM_URL" "$BUILD/clone" \
                || { echo "htsim build: cannot clone $HTSIM_URL (set HTSIM_SRC to a local copy)" >&2; exit 1; }
            git -C "$BUILD/clone" archive --prefix=sim/ "$HTSIM_COMMIT:sim" | tar -x -C "$NEW"
            rm -rf "$BUILD/clone"
            ;;
    esac
    echo "$origin" > "$NEW/.origin"
    rm -rf "$SRC"
    mv "$NEW" "$SRC"
    echo "htsim: sources from ${origin}"
fi
# A directory named by HTSIM_SRC may have changed since it was copied: bring the copy up to date
# (cp -a keeps the timestamps, so make rebuilds only what changed).
if [ -n "${HTSIM_SRC:-}" ]; then
    case "$origin" in dir:*) cp -a "${origin#dir:}/." "$SRC/sim/" ;; esac
fi

# htsim's own Makefile: CFLAGS = -Wall -std=c++11 -g ... -O3 (asserts left on, as shipped).
make -s -C "$SRC/sim" -j"$JOBS" libhtsim.a > "$BUILD/make.log" 2>&1 \
    || { tail -30 "$BUILD/make.log" >&2; echo "htsim build: make failed (log: bench/htsim/$BUILD/make.log)" >&2; exit 1; }

if [ "$BUILD/dumbbell" -nt dumbbell.cpp ] && [ "$BUILD/dumbbell" -nt "$SRC/sim/libhtsim.a" ] \
    && [ "$BUILD/dumbbell" -nt build.sh ]; then
    exit 0
fi
# The same flags as the library (htsim's tests link their mains the same way).
$CXX -Wall -std=c++11 -O3 -I"$SRC/sim" -o "$BUILD/dumbbell" dumbbell.cpp "$SRC/sim/libhtsim.a"
echo "built bench/htsim/$BUILD/dumbbell (htsim ${origin##*@})"
