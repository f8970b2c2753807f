# Frontier: two commands work on a fresh machine with only Python 3.11 and pip.
#   make demo   - set up .venv and simulate the embedded default deployment
#   make test   - set up .venv (+ the vLLM and SGLang scheduler oracles, CPU only) and run every test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test venv oracle clean

$(BIN)/frontier: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q --upgrade pip
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[dev]'
	touch $@

venv: $(BIN)/frontier

$(VENV)/.oracle: scripts/install_oracle.sh $(BIN)/frontier
	bash scripts/install_oracle.sh $(BIN)/python
	touch $@

oracle: $(VENV)/.oracle

demo: $(BIN)/frontier
	$(BIN)/frontier simulate --config datasets/scenarios/demo.yaml --output-dir out/demo

test: $(BIN)/frontier $(VENV)/.oracle
	FRONTIER_REQUIRE_ORACLE=1 $(BIN)/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) out
