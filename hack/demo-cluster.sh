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
#   4. starts the task logs' store: versitygw, an S3-compatible server built
#      from source once (make s3-server), on the node's address over a
#      directory of the cluster's, stopped by make cluster-down;
#   5. demo_run (hack/demo-lib.sh, shared with `e2e/kind.sh demo`):
#      `helm upgrade --install sluice charts/sluice` into the namespace
#      $SLUICE_DEMO_NAMESPACE (default sluice, labelled with the restricted Pod
#      Security Standard) with charts/sluice/ci/local-values.yaml; examples/
#      (their busybox:1.36 replaced by $SLUICE_DEMO_TASK_IMAGE, default
#      localhost/sluice:dev, which has a shell) and a manual run
#      (examples/runs/hello-manual.yaml); `kubectl get dagruns` as it changes
#      until every run has ended, exiting non-zero if one did not succeed or
#      $SLUICE_DEMO_TIMEOUT seconds (default 600) pass first; the schedulers
#      archive every try's log to the store (logs.store);
#   6. deletes the Jobs of etl-retries' run (as their TTL would) and prints
#      `sluice logs` of its first, failed try of `extract`, read back from the
#      archive.
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
  [[ -x "$SLUICE_BIN/versitygw" ]] || "$SLUICE_ROOT/hack/build-versitygw.sh"
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

# The task logs' store: versitygw on the node's address (what the pods reach),
# its root credentials generated once and kept beside its data; the schedulers
# get them from a Secret (logs.existingSecret), task pods never do.
S3_DIR="$SLUICE_CLUSTER_DIR/demo-s3"
S3_PID="$SLUICE_CLUSTER_DIR/pids/demo-s3.pid"
S3_PORT="${SLUICE_DEMO_S3_PORT:-39000}"
NODE_IP="$(sed -n 's/^NODE_IP=//p' "$SLUICE_CLUSTER_DIR/env")"
mkdir -p "$S3_DIR/root/sluice-logs" "$(dirname "$S3_PID")"
if [[ ! -f "$S3_DIR/credentials" ]]; then
  umask 077
  printf 'ROOT_ACCESS_KEY=demo-%s\nROOT_SECRET_KEY=%s\n' \
    "$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" \
    >"$S3_DIR/credentials"
  umask 022
fi
if ! { [[ -f "$S3_PID" ]] && kill -0 "$(cat "$S3_PID")" 2>/dev/null; }; then
  (
    set -a
    # shellcheck source=/dev/null
    source "$S3_DIR/credentials"
    exec setsid "$SLUICE_BIN/versitygw" --port "$NODE_IP:$S3_PORT" --region us-east-1 --quiet \
      posix "$S3_DIR/root"
  ) >>"$S3_DIR/versitygw.log" 2>&1 </dev/null &
  echo $! >"$S3_PID"
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://$NODE_IP:$S3_PORT/" && break
    kill -0 "$(cat "$S3_PID")" 2>/dev/null || die "demo: versitygw exited: $(tail -5 "$S3_DIR/versitygw.log")"
    sleep 0.1
  done
  log "demo-cluster: task logs' store (versitygw) on http://$NODE_IP:$S3_PORT over $S3_DIR/root"
fi
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# shellcheck source=/dev/null
(source "$S3_DIR/credentials" && kubectl -n "$NS" create secret generic sluice-demo-logs \
  --from-literal=AWS_ACCESS_KEY_ID="$ROOT_ACCESS_KEY" \
  --from-literal=AWS_SECRET_ACCESS_KEY="$ROOT_SECRET_KEY" \
  --from-literal=AWS_REGION=us-east-1 --dry-run=client -o yaml | kubectl apply -f - >/dev/null)

DEMO_LOOK_AROUND="make sh-cluster, then kubectl -n $NS get dagruns,dags,jobs,pods"
demo_run "$CHART/ci/local-values.yaml" \
  --set-string "logs.store=s3://sluice-logs/demo?endpoint=http://$NODE_IP:$S3_PORT&allow_http=true" \
  --set logs.existingSecret=sluice-demo-logs

# A failed try's log, read after its Job is gone: etl-retries' extract fails its
# first try on purpose. Its Jobs deleted as their TTL would, `sluice logs` reads
# the archived copy (in a scheduler pod, which has the store's credentials).
run_id="$(k get dagruns -l sluice.io/dag=etl-retries -o jsonpath='{.items[0].status.runId}')"
archived_sql="SELECT l.state FROM task_log l JOIN task_instance ti ON ti.id = l.task_instance_id
  JOIN dag_run r ON r.id = ti.dag_run_id WHERE ti.dag_id = 'etl-retries' AND ti.task_id = 'extract'
  AND r.run_id = '$run_id' AND l.try_number = 1"
for _ in $(seq 60); do
  state="$(k exec "$RELEASE-postgres-0" -c postgres -- psql -U sluice -d sluice -X -q -t -A \
    -c "$archived_sql" 2>/dev/null || true)"
  [[ -n "$state" ]] && break
  sleep 1
done
[[ "$state" == archived ]] \
  || die "demo: the log of etl-retries' extract, try 1, is not archived after 60 s (task_log: '${state:-none}')"
k delete jobs -l sluice.io/dag=etl-retries --wait=true >/dev/null
k wait --for=delete pods -l sluice.io/dag=etl-retries --timeout=120s >/dev/null 2>&1 || true
log "demo: etl-retries' Jobs and pods deleted; its failed first try of extract, from the log archive:"
echo "\$ kubectl -n $NS exec deploy/$RELEASE-scheduler -- sluice logs etl-retries --run '$run_id' --task extract --try 1"
k exec deploy/$RELEASE-scheduler -c scheduler -- sluice logs etl-retries --run "$run_id" --task extract --try 1
