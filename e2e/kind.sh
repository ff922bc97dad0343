#!/usr/bin/env bash
# Sluice on a kind cluster: the same interface to the tests as the local cluster
# (an admin kubeconfig; the Sluice image, built from this checkout, already on the
# node as localhost/sluice:dev), and the cluster demo on it.
#
#   e2e/kind.sh up        # the cluster, the images built and loaded (`kind load`), a check
#   e2e/kind.sh load      # build the images again and load them into the running cluster
#   e2e/kind.sh demo      # up, then the demo: helm install, examples/, dagruns
#   e2e/kind.sh exec CMD  # CMD where the cluster answers, KUBECONFIG and PATH set
#   e2e/kind.sh down      # delete it (and, built here, stop its engine: nothing left)
#   e2e/kind.sh env       # how to reach it
#   make demo-cluster CLUSTER=kind   make e2e CLUSTER=kind   make cluster-down CLUSTER=kind
#
# One switch, KIND_MODE, says where kind's node and images come from:
#   built      (this machine; offline) kind's node image built here from Debian's
#              packages, the Go module proxy and the Kubernetes build
#              (hack/kind-node-image.sh), run by a Docker engine of its own in the
#              network namespace sluice-kind (hack/kind-engine.sh); the Sluice and
#              Postgres images are hack/build-images.sh's (as the local cluster's),
#              loaded with `kind load image-archive`; kubectl, helm and the tests run
#              inside that namespace. Needs root.
#   published  (a machine with Docker and the internet, e.g. CI runners) the machine's
#              Docker engine, kind's published node image (KIND_NODE_IMAGE, default
#              kind's own for its version: Kubernetes 1.34 for v0.30.0), the Sluice
#              image from `docker build`, the chart's default Postgres image
#              (KIND_POSTGRES_IMAGE, name:tag, default docker.io/library/postgres:16)
#              pulled and loaded with `kind load docker-image`.
#   auto       (the default) published when a Docker engine answers `docker info`,
#              else built.
# Either way the bundled Postgres's volume comes from kind's default StorageClass
# (local-path-provisioner; the built node carries it too), and the demo uses
# charts/sluice/ci/kind-values.yaml.
#
# Settings: KIND_MODE, KIND_VERSION (kind built with `go install` when no kind is on
# PATH), KIND_NODE_IMAGE, KIND_CLUSTER_NAME, BASE_IMAGE (the Dockerfile's, published),
# KIND_POSTGRES_IMAGE; the demo's SLUICE_DEMO_* (hack/demo-lib.sh). kubectl and helm:
# from PATH, else $SLUICE_BIN (built there if missing: hack/build-k8s.sh, needs Go).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib.sh"
source "$ROOT/hack/demo-lib.sh"

KIND_VERSION="${KIND_VERSION:-v0.30.0}"
KIND_CLUSTER_NAME="${KIND_CLUSTER_NAME:-sluice}"
KIND_DIR="${SLUICE_KIND_DIR:-$SLUICE_CACHE/kind}"
KIND_POSTGRES_IMAGE="${KIND_POSTGRES_IMAGE:-docker.io/library/postgres:16}"
KUBECONFIG_OUT="$KIND_DIR/admin.kubeconfig"
KIND_MODE="${KIND_MODE:-auto}"

# kind runs its node as a Docker container: the published mode needs the machine's.
need_docker() {
  command -v docker >/dev/null \
    || die "e2e/kind.sh $1 needs Docker: kind runs its node as a Docker container, and there is no docker command on PATH. Install Docker, or build kind's node here (KIND_MODE=built, as root), or use the local cluster, which needs none: make demo-cluster, make e2e (hack/README.md)"
  local why
  why="$(docker info 2>&1 >/dev/null)" \
    || die "e2e/kind.sh $1 needs Docker: no Docker engine answers (docker info: $(head -n 1 <<<"$why")). Start it, or build kind's node here (KIND_MODE=built, as root), or use the local cluster: make demo-cluster, make e2e (hack/README.md)"
}

# KIND_MODE=auto decided once, and exported: inside the built engine's namespace a
# Docker engine (that one) answers, which must not turn this run into a published one.
case "$KIND_MODE" in
  built | published) ;;
  auto)
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
      KIND_MODE=published
    else
      KIND_MODE=built
    fi
    ;;
  *) die "KIND_MODE must be built, published or auto, not '$KIND_MODE'" ;;
esac
export KIND_MODE
mode() { echo "$KIND_MODE"; }

