#!/usr/bin/env bash
# Stop the local cluster started by hack/cluster-up.sh and leave nothing
# behind: no processes (including containerd shims and pod processes), no
# mounts under the state directory, no pod network namespaces, and not the
# cluster's own network namespace (with it go its bridge, routes and iptables
# rules, none of which ever existed in the machine's namespace).
# Safe to run more than once. The state directory is kept for post-mortems
# (its logs) and wiped by the next cluster-up.
set -euo pipefail
HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HACK/lib.sh"
export PATH="$PATH:/usr/sbin:/sbin"

D="$SLUICE_CLUSTER_DIR"
cluster_lock
if [[ ! -f "$D/env" ]]; then
  if [[ -e "$SLUICE_NETNS_PATH" ]]; then
    # A cluster-up that failed before writing its state: only the namespace.
    [[ -z "$(ip netns pids "$SLUICE_NETNS" 2>/dev/null)" ]] \
      || die "network namespace $SLUICE_NETNS has processes but $D has no cluster state"
    ip netns del "$SLUICE_NETNS"
    log "deleted the network namespace $SLUICE_NETNS (no cluster state in $D)"
    exit 0
  fi
  log "no cluster state in $D: nothing to stop"
  exit 0
fi
# shellcheck disable=SC1091
source "$D/env"
NETNS_PATH="${NETNS_PATH:-$SLUICE_NETNS_PATH}"
NETNS="${NETNS:-$SLUICE_NETNS}"
has_netns() { [[ -e "$NETNS_PATH" ]]; }
in_ns() { nsenter --net="$NETNS_PATH" -- "$@"; }
SOCK="${CONTAINERD_SOCK:-$D/containerd/containerd.sock}"
CTR=(ctr --address "$SOCK" -n k8s.io --timeout 10s)
KUBECTL=(in_ns "$SLUICE_BIN/kubectl" --kubeconfig "$D/admin.kubeconfig" --request-timeout=5s)

pid_of() { [[ -f "$D/pids/$1.pid" ]] && cat "$D/pids/$1.pid"; }
running() { local p; p="$(pid_of "$1")" && kill -0 "$p" 2>/dev/null; }

# stop [-g GRACE_SECONDS] NAME...: SIGTERM them together, wait, SIGKILL.
stop() {
  local grace=15
  if [[ "$1" == -g ]]; then grace="$2"; shift 2; fi
  local name p i waiting
  declare -A pids=()
  for name in "$@"; do
    p="$(pid_of "$name")" || continue
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null || true
      pids[$name]="$p"
    else
      rm -f "$D/pids/$name.pid"
    fi
  done
  for ((i = 0; i < grace * 10; i++)); do
    waiting=0
    for name in "${!pids[@]}"; do
      kill -0 "${pids[$name]}" 2>/dev/null && waiting=1
    done
    ((waiting)) || break
    sleep 0.1
  done
  for name in "${!pids[@]}"; do
    p="${pids[$name]}"
    if kill -0 "$p" 2>/dev/null; then
      log "$name (pid $p) ignored SIGTERM for ${grace}s: SIGKILL"
      kill -KILL "$p" 2>/dev/null || true
    fi
    log "stopped $name (pid $p)"
    rm -f "$D/pids/$name.pid"
  done
}

# 1. No new pods: stop the controllers and the scheduler first (and the demo's
#    task logs store, if make demo-cluster started it).
stop kube-controller-manager kube-scheduler kube-proxy kube-router coredns demo-s3

# 2. The kubelet. Its pods are not drained one by one through the API (slow):
#    the whole node goes away, so step 3 kills what runs and step 6 removes
#    what the pods had mounted, including their network namespaces.
#    SLUICE_DRAIN=1 deletes the pods through the API first instead.
if [[ "${SLUICE_DRAIN:-0}" == 1 ]] && has_netns && running kubelet && running kube-apiserver; then
  if "${KUBECTL[@]}" delete pods --all --all-namespaces --grace-period=0 --force --wait=false \
    >/dev/null 2>&1; then
    for _ in $(seq 1 60); do
      n="$("${CTR[@]}" tasks ls -q 2>/dev/null | wc -l || echo 0)"
      [[ "$n" == 0 ]] && break
      sleep 0.5
    done
  fi
fi
stop -g 20 kubelet
# Put back the kernel settings the kubelet changed.
if [[ -f "$D/sysctl.saved" ]]; then
  while read -r setting; do
    [[ -n "$setting" ]] && sysctl -qw "$setting" 2>/dev/null || true
  done <"$D/sysctl.saved"
  rm -f "$D/sysctl.saved"
fi

# 3. Whatever is left in containerd: kill tasks, remember pod netns, delete.
netns_paths=()
if running containerd; then
  for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do
    ns="$("${CTR[@]}" containers info "$c" 2>/dev/null | python3 -c '
