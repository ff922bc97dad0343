#!/usr/bin/env bash
# Fail if the local cluster's network namespace can reach anything outside it,
# or if the machine's own network namespace carries any of the cluster's
# addresses, routes or iptables rules (hack/netns-check.py says what it checks).
# cluster-up runs it twice: once the network is set up, and once every
# component (kube-proxy's rules included) is running.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PATH="$PATH:/usr/sbin:/sbin"
[[ -f "$SLUICE_CLUSTER_DIR/env" ]] || die "no local cluster state in $SLUICE_CLUSTER_DIR"
# shellcheck disable=SC1091
source "$SLUICE_CLUSTER_DIR/env"
[[ -e "$NETNS_PATH" ]] || die "no network namespace $NETNS_PATH"
if ! python3 "$(dirname "${BASH_SOURCE[0]}")/netns-check.py" "$NETNS_PATH" "$BRIDGE" "$NODE_CIDR" "$SERVICE_CIDR"; then
  die "the cluster's network namespace is not closed (see above)"
fi
log "network: namespace $NETNS is closed (no route out), the root namespace is untouched"
