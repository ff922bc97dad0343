# shellcheck shell=bash
# The cluster demo's common part, shared by hack/demo-cluster.sh (the local
# cluster) and `e2e/kind.sh demo` (kind). Source it after
# hack/lib.sh; do not execute it.
#
# demo_run VALUES_FILE [HELM_ARGS...] works on whatever cluster $KUBECONFIG
# names, with kubectl and helm on PATH and the images already on the node:
#   1. the namespace $SLUICE_DEMO_NAMESPACE (default sluice), labelled with the
#      restricted Pod Security Standard;
#   2. `helm upgrade --install sluice charts/sluice -f VALUES_FILE HELM_ARGS...`,
#      waiting for every pod;
#   3. examples/ (their busybox:1.36 replaced by $SLUICE_DEMO_TASK_IMAGE,
#      default $SLUICE_IMAGE, which has a shell and is on the node already) and
#      a manual run (examples/runs/hello-manual.yaml);
#   4. `kubectl get dagruns` printed as it changes until every run has ended;
#      it fails if one did not succeed or $SLUICE_DEMO_TIMEOUT seconds (default
#      600) pass first.
# What the cluster lacks (a volume provisioner, a registry) is the caller's to
# make up for before it calls demo_run; DEMO_LOOK_AROUND is what the last line
# tells the user to run next.

# shellcheck disable=SC2034  # NS and RELEASE are used by the scripts that source this file
NS="${SLUICE_DEMO_NAMESPACE:-sluice}"
RELEASE=sluice
TASK_IMAGE="${SLUICE_DEMO_TASK_IMAGE:-$SLUICE_IMAGE}"
TIMEOUT="${SLUICE_DEMO_TIMEOUT:-600}"
CHART="$SLUICE_ROOT/charts/sluice"
DEMO_LOOK_AROUND="${DEMO_LOOK_AROUND:-kubectl -n $NS get dagruns,dags,jobs,pods}"

k() { kubectl -n "$NS" "$@"; }

# demo_run VALUES_FILE [HELM_ARGS...]: steps 1-4 above.
demo_run() {
  local values="$1"
  shift
  export SLUICE_DEMO_STARTED="${SLUICE_DEMO_STARTED:-$(date +%s)}"

  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl label namespace "$NS" --overwrite \
    pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted >/dev/null

  # The default Pool's protection is cluster-scoped: one per cluster. Installed
  # by hand before (`kubectl apply -f crds/`, as tests/k8s do) or by another
  # release, it is left as it is (helm would refuse to take it over).
  local extra=("$@") policy
  policy="$(kubectl get validatingadmissionpolicy sluice.io-default-pool \
    -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-namespace}/{.metadata.annotations.meta\.helm\.sh/release-name}' 2>/dev/null || echo absent)"
  if [[ "$policy" != absent && "$policy" != "$NS/$RELEASE" ]]; then
    log "demo: the default Pool's protection is installed already (not by this release): keeping it"
    extra+=(--set defaultPoolProtection.enabled=false)
  fi
  # Likewise the CRDs (templates of the chart, docs/adr/0043): applied by hand or by
  # another release, they are left as they are.
  local crds
  crds="$(kubectl get crd dags.sluice.io \
    -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-namespace}/{.metadata.annotations.meta\.helm\.sh/release-name}' 2>/dev/null || echo absent)"
  if [[ "$crds" != absent && "$crds" != "$NS/$RELEASE" ]]; then
    log "demo: Sluice's CRDs are installed already (not by this release): keeping them"
    extra+=(--set crds.install=false)
  fi

  local t0=$SECONDS
  log "demo: helm upgrade --install $RELEASE charts/sluice -n $NS -f ${values#"$SLUICE_ROOT"/} (waits for every pod)"
  helm upgrade --install "$RELEASE" "$CHART" -n "$NS" -f "$values" \
    "${extra[@]}" --wait --timeout 10m
  log "demo: installed in $(fmt_duration $((SECONDS - t0)))"
  k get pods -o wide

  local f
  for f in "$SLUICE_ROOT"/examples/*.yaml; do
    sed "s#busybox:1.36#$TASK_IMAGE#g" "$f" | k apply -f -
  done
  k create -f "$SLUICE_ROOT/examples/runs/hello-manual.yaml"

  local dags expected
  dags="$(k get dags -o name | wc -l)"
  expected=$((dags + 1)) # a scheduled run per DAG (catchup: false) and the manual one
  log "demo: waiting for at least $expected runs to end (kubectl -n $NS get dagruns)"
  local deadline=$((SECONDS + TIMEOUT)) last="" table states total ended
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
      die "demo: after ${TIMEOUT}s, $ended of $total runs have ended ($expected expected)"
    fi
    sleep 3
  done

  k get dags
  local failed
  failed="$(grep -vc '^success$' <<<"$states" || true)"
  log "demo: $total runs ended, $failed not successful; $(fmt_duration $(($(date +%s) - SLUICE_DEMO_STARTED))) in all"
  echo "Look around: $DEMO_LOOK_AROUND"
  ((failed == 0)) || die "demo: $failed runs did not succeed"
}
