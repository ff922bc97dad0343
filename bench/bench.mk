# Benchmarks (issue 5): Sluice's scheduler, alone and against Airflow 2.10.5's.
# Included from the Makefile; results go to bench/results/ (JSON + PNG).
#   make bench          quick suite, Sluice only (~10 min)
#   make bench-compare  the same scenarios on both sides (Airflow installed under ~/.cache/sluice;
#                       about 35 min for 1 replica x 3 trials, ~50 min for the full plan on 2 cores)
#   make bench-smoke    tiny workload, under a minute, figures printed, no timing asserted (CI)
#   make bench-scale    the scheduler alone with 10,000 DAGs and 100,000 task instances
# Extra arguments: make bench BENCH_ARGS="--shapes linear,grid --replicas 1"

BENCH_ARGS ?=
BENCH_PY := PYTHONPATH=. COLUMNS=$${COLUMNS:-220} $(BIN)/python -m bench.run

.PHONY: bench bench-compare bench-smoke bench-scale bench-deps

$(BIN)/.bench-deps: $(BIN)/.installed
	$(BIN)/pip install --quiet 'matplotlib>=3.8,<4'
	touch $@

bench-deps: $(BIN)/.bench-deps

bench: bench-deps
	$(BENCH_PY) --quick $(BENCH_ARGS)

bench-compare: bench-deps
	$(BENCH_PY) --compare $(BENCH_ARGS)

bench-smoke: bench-deps
	$(BENCH_PY) --smoke $(BENCH_ARGS)

bench-scale: bench-deps
	$(BENCH_PY) --scale $(BENCH_ARGS)
