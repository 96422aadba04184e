#!/usr/bin/env bash
# Profile-guided optimisation of the engine, step one: builds the scenario runner with
# instrumentation, runs it over a training set (every scenario the project ships, shortened;
# not the benchmark files, so the benchmark measures what users get rather than what was
# trained on), and merges the counts into one profile. Prints the profile's path on stdout.
# Prints nothing, so the build goes on without PGO, when the toolchain has no llvm-profdata
# (rust-toolchain.toml asks rustup for the llvm-tools component).
set -euo pipefail
cd "$(dirname "$0")/.."
sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    echo "tools/pgo-profile.sh: no llvm-profdata in the toolchain; building without PGO" >&2
    exit 0
fi
out="$PWD/target/pgo"
rm -rf "$out/raw"
# A target directory of its own: the instrumented build never evicts the normal one.
RUSTFLAGS="-Cprofile-generate=$out/raw" CARGO_TARGET_DIR=target/pgo-gen \
    cargo build --release --quiet --example run_scenario
runner=target/pgo-gen/release/examples/run_scenario
# file and simulated duration: a few seconds of instrumented runs in all, every mechanism and
# transport exercised.
while read -r file duration; do
    "$runner" "$file" "$out/run" --set "duration=$duration" 2>/dev/null ||
        { echo "tools/pgo-profile.sh: training run $file failed" >&2; exit 1; }
done <<'LIST'
python/tacc/scenarios/default.toml 12s
scenarios/hygenicc_fig2-5.toml 7s
scenarios/sdngcc_fig1-6.toml 12s
scenarios/sicc_dumbbell.toml 5s
scenarios/sicc_tree144.toml 1s
scenarios/sdnecn_topo1.toml 10s
scenarios/sdnecn_multihop.toml 7s
LIST
rm -rf "$out/run"
"$profdata" merge -o "$out/tacc.profdata" "$out/raw"
echo "$out/tacc.profdata"
