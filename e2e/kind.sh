#!/usr/bin/env bash
# For machines with a Docker engine: a kind cluster that hands the tests the
# same interface as the local cluster (an admin kubeconfig; the Sluice image
# built from ./Dockerfile and already on the node as localhost/sluice:dev).
#
#   e2e/kind.sh up      # create the cluster, docker build, kind load, check
#   e2e/kind.sh down    # delete it
#   e2e/kind.sh env     # print the export line for KUBECONFIG
#   CLUSTER=kind make e2e   # up, the k8s tests, down
#
# Settings: KIND_VERSION (kind built with `go install` when no kind is on
# PATH), KIND_NODE_IMAGE (default: kind's own for that version, Kubernetes
# 1.34 for v0.30.0), KIND_CLUSTER_NAME, BASE_IMAGE (the Dockerfile's).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib.sh"

KIND_VERSION="${KIND_VERSION:-v0.30.0}"
KIND_CLUSTER_NAME="${KIND_CLUSTER_NAME:-sluice}"
KIND_DIR="${SLUICE_KIND_DIR:-$SLUICE_CACHE/kind}"
KUBECONFIG_OUT="$KIND_DIR/admin.kubeconfig"

kind_bin() {
  if command -v kind >/dev/null; then
    command -v kind
    return
  fi
  if [[ ! -x "$SLUICE_BIN/kind" ]]; then
    log "kind not on PATH: go install sigs.k8s.io/kind@$KIND_VERSION into $SLUICE_BIN"
    mkdir -p "$SLUICE_BIN"
    GOBIN="$SLUICE_BIN" CGO_ENABLED=0 go install "sigs.k8s.io/kind@$KIND_VERSION" >&2
  fi
  echo "$SLUICE_BIN/kind"
}

up() {
  command -v docker >/dev/null || die "docker is required for the kind cluster"
  docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
  local kind
  kind="$(kind_bin)"
  mkdir -p "$KIND_DIR"
  if ! "$kind" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME"; then
    "$kind" create cluster --name "$KIND_CLUSTER_NAME" --kubeconfig "$KUBECONFIG_OUT" \
      --wait 180s ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
  else
    "$kind" export kubeconfig --name "$KIND_CLUSTER_NAME" --kubeconfig "$KUBECONFIG_OUT"
  fi
  log "docker build -t $SLUICE_IMAGE ($ROOT/Dockerfile)"
  docker build ${BASE_IMAGE:+--build-arg "BASE_IMAGE=$BASE_IMAGE"} -t "$SLUICE_IMAGE" "$ROOT"
  "$kind" load docker-image "$SLUICE_IMAGE" --name "$KIND_CLUSTER_NAME"
  KUBECONFIG="$KUBECONFIG_OUT" KUBECTL="${KUBECTL:-$(command -v kubectl || echo "$SLUICE_BIN/kubectl")}" \
    "$ROOT/hack/cluster-check.sh"
  echo "export KUBECONFIG=$KUBECONFIG_OUT"
}

down() {
  local kind
  kind="$(kind_bin)"
  "$kind" delete cluster --name "$KIND_CLUSTER_NAME"
  rm -f "$KUBECONFIG_OUT"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_OUT" ;;
  *) die "usage: e2e/kind.sh up|down|env" ;;
esac
