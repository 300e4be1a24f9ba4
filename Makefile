# The two set-up commands of the README. Each creates .venv and installs what it needs on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint proto bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch; a bare "torch" requirement would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[torch,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/c4 demo

test: $(STAMP)
	bash scripts/system-deps.sh
	$(VENV)/bin/ruff check .
	$(PY) -m mypy
	bash scripts/pytest-phases.sh $(PY) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

proto: $(STAMP)
	$(PY) -m proto.generate

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
