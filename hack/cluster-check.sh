#!/usr/bin/env bash
# Readiness check of a running cluster (the local one or any $KUBECONFIG):
# the node is Ready, a Job in the locally built Sluice image
# (imagePullPolicy: Never) runs a shell command to completion, and its output
# is readable with `kubectl logs`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -z "${KUBECONFIG:-}" && -f "$SLUICE_CLUSTER_DIR/admin.kubeconfig" ]]; then
  export KUBECONFIG="$SLUICE_CLUSTER_DIR/admin.kubeconfig"
fi
# The local cluster answers only inside its network namespace.
if [[ "${KUBECONFIG:-}" == "$SLUICE_CLUSTER_DIR/admin.kubeconfig" ]] && ! inside_cluster_netns; then
  exec "$(dirname "${BASH_SOURCE[0]}")/in-cluster.sh" bash "${BASH_SOURCE[0]}" "$@"
fi
[[ -n "${KUBECONFIG:-}" ]] || die "no KUBECONFIG and no local cluster in $SLUICE_CLUSTER_DIR"
KUBECTL_BIN="${KUBECTL:-$SLUICE_BIN/kubectl}"
[[ -x "$KUBECTL_BIN" ]] || KUBECTL_BIN="$(command -v kubectl)"
K=("$KUBECTL_BIN" --request-timeout=20s)
NS="${SLUICE_CHECK_NAMESPACE:-default}"
JOB=sluice-readiness
t0=$SECONDS

"${K[@]}" wait --for=condition=Ready nodes --all --timeout=120s >/dev/null
log "check: nodes Ready: $("${K[@]}" get nodes -o jsonpath='{.items[*].metadata.name}')"

"${K[@]}" -n "$NS" delete job "$JOB" --ignore-not-found --wait=true >/dev/null
"${K[@]}" -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: batch/v1
kind: Job
metadata:
  name: $JOB
  labels: {app.kubernetes.io/name: sluice-readiness}
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 300
  template:
    metadata:
      labels: {app.kubernetes.io/name: sluice-readiness}
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      containers:
      - name: check
        image: $SLUICE_IMAGE
        imagePullPolicy: Never
        command: ["sh", "-c", "echo sluice-ready && python3 -c 'import sluice, sys; print(\"python\", sys.version.split()[0])'"]
YAML
if ! "${K[@]}" -n "$NS" wait --for=condition=Complete "job/$JOB" --timeout=180s >/dev/null; then
  log "check: job $JOB did not complete"
  "${K[@]}" -n "$NS" describe job "$JOB" >&2 || true
  "${K[@]}" -n "$NS" describe pods -l "job-name=$JOB" >&2 || true
  "${K[@]}" -n "$NS" logs "job/$JOB" >&2 || true
  exit 1
fi
out="$("${K[@]}" -n "$NS" logs "job/$JOB")"
printf '%s\n' "$out" | sed 's/^/  job log: /' >&2
grep -qx 'sluice-ready' <<<"$out" || die "check: 'sluice-ready' not in the job's logs"
"${K[@]}" -n "$NS" delete job "$JOB" --wait=false >/dev/null
log "check: passed in $((SECONDS - t0))s (node Ready, Job completed, logs readable)"
