#!/usr/bin/env bash
# Show the local cluster's processes and their memory (RSS), and the nodes.
#   hack/cluster-status.sh          # table + total
#   hack/cluster-status.sh --total  # only the total RSS in MiB
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
D="$SLUICE_CLUSTER_DIR"
[[ -f "$D/env" ]] || { log "no local cluster running (no $D/env)"; exit 1; }
# shellcheck disable=SC1091
source "$D/env"

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
"$SLUICE_BIN/kubectl" --kubeconfig "$KUBECONFIG" --request-timeout=5s get nodes -o wide || true
