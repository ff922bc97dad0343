# Make targets for the local Kubernetes test cluster. Included from the
# Makefile (`include hack/cluster.mk`); the scripts in hack/ and e2e/ do the work.
#
#   make cluster-up            build once (cached in ~/.cache/sluice), start, check
#   make cluster-down          stop everything, leave nothing running
#   make cluster-up CLUSTER=kind     a kind cluster instead (e2e/kind.sh: its node image
#                              built here, offline, unless KIND_MODE=published)
#   make cluster-down CLUSTER=kind   delete it and stop its engine: nothing left
#   make sh-cluster            a shell inside the cluster's network namespace
#                              (kubectl, helm, KUBECONFIG set; hack/in-cluster.sh)
#   make demo-cluster          the cluster demo: cluster, images, helm install,
#                              examples, kubectl get dagruns until every run ends
#   make demo-cluster CLUSTER=kind   the same demo on a kind cluster
#   make e2e                   the k8s test suite on the local cluster
#   make e2e CLUSTER=kind      the same suite on a kind cluster
#   make chaos-cluster         the cluster chaos run alone (WINDOW=150 s of faults; SEED=N)
#   make chaos-cluster-soak    the same for MINUTES=30 of faults, a random seed unless SEED=N

SLUICE_HACK_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
SLUICE_REPO_DIR := $(abspath $(SLUICE_HACK_DIR)/..)
CLUSTER ?= local
E2E_ARGS ?=

.PHONY: cluster-deps cluster-build cluster-images cluster-up cluster-down \
	cluster-check cluster-status sh-cluster demo-cluster e2e kind-up kind-down \
	chaos-cluster chaos-cluster-soak

cluster-deps:
	bash $(SLUICE_REPO_DIR)/hack/install-deps.sh

cluster-build: cluster-deps
	bash $(SLUICE_REPO_DIR)/hack/build-k8s.sh
	bash $(SLUICE_REPO_DIR)/hack/build-images.sh

cluster-images:
	bash $(SLUICE_REPO_DIR)/hack/build-images.sh

cluster-up:
ifeq ($(CLUSTER),kind)
	bash $(SLUICE_REPO_DIR)/e2e/kind.sh up
else
	bash $(SLUICE_REPO_DIR)/hack/cluster-up.sh
endif

cluster-down:
ifeq ($(CLUSTER),kind)
	bash $(SLUICE_REPO_DIR)/e2e/kind.sh down
else
	bash $(SLUICE_REPO_DIR)/hack/cluster-down.sh
endif

cluster-check:
	bash $(SLUICE_REPO_DIR)/hack/cluster-check.sh

cluster-status:
	bash $(SLUICE_REPO_DIR)/hack/cluster-status.sh

sh-cluster:
	bash $(SLUICE_REPO_DIR)/hack/in-cluster.sh

# CLUSTER=kind: e2e/kind.sh demo (KIND_MODE: its node built here, or kind's
# published one where Docker runs); otherwise the local cluster's hack/demo-cluster.sh.
demo-cluster:
ifeq ($(CLUSTER),kind)
	bash $(SLUICE_REPO_DIR)/e2e/kind.sh demo
else ifeq ($(CLUSTER),local)
	bash $(SLUICE_REPO_DIR)/hack/demo-cluster.sh
else
	$(error CLUSTER must be local or kind, not '$(CLUSTER)')
endif

e2e:
	CLUSTER=$(CLUSTER) bash $(SLUICE_REPO_DIR)/e2e/run.sh $(E2E_ARGS)

# tests/k8s/test_chart_chaos.py alone, its report printed (-s).
CHAOS_TEST := -k holds_every_invariant_under_cluster_faults -s

chaos-cluster:
	SLUICE_CHAOS_WINDOW=$(or $(WINDOW),150) SLUICE_CHAOS_SEED=$(SEED) CLUSTER=$(CLUSTER) \
		bash $(SLUICE_REPO_DIR)/e2e/run.sh $(CHAOS_TEST)

chaos-cluster-soak:
	SLUICE_CHAOS_WINDOW=$$(( $(or $(MINUTES),30) * 60 )) SLUICE_CHAOS_SEED=$(SEED) CLUSTER=$(CLUSTER) \
		bash $(SLUICE_REPO_DIR)/e2e/run.sh $(CHAOS_TEST)

kind-up:
	bash $(SLUICE_REPO_DIR)/e2e/kind.sh up

kind-down:
	bash $(SLUICE_REPO_DIR)/e2e/kind.sh down
