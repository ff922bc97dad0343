# shellcheck shell=bash
# Shared settings for the hack/ scripts. Source it; do not execute it.
#
# Everything that is built or downloaded lives outside the repository, under
# $SLUICE_CACHE (default ~/.cache/sluice). Nothing here is ever committed.

# shellcheck disable=SC2034  # used by the scripts that source this file
SLUICE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SLUICE_CACHE="${SLUICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
SLUICE_BIN="${SLUICE_BIN:-$SLUICE_CACHE/bin}"
SLUICE_CLUSTER_DIR="${SLUICE_CLUSTER_DIR:-$SLUICE_CACHE/cluster}"
# The network namespace the whole local cluster lives in (ADR 0005): its
# bridge, node address, pods and every component. In the machine's own
# (root) network namespace the cluster has no address, route or rule.
SLUICE_NETNS="${SLUICE_NETNS:-sluice}"
SLUICE_NETNS_PATH="/run/netns/$SLUICE_NETNS"

# Pinned upstream versions (all fetched through the Go module proxy).
KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v4.3.2}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
# The local cluster's NetworkPolicy engine (kube-router's firewall alone): the
# only version the Go module proxy serves here (hack/README.md, "NetworkPolicy").
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
# The prometheus-operator release whose ServiceMonitor CRD the chart's ServiceMonitor is
# tested against (tests/k8s/test_chart_service_monitor.py); the newest the proxy serves.
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
# The S3-compatible server the log-archive tests run against (tests/s3server.py).
VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
# CNCF distribution's registry: the OCI registry `make release` is tested against
# (hack/registry.sh, tests/release/, tests/k8s/test_release_install.py).
DISTRIBUTION_VERSION="${DISTRIBUTION_VERSION:-v3.1.2}"

# Image names used by the local cluster (never pulled from a registry).
SLUICE_IMAGE="${SLUICE_IMAGE:-localhost/sluice:dev}"
PAUSE_IMAGE="${PAUSE_IMAGE:-localhost/sluice-pause:3.10}"
POSTGRES_IMAGE="${POSTGRES_IMAGE:-localhost/sluice-postgres:15}"
# kube-router's firewall on kind's node built here (hack/kind-node-image.sh, kind-cluster.sh).
KIND_KUBE_ROUTER_IMAGE="localhost/sluice-kube-router:$KUBE_ROUTER_VERSION"
# buildah keeps its own storage in the cache, not in /var/lib/containers
# (hack/build-images.sh builds the images there, hack/release.sh pushes from it).
BUILDAH=(buildah --root "$SLUICE_CACHE/containers/storage" --runroot "$SLUICE_CACHE/containers/run"
  --storage-driver "${SLUICE_STORAGE_DRIVER:-overlay}")

# Go may be installed outside PATH (a non-login shell, CI).
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="$PATH:/usr/local/go/bin"
fi
# Never let the go command fetch a different toolchain behind our back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

# Say where a script failed (set -e alone exits silently).
trap 'log "FAILED: ${BASH_SOURCE[0]##*/} line $LINENO: $BASH_COMMAND"' ERR
set -o errtrace

# kube-router's firewall reads what its informers watch, nothing more: the
# ClusterRole and its binding to SUBJECT (a YAML flow mapping: the local
# cluster's client certificate user, kind's ServiceAccount), for kubectl apply.
kube_router_rbac() {
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sluice:kube-router}
rules:
- apiGroups: [""]
  resources: [nodes, pods, namespaces, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sluice:kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sluice:kube-router}
subjects:
- $1
EOF
}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Print the last lines of a log file, framed, for failure reports.
tail_log() {
  local f="$1" n="${2:-40}"
  if [[ -f "$f" ]]; then
    printf -- '----- last %s lines of %s -----\n' "$n" "$f" >&2
    tail -n "$n" "$f" >&2 || true
    printf -- '----- end of %s -----\n' "$f" >&2
  fi
}

