# Every target installs what it needs into .venv first, so each works on a fresh clone.
PY := .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: install run test lint clean

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -e '.[dev]'
	touch $(VENV_STAMP)

install: $(VENV_STAMP)

run: $(VENV_STAMP)  ## the embedded default: finetune on split_digits with a small convnet
	.venv/bin/cl-bench train $(ARGS)

test: $(VENV_STAMP)
	$(PY) -m pytest -q

lint: $(VENV_STAMP)
	.venv/bin/ruff check cl_bench tests scripts

clean:
	rm -rf .venv outputs/runs outputs/sweeps
