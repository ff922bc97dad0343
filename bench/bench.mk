# Benchmarks (issue 5): Sluice's scheduler, alone and against Airflow 2.10.5's and 3.3.2's.
# Included from the Makefile; results go to bench/results/ (JSON + PNG).
#   make bench          quick suite, Sluice only, at its defaults
#   make bench-compare  the same scenarios in six interleaved arms: Sluice like-for-like (the
#                       headline), Airflow 2.10.5 and Airflow 3.3.2 (each installed under
#                       ~/.cache/sluice, bench/airflow_install.py) like-for-like and at their
#                       defaults (each judged at the faster), Sluice at its defaults; 5 trials
#                       each at 1 replica (hours: bench/README.md says how long a shape took)
#   make bench-smoke    tiny workload, under a minute, figures printed, no timing asserted (CI);
#                       and the steady-state benchmark's smoke (3 DAGs, seconds)
#   make bench-arrival  steady state: DAGs on a one-minute schedule, Sluice and both Airflows
#                       interleaved, each arm's rate doubled or halved until it is bracketed
#   make bench-scale    the scheduler alone with 10,000 DAGs and 100,000 task instances
#   make bench-k8s      the Job executor on the local cluster (hack/), 1 and 3 replicas
#   make bench-steady   a replica's CPU per thread while it mostly waits (Postgres only)
#   make bench-headline the README's headline table and docs/img/bench-headline.svg, rendered
#                       from the committed JSON (bench/headline.py names the files)
#   make bench-logs     the log archiver: 1,000 task logs of 1 MiB to file:// and S3 (issue 30)
#   make bench-anatomy  where a like-for-like tick's time goes, phase by phase (in one process)
# Extra arguments: make bench BENCH_ARGS="--shapes linear,grid --replicas 1"

BENCH_ARGS ?=
BENCH_PY := PYTHONPATH=. COLUMNS=$${COLUMNS:-220} $(BIN)/python -m bench.run

.PHONY: bench bench-compare bench-smoke bench-scale bench-deps bench-k8s bench-steady bench-arrival \
	bench-logs bench-headline bench-anatomy

$(BIN)/.bench-deps: $(BIN)/.installed
	$(BIN)/pip install --quiet 'matplotlib>=3.8,<4'
	touch $@

bench-deps: $(BIN)/.bench-deps

bench: bench-deps
	$(BENCH_PY) --quick $(BENCH_ARGS)

bench-compare: bench-deps
	$(BENCH_PY) --compare $(BENCH_ARGS)

# The headline at a glance, from bench/published only (no trial is run): rewrites the
# README's table between its headline markers and the plot it shows.
bench-headline: bench-deps
	PYTHONPATH=. $(BIN)/python -m bench.headline --readme README.md --plot docs/img/bench-headline.svg

bench-smoke: bench-deps
	$(BENCH_PY) --smoke $(BENCH_ARGS)
	PYTHONPATH=. COLUMNS=$${COLUMNS:-220} $(BIN)/python -m bench.arrival --smoke

# Steady state (issue 14; bench/README.md, "Steady state"): runs arriving every minute.
#   make bench-arrival BENCH_ARGS="--dags sluice=2000,airflow=200,airflow3=200 --rates 2"
bench-arrival: bench-deps
	PYTHONPATH=. COLUMNS=$${COLUMNS:-220} $(BIN)/python -m bench.arrival $(BENCH_ARGS)

# Where a busy tick's time goes (bench/tick_anatomy.py; bench/README.md, "A tick's anatomy").
#   make bench-anatomy BENCH_ARGS="--shape no_structure --size 10x100 --tis 512"
bench-anatomy: install
	PYTHONPATH=. $(BIN)/python -m bench.tick_anatomy $(BENCH_ARGS)

bench-scale: bench-deps
	$(BENCH_PY) --scale $(BENCH_ARGS)

# The Job executor on the local cluster (issue 10; bench/README.md, "Job executor on the local
# cluster"): 100 DAGs x 10 trivial tasks at 1 and 3 replicas, ~10 min per trial on 2 cores.
# Runs inside the cluster's network namespace, where its API server and node answer.
#   make bench-k8s BENCH_ARGS="--dags 4 --tasks 5 --replicas 1"   a small trial first
# The node's CPU is shared with the cluster's NetworkPolicy engine (kube-router, about
# 0.28 cores under task-pod churn) unless the cluster was started without it:
#   SLUICE_NETWORK_POLICY=0 make cluster-up
bench-k8s: install
	hack/in-cluster.sh env PYTHONPATH=. COLUMNS=$${COLUMNS:-220} $(BIN)/python -m bench.k8s $(BENCH_ARGS)

# A replica's CPU while it mostly waits (bench/README.md, "A replica at steady state"): real
# `sluice scheduler --executor kubernetes` processes against Postgres and a stand-in API
# server, kubelet and sidecars (bench/fake_cluster.py); no cluster. ~2.5 min a trial.
#   make bench-steady BENCH_ARGS="--trials 3"
bench-steady: install
	PYTHONPATH=. $(BIN)/python -m bench.steady_cpu $(BENCH_ARGS)

# Archiving task logs (issue 30; bench/README.md, "Archiving task logs"): 1,000 logs of 1 MiB
# through the real LogArchiver, into a directory and into versitygw (built by `make s3-server`;
# without it the S3 arms are skipped, saying so), 1, 2 and 4 archivers, 3 trials each.
#   make bench-logs BENCH_ARGS="--logs 20 --size 65536 --trials 1 --backends file"   a smoke run
bench-logs: install
	PYTHONPATH=operator:. COLUMNS=$${COLUMNS:-220} $(BIN)/python -m bench.log_archive $(BENCH_ARGS)

# The web UI's pages at scale (bench/README.md, "The web UI"): 10,000 DAGs, a 200-task
# DAG's grid of 25 runs; server time and statements per page.
bench-ui: install
	PYTHONPATH=. $(BIN)/python -m bench.ui $(BENCH_ARGS)
