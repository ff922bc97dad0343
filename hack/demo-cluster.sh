#!/usr/bin/env bash
# make demo-cluster: Sluice on the local Kubernetes cluster, the way a user
# installs it, from a fresh clone:
#
#   1. starts the local cluster unless it runs (hack/cluster-up.sh: built from
#      source once, cached in ~/.cache/sluice);
#   2. builds the Sluice image and the bundled Postgres image and loads them
#      into the node (hack/load-image.sh; nothing can be pulled here);
#   3. makes the bundled Postgres's volume (a hostPath PersistentVolume bound
#      to its claim: this cluster has no provisioner);
#   4. the rest is demo_run (hack/demo-lib.sh, shared with `e2e/kind.sh demo`):
#      `helm upgrade --install sluice charts/sluice` into the namespace
#      $SLUICE_DEMO_NAMESPACE (default sluice, labelled with the restricted Pod
#      Security Standard) with charts/sluice/ci/local-values.yaml; examples/
#      (their busybox:1.36 replaced by $SLUICE_DEMO_TASK_IMAGE, default
#      localhost/sluice:dev, which has a shell) and a manual run
#      (examples/runs/hello-manual.yaml); `kubectl get dagruns` as it changes
#      until every run has ended, exiting non-zero if one did not succeed or
#      $SLUICE_DEMO_TIMEOUT seconds (default 600) pass first.
#
# It leaves everything running: look around with `make sh-cluster`, then
# `helm uninstall sluice -n sluice`, or `make cluster-down` for all of it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$SLUICE_ROOT/hack/demo-lib.sh"

KUBECONFIG_FILE="$SLUICE_CLUSTER_DIR/admin.kubeconfig"

if ! inside_cluster_netns; then
  t0=$SECONDS
  SLUICE_DEMO_STARTED="$(date +%s)"
  export SLUICE_DEMO_STARTED
  if [[ -e "$SLUICE_NETNS_PATH" && -f "$KUBECONFIG_FILE" ]] \
    && in_netns "$SLUICE_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=5s \
      get --raw /readyz >/dev/null 2>&1; then
    log "demo-cluster: using the running local cluster"
  else
    "$SLUICE_ROOT/hack/cluster-up.sh"
  fi
  "$SLUICE_ROOT/hack/load-image.sh"
  [[ -x "$SLUICE_BIN/helm" ]] || "$SLUICE_ROOT/hack/build-k8s.sh" helm
  log "demo-cluster: cluster and images ready ($(fmt_duration $((SECONDS - t0))))"
  exec "$SLUICE_ROOT/hack/in-cluster.sh" "$0" "$@"
fi

# ---- inside the cluster's network namespace (KUBECONFIG and PATH set) ----------

# The bundled Postgres's volume: a hostPath PersistentVolume reserved for the
# StatefulSet's claim. A new PersistentVolume gets an empty directory: data
# left by an earlier cluster would not open with this release's password.
claim="data-$RELEASE-postgres-0"
pv="sluice-demo-$NS-$RELEASE-postgres"
dir="$SLUICE_CLUSTER_DIR/volumes/$pv"
if ! kubectl get pv "$pv" >/dev/null 2>&1; then
  rm -rf "$dir"
  mkdir -p "$dir"
  chown 999:999 "$dir"
  chmod 700 "$dir"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $pv
  labels: {app.kubernetes.io/part-of: sluice-demo}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: $NS, name: $claim}
  hostPath: {path: $dir, type: Directory}
EOF
  log "demo-cluster: PersistentVolume $pv at $dir for $NS/$claim"
fi

DEMO_LOOK_AROUND="make sh-cluster, then kubectl -n $NS get dagruns,dags,jobs,pods"
demo_run "$CHART/ci/local-values.yaml"
