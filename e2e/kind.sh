#!/usr/bin/env bash
# For machines with a Docker engine: a kind cluster that hands the tests the
# same interface as the local cluster (an admin kubeconfig; the Sluice image
# built from ./Dockerfile and already on the node as localhost/sluice:dev),
# and the cluster demo on it.
#
#   e2e/kind.sh up      # create the cluster, docker build, kind load, check
#   e2e/kind.sh demo    # up, then the demo: helm install, examples/, dagruns
#   e2e/kind.sh down    # delete it
#   e2e/kind.sh env     # print the export line for KUBECONFIG
#   CLUSTER=kind make e2e            # up, the k8s tests, down
#   CLUSTER=kind make demo-cluster   # e2e/kind.sh demo
#
# The demo is make demo-cluster's (hack/demo-lib.sh's demo_run), with kind's
# differences: no network namespace (kubectl and helm run here), kind's default
# StorageClass gives the bundled Postgres its volume (no hostPath
# PersistentVolume), and that Postgres is the chart's own default, the official
# image (KIND_POSTGRES_IMAGE, name:tag, default docker.io/library/postgres:16
# as in the chart's values.yaml), pulled here
# and loaded with `kind load docker-image` like the Sluice image; nothing
# needs buildah. It leaves the cluster running: `e2e/kind.sh down` deletes it.
#
# Settings: KIND_VERSION (kind built with `go install` when no kind is on
# PATH), KIND_NODE_IMAGE (default: kind's own for that version, Kubernetes
# 1.34 for v0.30.0), KIND_CLUSTER_NAME, BASE_IMAGE (the Dockerfile's),
# KIND_POSTGRES_IMAGE; the demo's SLUICE_DEMO_* (hack/demo-lib.sh). kubectl
# and helm: from PATH, else $SLUICE_BIN (helm is built there if missing:
# hack/build-k8s.sh helm, which needs Go).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib.sh"
source "$ROOT/hack/demo-lib.sh"

KIND_VERSION="${KIND_VERSION:-v0.30.0}"
KIND_CLUSTER_NAME="${KIND_CLUSTER_NAME:-sluice}"
KIND_DIR="${SLUICE_KIND_DIR:-$SLUICE_CACHE/kind}"
KIND_POSTGRES_IMAGE="${KIND_POSTGRES_IMAGE:-docker.io/library/postgres:16}"
KUBECONFIG_OUT="$KIND_DIR/admin.kubeconfig"

# kind runs its node as a Docker container: nothing here works without one.
need_docker() {
  command -v docker >/dev/null \
    || die "e2e/kind.sh $1 needs Docker: kind runs its node as a Docker container, and there is no docker command on PATH. Install Docker, or use the local cluster, which needs none: make demo-cluster, make e2e (hack/README.md)"
  local why
  why="$(docker info 2>&1 >/dev/null)" \
    || die "e2e/kind.sh $1 needs Docker: no Docker engine answers (docker info: $(head -n 1 <<<"$why")). Start it, or use the local cluster: make demo-cluster, make e2e (hack/README.md)"
}

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
  need_docker up
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

demo() {
  need_docker demo # before anything is built, fetched or started
  [[ "$KIND_POSTGRES_IMAGE" == *:* && "${KIND_POSTGRES_IMAGE##*:}" != */* ]] \
    || die "KIND_POSTGRES_IMAGE must be name:tag, not '$KIND_POSTGRES_IMAGE'"
  export SLUICE_DEMO_STARTED="${SLUICE_DEMO_STARTED:-$(date +%s)}"
  local t0=$SECONDS kind
  up
  kind="$(kind_bin)"
  # Pulled here and loaded, as the Sluice image is: the node pulls nothing, and
  # the registry sees one pull per machine, not one per cluster.
  if ! docker image inspect "$KIND_POSTGRES_IMAGE" >/dev/null 2>&1; then
    log "docker pull $KIND_POSTGRES_IMAGE"
    docker pull "$KIND_POSTGRES_IMAGE"
  fi
  "$kind" load docker-image "$KIND_POSTGRES_IMAGE" --name "$KIND_CLUSTER_NAME"
  # The user's own kubectl and helm first, else the ones hack/ builds.
  export PATH="$PATH:$SLUICE_BIN"
  command -v kubectl >/dev/null \
    || die "kubectl is needed: put one on PATH, or build it with hack/build-k8s.sh k8s"
  command -v helm >/dev/null || "$ROOT/hack/build-k8s.sh" helm
  # The ServiceMonitor CRD the chart's ServiceMonitor test installs (a file, nothing built).
  "$ROOT/hack/build-k8s.sh" servicemonitor-crd
  export KUBECONFIG="$KUBECONFIG_OUT"
  log "kind demo: cluster and images ready ($(fmt_duration $((SECONDS - t0))))"

  DEMO_LOOK_AROUND="export KUBECONFIG=$KUBECONFIG_OUT; kubectl -n $NS get dagruns,dags,jobs,pods (e2e/kind.sh down deletes the cluster)"
  demo_run "$CHART/ci/kind-values.yaml" \
    --set "postgres.image.repository=${KIND_POSTGRES_IMAGE%:*}" \
    --set-string "postgres.image.tag=${KIND_POSTGRES_IMAGE##*:}"
}

down() {
  local kind
  kind="$(kind_bin)"
  "$kind" delete cluster --name "$KIND_CLUSTER_NAME"
  rm -f "$KUBECONFIG_OUT"
}

case "${1:-}" in
  up) up ;;
  demo) demo ;;
  down) down ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_OUT" ;;
  *) die "usage: e2e/kind.sh up|demo|down|env" ;;
esac
