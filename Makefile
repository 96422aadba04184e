# The two commands of the README:
#   make demo  - set up, then run the built-in default scenario (table + plot in out/motivating)
#   make test  - set up, then run the whole test suite (Rust and Python)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tacc-built

.PHONY: demo test setup bench fuzz clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "maturin>=1.7,<2" "pytest>=8" "dpkt>=1.9" "numpy>=1.26" "pandas>=2.2" "matplotlib>=3.8" "tqdm>=4.66" "os-ken>=4" "ray>=2.9,<3"

# The engine is built profile-guided (tools/pgo-profile.sh), trained again only when the
# engine or the training scenarios change.
PGO := target/pgo/trained
$(PGO): tools/pgo-profile.sh $(shell find crates -name '*.rs' -o -name 'Cargo.toml') Cargo.lock python/tacc/scenarios/*.toml python/tacc/scenarios/papers/*.toml
	tools/pgo-profile.sh

# System packages of the testbed (clang must be there before the engine is built).
DEPS := target/.testbed-deps
$(DEPS): tools/testbed-deps.sh
	tools/testbed-deps.sh
	mkdir -p target && touch $(DEPS)

# The deploy tests' real guests: Debian's kernel and an initramfs of the project's
# (tools/guest-image.sh; nothing is built where its tools are missing, and the tests say so).
GUEST := target/guest/accel
$(GUEST): $(DEPS) tools/guest-image.sh tools/guest/init tools/guest/traffic.c
	tools/guest-image.sh target/guest

# The package's bytecode is compiled here, as a wheel install does: the editable install leaves
# it to the first import, and where PYTHONDONTWRITEBYTECODE is set every start compiles again.
$(STAMP): $(DEPS) $(VENV)/bin/python $(PGO) $(shell find crates python -name '*.rs' -o -name '*.py' -o -name '*.toml' -o -name '*.cdf' -o -name '*.c' -o -name '*.h' 2>/dev/null) Cargo.toml pyproject.toml
	flags=$$(tools/pgo-profile.sh --cargo-flags); \
	if [ -n "$$flags" ]; then export CARGO_ENCODED_RUSTFLAGS="$$flags"; fi; \
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH \
	$(VENV)/bin/maturin develop --release --quiet
	$(PY) -m compileall -q python/tacc > /dev/null
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/tacc run --out out/motivating

# TACC_REQUIRE_TESTBED=1: as root, a testbed test that cannot run fails instead of skipping.
# The eBPF test-runs need root: ignored (with the reason) otherwise, included as root.
test: setup $(GUEST)
	TACC_REQUIRE_TESTBED=$$([ "$$(id -u)" = 0 ] && echo 1 || echo 0) cargo test --workspace $$([ "$$(id -u)" = 0 ] && echo -- --include-ignored)
	TACC_REQUIRE_ENGINE=1 TACC_REQUIRE_TESTBED=$$([ "$$(id -u)" = 0 ] && echo 1 || echo 0) $(PY) -m pytest -q

bench: setup
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) target out
