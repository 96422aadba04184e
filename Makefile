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
	$(PY) -m pip install --quiet "maturin>=1.7,<2" "pytest>=8" "numpy>=1.26" "pandas>=2.2" "matplotlib>=3.8" "tqdm>=4.66"

# The engine is built profile-guided (tools/pgo-profile.sh), trained again only when the
# engine or the training scenarios change.
PGO := target/pgo/trained
$(PGO): tools/pgo-profile.sh $(shell find crates -name '*.rs' -o -name 'Cargo.toml') Cargo.lock python/tacc/scenarios/default.toml python/tacc/scenarios/papers/*.toml
	tools/pgo-profile.sh

$(STAMP): $(VENV)/bin/python $(PGO) $(shell find crates python -name '*.rs' -o -name '*.py' -o -name '*.toml' -o -name '*.cdf' 2>/dev/null) Cargo.toml pyproject.toml
	flags=$$(tools/pgo-profile.sh --cargo-flags); \
	if [ -n "$$flags" ]; then export CARGO_ENCODED_RUSTFLAGS="$$flags"; fi; \
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH \
	$(VENV)/bin/maturin develop --release --quiet
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/tacc run --out out/motivating

test: setup
	cargo test --workspace
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) target out
