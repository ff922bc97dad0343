#!/usr/bin/env bash
# Run the k8s test suite (pytest -m k8s tests/k8s) against a cluster:
#
#   e2e/run.sh                 # CLUSTER=local: the local cluster (hack/cluster-up.sh)
#   CLUSTER=kind e2e/run.sh    # a kind cluster (e2e/kind.sh; KIND_MODE says whose node)
#   e2e/run.sh -k ready        # extra arguments go to pytest
#
# A cluster that is already running (its kubeconfig answers) is used and left
# running, with this tree's Sluice image built and imported into it first (the
# one it came up with may be older); one that this script starts is stopped at
# the end, unless SLUICE_KEEP_CLUSTER=1, and then nothing of it may be left (no network
# namespace, no process). Either way the tests get the cluster through
# $KUBECONFIG and nothing else. With the local cluster, pytest (and so every
# scheduler replica and operator the tests start) runs inside the cluster's
# network namespace (hack/in-cluster.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib.sh"

CLUSTER="${CLUSTER:-local}"
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || PY="$(command -v python3)"

answers() {
  local kubectl="$SLUICE_BIN/kubectl"
  [[ -x "$kubectl" ]] || kubectl="$(command -v kubectl || true)"
  [[ -n "$kubectl" && -f "$1" ]] || return 1
  [[ -e "$SLUICE_NETNS_PATH" ]] || return 1
  in_netns "$kubectl" --kubeconfig "$1" --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

started=""
run=()
case "$CLUSTER" in
  local)
    export KUBECONFIG="$SLUICE_CLUSTER_DIR/admin.kubeconfig"
    if answers "$KUBECONFIG"; then
      log "e2e: using the running local cluster ($KUBECONFIG)"
      # Its images are the ones built when it came up: build this tree's (nothing to
      # do when it has not changed) and import the Sluice image again if it has, so
      # the tests never run code older than the tree they come from.
      "$ROOT/hack/build-images.sh"
      # shellcheck disable=SC1091
      (source "$SLUICE_CLUSTER_DIR/env" \
        && import_images "$CONTAINERD_SOCK" "$CONTAINERD_ROOT" \
          "$SLUICE_CLUSTER_DIR/logs/ctr-import.log" sluice)
    else
      "$ROOT/hack/cluster-up.sh"
      started="$ROOT/hack/cluster-down.sh"
    fi
    run=("$ROOT/hack/in-cluster.sh")
    ;;
  kind)
    export KUBECONFIG="${SLUICE_KIND_DIR:-$SLUICE_CACHE/kind}/admin.kubeconfig"
    if [[ -f "$KUBECONFIG" ]] && "$ROOT/e2e/kind.sh" exec kubectl --request-timeout=5s \
      get --raw /readyz >/dev/null 2>&1; then
      log "e2e: using the running kind cluster ($KUBECONFIG); this tree's images loaded into it"
      "$ROOT/e2e/kind.sh" load
    else
      "$ROOT/e2e/kind.sh" up
      started="$ROOT/e2e/kind.sh down"
    fi
    # Where its API server answers (built here: inside the engine's network namespace).
    run=("$ROOT/e2e/kind.sh" exec)
    ;;
  *) die "CLUSTER must be local or kind, not '$CLUSTER'" ;;
esac

cleanup() {
  local rc=$?
  if [[ -n "$started" && "${SLUICE_KEEP_CLUSTER:-0}" != 1 ]]; then
    $started || { log "e2e: stopping the cluster failed"; rc=1; }
    if [[ "$CLUSTER" == local ]]; then
      # Nothing of the cluster may be left: no namespace, no process.
      if [[ -e "$SLUICE_NETNS_PATH" ]]; then
        log "e2e: the network namespace $SLUICE_NETNS is still there after cluster-down"
        rc=1
      fi
      if "$ROOT/hack/cluster-status.sh" >/dev/null 2>&1; then
        log "e2e: hack/cluster-status.sh still shows a cluster after cluster-down"
        rc=1
      fi
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT

# The registry tests/k8s/test_release_install.py releases to (a no-op once built): built
# here, where the Go module proxy is reachable, not inside the cluster's namespace.
"$ROOT/hack/build-registry.sh"

cd "$ROOT"
"${run[@]}" "$PY" -m pytest -m k8s tests/k8s -p no:cacheprovider "$@"
