#!/usr/bin/env bash
# Show the local cluster's network namespace, its processes and their memory
# (RSS), and the nodes.
#   hack/cluster-status.sh          # table + total
#   hack/cluster-status.sh --total  # only the total RSS in MiB
# With no cluster it says so and exits 1, naming anything left behind (the
# network namespace, processes in it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PATH="$PATH:/usr/sbin:/sbin"
D="$SLUICE_CLUSTER_DIR"
if [[ ! -f "$D/env" ]]; then
  if [[ -e "$SLUICE_NETNS_PATH" ]]; then
    log "no local cluster state in $D, but the network namespace $SLUICE_NETNS exists" \
      "(processes in it: $(ip netns pids "$SLUICE_NETNS" 2>/dev/null | wc -l)); run hack/cluster-down.sh"
  else
    log "no local cluster running (no $D/env, no network namespace $SLUICE_NETNS)"
  fi
  exit 1
fi
# shellcheck disable=SC1091
source "$D/env"
NETNS_PATH="${NETNS_PATH:-$SLUICE_NETNS_PATH}"

rss_kb() { awk '/^VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
total=0
rows=()
for f in "$D"/pids/*.pid; do
  p="$(cat "$f")"
  kill -0 "$p" 2>/dev/null || { rows+=("$(basename "$f" .pid) $p DEAD"); continue; }
  r="$(rss_kb "$p")"
  total=$((total + r))
  rows+=("$(basename "$f" .pid) $p $((r / 1024))MiB")
done
# containerd shims and everything running in pods (the kubepods cgroups).
shims=0
for p in $(pgrep -f -- "-address $CONTAINERD_SOCK" 2>/dev/null || true); do
  shims=$((shims + $(rss_kb "$p")))
done
pods=0
if [[ -d /sys/fs/cgroup/memory/kubepods ]]; then
  for p in $(find /sys/fs/cgroup/memory/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true); do
    pods=$((pods + $(rss_kb "$p")))
  done
fi
total=$((total + shims + pods))
if [[ "${1:-}" == --total ]]; then
  echo $((total / 1024))
  exit 0
fi
rows+=("containerd-shims - $((shims / 1024))MiB" "pod-processes - $((pods / 1024))MiB")
printf '%s\n' "COMPONENT PID RSS" "${rows[@]}" | awk '{printf "%-26s %-8s %s\n", $1, $2, $3}'
echo "total RSS: $((total / 1024)) MiB"
if [[ -e "$NETNS_PATH" ]]; then
  echo "network namespace: ${NETNS:-$SLUICE_NETNS} ($NETNS_PATH), $(ip netns pids "${NETNS:-$SLUICE_NETNS}" | wc -l) processes;" \
    "node $NODE_IP on $BRIDGE; API server $APISERVER_URL (reachable only inside: hack/in-cluster.sh)"
  nsenter --net="$NETNS_PATH" -- "$SLUICE_BIN/kubectl" --kubeconfig "$KUBECONFIG" --request-timeout=5s get nodes -o wide || true
else
  echo "network namespace: MISSING ($NETNS_PATH)"
fi