import json, sys
try:
    spec = json.load(sys.stdin)["Spec"]
    for n in spec["linux"]["namespaces"]:
        if n.get("type") == "network" and n.get("path"):
            print(n["path"])
except Exception:
    pass' || true)"
    [[ -n "$ns" ]] && netns_paths+=("$ns")
    "${CTR[@]}" tasks kill -a -s SIGKILL "$c" >/dev/null 2>&1 || true
  done
  sleep 0.5
  for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do
    "${CTR[@]}" tasks delete -f "$c" >/dev/null 2>&1 || true
    "${CTR[@]}" containers delete "$c" >/dev/null 2>&1 || true
  done
fi
stop -g 20 containerd

# 4. containerd shims re-parent to init; find ours by our socket path.
for p in $(pgrep -f -- "-address $SOCK" 2>/dev/null || true); do
  log "killing leftover containerd shim (pid $p)"
  kill -KILL "$p" 2>/dev/null || true
done
# Pod processes whose shim died: they live in the kubepods cgroups.
for procs in /sys/fs/cgroup/*/kubepods/cgroup.procs; do
  [[ -f "$procs" ]] || continue
  find "$(dirname "$procs")" -name cgroup.procs -print0 2>/dev/null \
    | xargs -0 -r cat 2>/dev/null | sort -u | while read -r p; do
      [[ -n "$p" ]] && kill -KILL "$p" 2>/dev/null || true
    done || true
done

# 5. The control plane.
stop kube-apiserver
stop etcd

# 6. Mounts under the state directory (pod volumes, rootfs, shm) and the
#    network namespaces of our pods.
{ grep -F -e " $D/" -e " ${CONTAINERD_ROOT:-$D}/" /proc/self/mounts || true; } | awk '{print $2}' | sort -r | while read -r m; do
  m="$(printf '%b' "$m")"   # /proc/mounts escapes spaces as \040
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
done
for ns in "${netns_paths[@]}"; do
  if [[ -e "$ns" ]]; then
    umount "$ns" 2>/dev/null || true
    rm -f "$ns" 2>/dev/null || true
  fi
done

# 7. Empty kubelet cgroups (created under every cgroup v1 hierarchy).
for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [[ -d "$root" ]] || continue
  find "$root" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# 8. Anything still running in the cluster's network namespace is ours (a
#    shim or helper process that escaped the steps above): kill it, then delete
#    the namespace. Its bridge, the host ends of the pods' veths, its routes,
#    its iptables rules and ipsets (kube-proxy's, kube-router's, the kubelet's,
#    our guard) and its sysctls go with it; none of them ever existed in the
#    machine's namespace.
#    This script and its callers (a shell from hack/in-cluster.sh, a test
#    session) may be in the namespace too: they are spared, and the namespace
#    itself ends when the last of them exits.
ancestors=" "
a=$$
while [[ -n "$a" && "$a" != 0 && "$a" != 1 ]]; do
  ancestors+="$a "
  a="$(awk '{print $4}' "/proc/$a/stat" 2>/dev/null || true)"
done
others_in_netns() {
  local p
  for p in $(ip netns pids "$NETNS" 2>/dev/null || true); do
    [[ "$ancestors" == *" $p "* || "$p" == "$BASHPID" ]] || echo "$p"
  done
}
if has_netns; then
  for p in $(others_in_netns); do
    log "killing pid $p left in the network namespace $NETNS ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80))"
    kill -KILL "$p" 2>/dev/null || true
  done
  for _ in $(seq 1 50); do
    [[ -z "$(others_in_netns)" ]] && break
    sleep 0.1
  done
  ip netns del "$NETNS" 2>/dev/null || umount -l "$NETNS_PATH" 2>/dev/null || true
  rm -f "$NETNS_PATH" 2>/dev/null || true
fi

# 10. Check: nothing of ours may still run. A process killed above whose parent has
# not reaped it yet is a zombie: `kill -0` still succeeds, but it runs nothing.
running() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z ]]
}
left=()
for f in "$D"/pids/*.pid; do
  [[ -f "$f" ]] || continue
  p="$(cat "$f")"
  running "$p" && left+=("$(basename "$f" .pid):$p")
done
for p in $(pgrep -f -- "$D/" 2>/dev/null || true); do
  [[ "$p" == "$$" ]] && continue
  left+=("pid:$p")
done
has_netns && left+=("network namespace $NETNS_PATH")
rm -f "$D/env"
if ((${#left[@]})); then
  log "WARNING: still running: ${left[*]}"
  exit 1
fi
log "cluster stopped; nothing left running, network namespace $NETNS deleted (logs kept in $D/logs)"