# go_module_version BINARY MODULE: the version of MODULE that Go embedded in BINARY
# ("v1.8.0"; as its main module or as a dependency of a wrapper's), or "unknown".
go_module_version() {
  command -v go >/dev/null || { echo unknown; return; }
  go version -m "$1" 2>/dev/null |
    awk -v m="$2" '($1 == "mod" || $1 == "dep") && $2 == m { print $3 }' | grep . || echo unknown
}

# wait_for DESCRIPTION TIMEOUT_SECONDS LOGFILE COMMAND...
# Runs COMMAND every second until it succeeds; on timeout prints the log tail
# and returns 1.
wait_for() {
  local what="$1" timeout="$2" logf="$3"
  shift 3
  local start=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS - start >= timeout )); then
      log "timed out after ${timeout}s waiting for: $what"
      [[ -n "$logf" ]] && tail_log "$logf" 60
      return 1
    fi
    sleep 1
  done
  log "ready: $what ($((SECONDS - start))s)"
}

# in_netns COMMAND...: run COMMAND in the cluster's network namespace. Only the
# network namespace changes (nsenter --net), unlike `ip netns exec`, which also
# gives the command a mount namespace with its own /sys (hiding the cgroup
# hierarchies the kubelet and containerd need, and keeping pod mounts from the
# rest of the machine).
in_netns() { nsenter --net="$SLUICE_NETNS_PATH" -- "$@"; }

# The inode of a network namespace, to tell whether two processes share one.
netns_inode() { stat -L -c %i "$1" 2>/dev/null; }
inside_cluster_netns() {
  [[ -e "$SLUICE_NETNS_PATH" ]] && [[ "$(netns_inode /proc/self/ns/net)" == "$(netns_inode "$SLUICE_NETNS_PATH")" ]]
}

# A free TCP port on 127.0.0.1 of the cluster's network namespace (best effort:
# bind to port 0 and release it).
free_port() {
  in_netns python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

# Only one cluster-up/cluster-down at a time (a nested call shares the lock).
# Processes started while it is held must not inherit fd 9 (see cluster-up).
cluster_lock() {
  [[ -n "${SLUICE_CLUSTER_LOCKED:-}" ]] && return 0
  mkdir -p "$SLUICE_CACHE"
  exec 9>"$SLUICE_CACHE/.cluster.lock"
  flock -n 9 || die "another hack/cluster-up.sh or cluster-down.sh is running"
  export SLUICE_CLUSTER_LOCKED=1
}

fmt_duration() {
  local s="$1"
  printf '%dm%02ds' $((s / 60)) $((s % 60))
}

# import_images CONTAINERD_SOCK CONTAINERD_ROOT LOGFILE TARBALL...: import each
# image archive ($SLUICE_CACHE/images/TARBALL.tar, made by build-images.sh) into
# the cluster's containerd, unless this very archive (by its build stamp) is
# already there. TARBALL is pause, sluice or postgres.
import_images() {
  local sock="$1" root="$2" logf="$3"
  shift 3
  local ctr=(ctr --address "$sock" -n k8s.io)
  local tarball stamp marker image t0
  for tarball in "$@"; do
    stamp="$(cat "$SLUICE_CACHE/images/.stamp-$tarball" 2>/dev/null || echo none)"
    marker="$root/.imported-$tarball"
    case "$tarball" in
      pause) image="$PAUSE_IMAGE" ;;
      postgres) image="$POSTGRES_IMAGE" ;;
      *) image="$SLUICE_IMAGE" ;;
    esac
    if [[ "$(cat "$marker" 2>/dev/null)" == "$stamp" ]] \
      && "${ctr[@]}" images ls -q "name==$image" 2>/dev/null | grep -q .; then
      log "$image: already in containerd"
      continue
    fi
    t0=$SECONDS
    "${ctr[@]}" images import "$SLUICE_CACHE/images/$tarball.tar" >>"$logf" 2>&1 \
      || { tail_log "$logf"; die "ctr images import $tarball.tar failed"; }
    echo "$stamp" >"$marker"
    log "imported $tarball.tar into containerd ($((SECONDS - t0))s)"
  done
}
