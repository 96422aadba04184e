#!/usr/bin/env bash
# Profile-guided optimisation of the engine.
#
#   tools/pgo-profile.sh                 train: build the scenario runner with instrumentation,
#                                        run it over the training set below, merge the counts
#                                        into target/pgo/tacc.profdata
#   tools/pgo-profile.sh --cargo-flags   print CARGO_ENCODED_RUSTFLAGS for a build that uses
#                                        the profile (the caller's own RUSTFLAGS kept); empty
#                                        when there is no profile
#
# The training set is the shipped scenarios, shortened, each with the mechanisms the
# reproductions run on it (code never run in training is laid out as cold, which slows it
# down), and not the benchmark files, so that the benchmarks measure what users get rather
# than what was trained on. llvm-profdata comes from rustup's llvm-tools component, added here
# if missing; where it cannot be had, training prints a note and the build goes on without PGO.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/target/pgo"

# Cargo's encoding of rustflags (0x1f-separated, so paths may hold spaces): the caller's
# flags, then `$1`.
encoded() {
    local flags=""
    if [ -n "${CARGO_ENCODED_RUSTFLAGS:-}" ]; then
        flags="$CARGO_ENCODED_RUSTFLAGS"$'\x1f'
    else
        local w
        for w in ${RUSTFLAGS:-}; do flags+="$w"$'\x1f'; done
    fi
    printf '%s' "$flags$1"
}

if [ "${1:-}" = "--cargo-flags" ]; then
    if [ -f "$out/tacc.profdata" ]; then
        encoded "-Cprofile-use=$out/tacc.profdata"
    fi
    exit 0
fi

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
rm -rf "$out"
mkdir -p "$out"
if [ ! -x "$profdata" ]; then
    # Best effort: offline, or without rustup, the build goes on without PGO.
    rustup component add llvm-tools >/dev/null 2>&1 || true
fi
if [ ! -x "$profdata" ]; then
    echo "tools/pgo-profile.sh: no llvm-profdata in the toolchain; building without PGO" >&2
    touch "$out/trained"
    exit 0
fi
# A target directory of its own: the instrumented build never evicts the normal one.
CARGO_ENCODED_RUSTFLAGS=$(encoded "-Cprofile-generate=$out/raw") CARGO_TARGET_DIR=target/pgo-gen \
    cargo build --release --quiet --example run_scenario
runner=target/pgo-gen/release/examples/run_scenario
# file, simulated duration (past the scenario's last flow start), then --set overrides and
# the runner's own options (`--name=value`): every mechanism and transport, a few seconds of
# instrumented runs in all. The 288-server tree also runs with 40 racks, whose ports outgrow
# a core's L2 cache: a large fabric's path (prefetching, huge pages) is otherwise laid out as
# cold, and k = 16 ran 1.12x the plain build's time. The fat tree runs in two partitions, as
# a fabric of 1,024 hosts does by default: untrained, the partitioned loop was laid out as
# cold (its events dispatched out of line), and k = 32 on two threads ran slower for it.
while read -r file duration sets; do
    args=()
    for s in $sets; do
        case $s in
            --*=*) args+=("${s%%=*}" "${s#*=}") ;;
            *) args+=(--set "$s") ;;
        esac
    done
    if ! msg=$("$runner" "$file" "$out/run" --set "duration=$duration" "${args[@]}" 2>&1); then
        echo "tools/pgo-profile.sh: training run $file $sets failed: $msg" >&2
        exit 1
    fi
done <<'LIST'
python/tacc/scenarios/default.toml 12s
python/tacc/scenarios/default.toml 12s mechanism={kind="hygenicc",on_shortage="queue"}
python/tacc/scenarios/default.toml 12s mechanism={kind="hygenicc",on_shortage="drop"}
python/tacc/scenarios/papers/hygenicc_fig2-5.toml 7s tcp.cc="dctcp"
python/tacc/scenarios/papers/sdngcc_fig1-6.toml 12s mechanism={kind="sdn-gcc",interval="1ms",on_shortage="queue",clear_ce=true}
python/tacc/scenarios/papers/sdngcc_fig1-6.toml 12s mechanism={kind="static-rate",rate="250Mbps",on_shortage="queue"}
python/tacc/scenarios/papers/sicc_dumbbell.toml 5s
python/tacc/scenarios/papers/sicc_dumbbell.toml 5s mechanism={kind="sicc",initial_window=2.0,evaluate_on_syn=true}
python/tacc/scenarios/papers/sicc_dumbbell.toml 5s mechanism={kind="rwndq"}
python/tacc/scenarios/papers/sicc_tree144.toml 1s
python/tacc/scenarios/papers/sicc_tree288.toml 0.6s topology.racks=40
python/tacc/scenarios/papers/sdnecn_topo1.toml 10s mechanism={kind="sdn-ecn"}
python/tacc/scenarios/papers/sdnecn_multihop.toml 7s mechanism={kind="sdn-ecn"}
python/tacc/scenarios/fattree.toml 40ms topology.k=16 --partitions=2 --threads=1
LIST
rm -rf "$out/run"
"$profdata" merge -o "$out/tacc.profdata" "$out/raw"
rm -rf "$out/raw"
touch "$out/trained"
