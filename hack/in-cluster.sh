#!/usr/bin/env bash
# Run a command, or a shell, inside the local cluster's network namespace, with
# KUBECONFIG and PATH set for it (kubectl and helm from ~/.cache/sluice/bin).
# The cluster (API server, node, pods, Services) is reachable only from there.
#
#   hack/in-cluster.sh kubectl get nodes
#   hack/in-cluster.sh                    # an interactive shell (make sh-cluster)
#   hack/in-cluster.sh .venv/bin/sluice scheduler --executor kubernetes ...
#
# Only the network namespace changes (nsenter --net): files, processes, the
# current directory and the rest of the environment are the caller's. Postgres
# on a Unix socket stays reachable; anything on the machine's own loopback
# (127.0.0.1 outside) does not. Needs root.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap - ERR

[[ -e "$SLUICE_NETNS_PATH" ]] \
  || die "no local cluster: the network namespace $SLUICE_NETNS does not exist (start it with make cluster-up)"
[[ -f "$SLUICE_CLUSTER_DIR/admin.kubeconfig" ]] \
  || die "no admin kubeconfig in $SLUICE_CLUSTER_DIR (is the cluster running? hack/cluster-status.sh)"
export KUBECONFIG="$SLUICE_CLUSTER_DIR/admin.kubeconfig"
export PATH="$SLUICE_BIN:$PATH"
export SLUICE_IN_CLUSTER_NETNS="$SLUICE_NETNS"
(($#)) || set -- "${SHELL:-/bin/bash}"
if inside_cluster_netns; then
  exec "$@"
fi
exec nsenter --net="$SLUICE_NETNS_PATH" -- "$@"
