# The two commands: `make test` and `make demo`. Both create .venv and install into it.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.syncopy-installed
# CPU installs pin the CPU build of torch before the package (pyproject declares the looser
# range a GPU user needs); the Triton interpreter runs the kernels on CPU.
TORCH_CPU ?= torch==2.13.0
export TRITON_INTERPRET := 1
export TRITON_DEFAULT_FP_FUSION ?= 1

.PHONY: test demo mutants install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_CPU)"
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(VENV)/bin/syncopy demo --world 4

# The mutants of the product the suite must kill (tests/mutants.py); CI runs it before `make test`.
mutants: $(STAMP)
	$(PY) -m tests.mutants

clean:
	rm -rf $(VENV) .pytest_cache .syncopy-cache