need_built() {
  [[ "$(id -u)" == 0 ]] \
    || die "e2e/kind.sh $1 with KIND_MODE=built needs root (a network namespace and a Docker engine of its own); with Docker running, KIND_MODE=published uses it instead"
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

# in_cluster CMD...: CMD where the cluster's API server answers (built: the engine's
# network namespace), with KUBECONFIG and PATH ($SLUICE_BIN last) set.
in_cluster() {
  if [[ "$(mode)" == built ]]; then
    "$ROOT/hack/kind-engine.sh" exec env KUBECONFIG="$KUBECONFIG_OUT" PATH="$PATH:$SLUICE_BIN" "$@"
  else
    env KUBECONFIG="$KUBECONFIG_OUT" PATH="$PATH:$SLUICE_BIN" "$@"
  fi
}

# Both images into the node: built here (buildah, as the local cluster's) or by docker.
load() {
  local kind
  kind="$(kind_bin)"
  if [[ "$(mode)" == built ]]; then
    "$ROOT/hack/build-images.sh"
    local tar
    for tar in sluice postgres; do
      log "kind load image-archive $SLUICE_CACHE/images/$tar.tar"
      "$ROOT/hack/kind-engine.sh" exec "$kind" load image-archive \
        "$SLUICE_CACHE/images/$tar.tar" --name "$KIND_CLUSTER_NAME" >&2
    done
    return
  fi
  log "docker build -t $SLUICE_IMAGE ($ROOT/Dockerfile)"
  docker build ${BASE_IMAGE:+--build-arg "BASE_IMAGE=$BASE_IMAGE"} -t "$SLUICE_IMAGE" "$ROOT"
  "$kind" load docker-image "$SLUICE_IMAGE" --name "$KIND_CLUSTER_NAME"
  # Pulled here and loaded, as the Sluice image is: the node pulls nothing, and
  # the registry sees one pull per machine, not one per cluster.
  if ! docker image inspect "$KIND_POSTGRES_IMAGE" >/dev/null 2>&1; then
    log "docker pull $KIND_POSTGRES_IMAGE"
    docker pull "$KIND_POSTGRES_IMAGE"
  fi
  "$kind" load docker-image "$KIND_POSTGRES_IMAGE" --name "$KIND_CLUSTER_NAME"
}

up() {
  local kind
  if [[ "$(mode)" == built ]]; then
    need_built up
    kind="$(kind_bin)"
    "$ROOT/hack/kind-cluster.sh" up
  else
    need_docker up
    kind="$(kind_bin)"
    mkdir -p "$KIND_DIR"
    if ! "$kind" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME"; then
      "$kind" create cluster --name "$KIND_CLUSTER_NAME" --kubeconfig "$KUBECONFIG_OUT" \
        --wait 180s ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
    else
      "$kind" export kubeconfig --name "$KIND_CLUSTER_NAME" --kubeconfig "$KUBECONFIG_OUT"
    fi
  fi
  load
  in_cluster env KUBECTL="${KUBECTL:-$(command -v kubectl || echo "$SLUICE_BIN/kubectl")}" \
    "$ROOT/hack/cluster-check.sh"
  env_line
}

env_line() {
  if [[ "$(mode)" == built ]]; then
    echo "# the cluster answers inside the network namespace sluice-kind: e2e/kind.sh exec kubectl get nodes"
  fi
  echo "export KUBECONFIG=$KUBECONFIG_OUT"
}

demo() {
  if [[ "$(mode)" == built ]]; then
    need_built demo
  else
    need_docker demo # before anything is built, fetched or started
    [[ "$KIND_POSTGRES_IMAGE" == *:* && "${KIND_POSTGRES_IMAGE##*:}" != */* ]] \
      || die "KIND_POSTGRES_IMAGE must be name:tag, not '$KIND_POSTGRES_IMAGE'"
  fi
  export SLUICE_DEMO_STARTED="${SLUICE_DEMO_STARTED:-$(date +%s)}"
  local t0=$SECONDS
  up
  # The user's own kubectl and helm first, else the ones hack/ builds.
  export PATH="$PATH:$SLUICE_BIN"
  command -v kubectl >/dev/null \
    || die "kubectl is needed: put one on PATH, or build it with hack/build-k8s.sh k8s"
  command -v helm >/dev/null || "$ROOT/hack/build-k8s.sh" helm
  log "kind demo: cluster and images ready ($(fmt_duration $((SECONDS - t0))))"
  in_cluster bash "${BASH_SOURCE[0]}" demo-run
}

# The demo's shared steps (hack/demo-lib.sh), where the cluster answers.
demo_run_here() {
  local postgres
  if [[ "$(mode)" == built ]]; then
    postgres="$POSTGRES_IMAGE" # hack/build-images.sh's, loaded by `load`
    DEMO_LOOK_AROUND="e2e/kind.sh exec kubectl -n $NS get dagruns,dags,jobs,pods (make cluster-down CLUSTER=kind stops it all)"
  else
    postgres="$KIND_POSTGRES_IMAGE"
    DEMO_LOOK_AROUND="export KUBECONFIG=$KUBECONFIG_OUT; kubectl -n $NS get dagruns,dags,jobs,pods (e2e/kind.sh down deletes the cluster)"
  fi
  demo_run "$CHART/ci/kind-values.yaml" \
    --set "postgres.image.repository=${postgres%:*}" \
    --set-string "postgres.image.tag=${postgres##*:}"
}

down() {
  if [[ "$(mode)" == built ]]; then
    need_built down
    "$ROOT/hack/kind-cluster.sh" down
  else
    local kind
    kind="$(kind_bin)"
    "$kind" delete cluster --name "$KIND_CLUSTER_NAME"
  fi
  rm -f "$KUBECONFIG_OUT"
}

case "${1:-}" in
  up) up ;;
  load) load ;;
  demo) demo ;;
  demo-run) demo_run_here ;;
  down) down ;;
  env) env_line ;;
  exec) shift; in_cluster "$@" ;;
  *) die "usage: e2e/kind.sh up|load|demo|exec CMD...|down|env" ;;
esac
