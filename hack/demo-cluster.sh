#!/usr/bin/env bash
# make demo-cluster: Sluice on the local Kubernetes cluster, the way a user
# installs it, from a fresh clone:
#
#   1. starts the local cluster unless it runs (hack/cluster-up.sh: built from
#      source once, cached in ~/.cache/sluice);
#   2. builds the Sluice image and the bundled Postgres image and loads them
#      into the node (hack/load-image.sh; nothing can be pulled here);
#   3. `helm upgrade --install sluice charts/sluice` into the namespace
#      $SLUICE_DEMO_NAMESPACE (default sluice, labelled with the restricted Pod
#      Security Standard) with charts/sluice/ci/local-values.yaml, after making
#      the bundled Postgres's volume (a hostPath PersistentVolume bound to its
#      claim: this cluster has no provisioner);
#   4. applies examples/ (their busybox:1.36 replaced by $SLUICE_DEMO_TASK_IMAGE,
#      default localhost/sluice:dev, which has a shell) and creates a manual
#      run (examples/runs/hello-manual.yaml);
#   5. prints `kubectl get dagruns` as it changes until every run has ended,
#      and exits non-zero if one did not succeed or $SLUICE_DEMO_TIMEOUT
#      seconds (default 600) pass first.
#
# It leaves everything running: look around with `make sh-cluster`, then
# `helm uninstall sluice -n sluice`, or `make cluster-down` for all of it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NS="${SLUICE_DEMO_NAMESPACE:-sluice}"
RELEASE=sluice
TASK_IMAGE="${SLUICE_DEMO_TASK_IMAGE:-$SLUICE_IMAGE}"
TIMEOUT="${SLUICE_DEMO_TIMEOUT:-600}"
CHART="$SLUICE_ROOT/charts/sluice"
KUBECONFIG_FILE="$SLUICE_CLUSTER_DIR/admin.kubeconfig"

if ! inside_cluster_netns; then
  t0=$SECONDS
  export SLUICE_DEMO_STARTED="$(date +%s)"
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
export SLUICE_DEMO_STARTED="${SLUICE_DEMO_STARTED:-$(date +%s)}"
k() { kubectl -n "$NS" "$@"; }

kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace "$NS" --overwrite \
  pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted >/dev/null

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

# The default Pool's protection is cluster-scoped: one per cluster. Installed
# by hand before (`kubectl apply -f crds/`, as tests/k8s do) or by another
# release, it is left as it is (helm would refuse to take it over).
extra=()
policy="$(kubectl get validatingadmissionpolicy sluice.io-default-pool \
  -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-namespace}/{.metadata.annotations.meta\.helm\.sh/release-name}' 2>/dev/null || echo absent)"
if [[ "$policy" != absent && "$policy" != "$NS/$RELEASE" ]]; then
  log "demo-cluster: the default Pool's protection is installed already (not by this release): keeping it"
  extra+=(--set defaultPoolProtection.enabled=false)
fi

t0=$SECONDS
log "demo-cluster: helm upgrade --install $RELEASE charts/sluice -n $NS (waits for every pod)"
helm upgrade --install "$RELEASE" "$CHART" -n "$NS" -f "$CHART/ci/local-values.yaml" \
  "${extra[@]}" --wait --timeout 10m
log "demo-cluster: installed in $(fmt_duration $((SECONDS - t0)))"
k get pods -o wide

for f in "$SLUICE_ROOT"/examples/*.yaml; do
  sed "s#busybox:1.36#$TASK_IMAGE#g" "$f" | k apply -f -
done
k create -f "$SLUICE_ROOT/examples/runs/hello-manual.yaml"

dags="$(k get dags -o name | wc -l)"
expected=$((dags + 1)) # a scheduled run per DAG (catchup: false) and the manual one
log "demo-cluster: waiting for at least $expected runs to end (kubectl -n $NS get dagruns)"
deadline=$((SECONDS + TIMEOUT))
last=""
while :; do
  table="$(k get dagruns 2>&1 || true)"
  if [[ "$table" != "$last" ]]; then
    printf '\n%s\n' "$table"
    last="$table"
  fi
  states="$(k get dagruns -o jsonpath='{range .items[*]}{.status.state}{"\n"}{end}' 2>/dev/null || true)"
  total="$(k get dagruns -o name 2>/dev/null | wc -l)"
  ended="$(grep -cE '^(success|failed)$' <<<"$states" || true)"
  if ((total >= expected && ended == total)); then
    break
  fi
  if ((SECONDS >= deadline)); then
    k get dags,pods 2>&1 || true
    die "demo-cluster: after ${TIMEOUT}s, $ended of $total runs have ended ($expected expected)"
  fi
  sleep 3
done

k get dags
failed="$(grep -vc '^success$' <<<"$states" || true)"
log "demo-cluster: $total runs ended, $failed not successful; $(fmt_duration $(($(date +%s) - SLUICE_DEMO_STARTED))) in all"
echo "Look around: make sh-cluster, then kubectl -n $NS get dagruns,dags,jobs,pods"
((failed == 0)) || die "demo-cluster: $failed runs did not succeed"
