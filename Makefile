PY ?= python3

.PHONY: install lint test demo mutation bench

# pyctcdecode, the CTC peer of the speech tests, pins numpy<2, which it does not need to run: no deps
# openai-whisper, the oracle of tests/whisper, asks for an unpinned torch and triton: no deps (its own are in test)
install:
	$(PY) -m pip install -q -e '.[test,zoo,hf,ray,docs,lint]'
	$(PY) -m pip install -q --no-deps pyctcdecode==0.5.0 pygtrie==2.6.2
	$(PY) -m pip install -q --no-deps openai-whisper==20250625

# ruff and mypy as configured in pyproject.toml (mypy checks src/beamsearch)
lint:
	$(PY) -m ruff check src tests tools benchmarks
	$(PY) -m mypy

test: install lint
	$(PY) -m pytest -q tests

demo:
	$(PY) -m pip install -q -e '.[zoo]' && beamsearch demo

mutation:
	$(PY) -m pip install -q -e '.[test,zoo,hf,mutation]'
	$(PY) tools/pitfall_mutants.py
	$(PY) tools/mutation_score.py

bench:
	$(PY) benchmarks/bench_search.py
	$(PY) benchmarks/bench_hf.py
