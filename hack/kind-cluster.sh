#!/usr/bin/env bash
# A kind cluster on this machine, offline (issue 33; in progress): kind's own
# `create cluster`, in the kind engine's network namespace (hack/kind-engine.sh),
# with the node image built here (hack/kind-node-image.sh node).
#
#   hack/kind-cluster.sh up     # engine, node image, kind create cluster, a CNI, wait Ready
#   hack/kind-cluster.sh down   # kind delete cluster, then the engine down
#   hack/kind-cluster.sh kubectl ARGS...   # kubectl on it (inside the namespace)
#
# What differs from kind's defaults, and why: no default CNI (kindnetd is not on the
# Go module proxy), so the CNI plugins' bridge with host-local IPAM on the node's
# podCIDR, written into the node; kubeadm told the tags of the etcd and CoreDNS built
# here. The kubeconfig points at 127.0.0.1 of the `sluice-kind` namespace: use it
# through `hack/kind-cluster.sh kubectl` or `hack/kind-engine.sh exec`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib.sh"

KIND_VERSION="${KIND_VERSION:-v0.30.0}"
KIND_DIR="${SLUICE_KIND_DIR:-$SLUICE_CACHE/kind}"
KIND_CLUSTER_NAME="${KIND_CLUSTER_NAME:-sluice}"
NODE_IMAGE="${SLUICE_KIND_NODE_IMAGE:-sluice-kind-node:$KUBE_VERSION}"
KUBECONFIG_OUT="$KIND_DIR/admin.kubeconfig"
NODE="$KIND_CLUSTER_NAME-control-plane"
SERVICE_CIDR=10.96.0.0/16 # kind's default serviceSubnet

engine() { "$ROOT/hack/kind-engine.sh" exec "$@"; }
kind_() { engine "$SLUICE_BIN/kind" "$@"; }
kubectl_() { engine "$SLUICE_BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" "$@"; }

kind_bin() {
  [[ -x "$SLUICE_BIN/kind" ]] && "$SLUICE_BIN/kind" version 2>/dev/null | grep -q "$KIND_VERSION" && return
  log "kind $KIND_VERSION: go install from the Go module proxy into $SLUICE_BIN"
  GOBIN="$SLUICE_BIN" CGO_ENABLED=0 go install "sigs.k8s.io/kind@$KIND_VERSION" >&2
}

up() {
  local t0=$SECONDS
  kind_bin
  "$ROOT/hack/kind-node-image.sh" node
  if kind_ get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME"; then
    log "kind cluster $KIND_CLUSTER_NAME: already there"
  else
    local config="$KIND_DIR/cluster.yaml"
    cat >"$config" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
# Registries' hosts.toml in the node's /etc/containerd/certs.d/HOST:PORT/ (kind's own
# recipe for a local registry): tests/k8s/test_release_install.py's plain-HTTP one.
containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
  etcd:
    local:
      imageTag: ${ETCD_VERSION#v}-0
  dns:
    imageTag: $COREDNS_VERSION
EOF
    log "kind cluster $KIND_CLUSTER_NAME: kind create cluster --image $NODE_IMAGE"
    kind_ create cluster --name "$KIND_CLUSTER_NAME" --image "$NODE_IMAGE" --config "$config" \
      --kubeconfig "$KUBECONFIG_OUT" >&2
  fi
  # The controller manager gives the node its podCIDR a few seconds after it registers.
  local cidr="" waited=0
  while [[ -z "$cidr" ]] && (( waited < 90 )); do
    cidr="$(kubectl_ get node "$NODE" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)"
    [[ -n "$cidr" ]] || { sleep 1; waited=$((waited + 1)); }
  done
  [[ -n "$cidr" ]] || die "node $NODE got no podCIDR in 90 s"
  engine docker exec "$NODE" mkdir -p /etc/cni/net.d
  engine docker exec -i "$NODE" sh -c 'cat >/etc/cni/net.d/10-sluice-bridge.conflist' <<EOF
{
  "cniVersion": "0.4.0",
  "name": "sluice-kind",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  kubectl_ wait --for=condition=Ready "node/$NODE" --timeout=120s >&2
  # The pods' addresses reachable from the engine's namespace, through the node, as the
  # local cluster's are from its own (the tests scrape a pod's metrics there).
  local node_ip
  node_ip="$(engine docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$NODE")"
  engine ip route replace "$cidr" via "$node_ip"
  network_policy
  # Every system workload, named: pods made after a `wait --all` began would escape it.
  kubectl_ -n kube-system rollout status deployment/coredns --timeout=180s >&2
  kubectl_ -n kube-system rollout status daemonset/kube-proxy --timeout=180s >&2
  kubectl_ -n local-path-storage rollout status deployment/local-path-provisioner --timeout=180s >&2
  kubectl_ -n kube-system rollout status daemonset/sluice-kube-router --timeout=180s >&2
  # Its controller runs (and its first full sync follows) once its chains exist.
  wait_for "kube-router's firewall chains on the node" 60 "" \
    engine docker exec "$NODE" iptables -w 5 -S KUBE-ROUTER-FORWARD
  kubectl_ -n kube-system wait --for=condition=Ready pods --all --timeout=180s >&2
  log "kind cluster $KIND_CLUSTER_NAME: up, every kube-system pod Ready ($((SECONDS - t0))s); kubeconfig $KUBECONFIG_OUT (inside netns sluice-kind)"
}

# NetworkPolicies: the bridge plugin enforces none (kind's own kindnetd does), so
# kube-router's firewall alone, as on the local cluster (hack/cluster-up.sh): a DaemonSet
# on the node's network, its iptables rules and ipsets there, read-only access to what
# its informers watch. Its image is the node image's (hack/kind-node-image.sh).
network_policy() {
  kube_router_rbac "{kind: ServiceAccount, name: sluice-kube-router, namespace: kube-system}" \
    | kubectl_ apply -f - >/dev/null
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: sluice-kube-router, namespace: kube-system}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: sluice-kube-router, namespace: kube-system, labels: {k8s-app: sluice-kube-router}}
spec:
  selector: {matchLabels: {k8s-app: sluice-kube-router}}
  template:
    metadata: {labels: {k8s-app: sluice-kube-router}}
    spec:
      serviceAccountName: sluice-kube-router
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations: [{operator: Exists}]
      containers:
      - name: kube-router
        image: $KIND_KUBE_ROUTER_IMAGE
        imagePullPolicy: Never
        args: [--run-firewall=true, --run-router=false, --run-service-proxy=false,
               "--hostname-override=\$(NODE_NAME)", --service-cluster-ip-range=$SERVICE_CIDR,
               --health-port=20244, --v=1]
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        securityContext: {privileged: true}
        readinessProbe:
          httpGet: {host: 127.0.0.1, port: 20244, path: /healthz}
        volumeMounts:
        - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
        - {name: xtables-lock, mountPath: /run/xtables.lock}
      volumes:
      - name: lib-modules
        hostPath: {path: /lib/modules}
      - name: xtables-lock
        hostPath: {path: /run/xtables.lock, type: FileOrCreate}
EOF
}

down() {
  if [[ -S "$KIND_DIR/engine/docker.sock" ]] && kind_ get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME"; then
    kind_ delete cluster --name "$KIND_CLUSTER_NAME" >&2
  fi
  "$ROOT/hack/kind-engine.sh" down
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  kubectl) shift; kubectl_ "$@" ;;
  *) die "usage: hack/kind-cluster.sh up|down|kubectl ARGS..." ;;
esac
