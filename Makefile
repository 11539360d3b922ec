PY ?= python3

.PHONY: install test demo mutation bench

install:
	$(PY) -m pip install -q -e '.[test,zoo,hf,ray,docs]'

test: install
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
