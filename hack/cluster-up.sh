#!/usr/bin/env bash
# Start a real single-node Kubernetes cluster as local processes, the way
# Kubernetes' hack/local-up-cluster.sh does: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd (+ runc, CNI bridge), a
# kubelet, kube-proxy and kube-router's network-policy firewall (the
# NetworkPolicy engine). No Docker engine and no registry are needed.
#
# The whole cluster lives in a network namespace of its own ($SLUICE_NETNS,
# default `sluice`): the bridge, the node address, the pods and every
# component. The machine's own network namespace gets no address, route,
# iptables rule or network sysctl from it. Talk to the cluster from inside:
#
#   hack/cluster-up.sh                 # build if needed, start, check readiness
#   hack/in-cluster.sh kubectl get nodes   # or hack/in-cluster.sh for a shell
#   hack/cluster-down.sh               # stop everything, delete the namespace
#
# Settings (environment):
#   SLUICE_CLUSTER_DIR   state directory (default ~/.cache/sluice/cluster);
#                        wiped on every start, admin kubeconfig at
#                        $SLUICE_CLUSTER_DIR/admin.kubeconfig
#   SLUICE_APISERVER_PORT, SLUICE_ETCD_PORT, SLUICE_ETCD_PEER_PORT,
#   SLUICE_KUBELET_PORT  fixed ports (default: free random ports)
#   SLUICE_NETNS         network namespace name (default sluice)
#   SLUICE_BRIDGE        bridge name (default sluice0)
#   SLUICE_NODE_CIDR     bridge/pod subnet, node IP is its .1 (default 10.77.0.0/24)
#   SLUICE_SERVICE_CIDR  service IP range, blackholed in the namespace (default 10.77.1.0/24)
#   SLUICE_NODE_NAME     node name (default sluice-node)
#   SLUICE_SKIP_BUILD=1  do not run the build scripts (binaries/images must exist)
#   SLUICE_SKIP_CHECK=1  skip the readiness Job at the end
#   SLUICE_KEEP_ON_FAILURE=1  leave processes running when start-up fails
#
# Needs root (kubelet, containerd and the bridge), Linux with cgroups, and the
# Debian packages containerd, runc, containernetworking-plugins, iptables,
# ipset, openssl, buildah, debootstrap, gcc (see hack/install-deps.sh).
set -euo pipefail
HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HACK/lib.sh"

[[ $(id -u) == 0 ]] || die "cluster-up needs root (kubelet, containerd, bridge)"
cluster_lock

D="$SLUICE_CLUSTER_DIR"
T_START=$SECONDS

# ---------------------------------------------------------------- build
if [[ "${SLUICE_SKIP_BUILD:-0}" != 1 ]]; then
  "$HACK/install-deps.sh"
  "$HACK/build-k8s.sh"   # all parts: k8s, etcd, coredns, kube-router, helm (for the demo) and
                         # the ServiceMonitor CRD (for its test)
  "$HACK/build-images.sh"
fi
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns kube-router; do
  [[ -x "$SLUICE_BIN/$b" ]] || die "$SLUICE_BIN/$b missing: run hack/build-k8s.sh"
done
for f in pause.tar sluice.tar postgres.tar; do
  [[ -f "$SLUICE_CACHE/images/$f" ]] || die "$SLUICE_CACHE/images/$f missing: run hack/build-images.sh"
done
for b in containerd containerd-shim-runc-v2 ctr runc iptables ipset conntrack openssl curl; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "$b" >/dev/null || die "$b not found: run hack/install-deps.sh"
done
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] \
  || die "CNI plugins missing in /usr/lib/cni: apt-get install containernetworking-plugins"
export PATH="$PATH:/usr/sbin:/sbin"
T_BUILT=$SECONDS

# ---------------------------------------------------------------- fresh state
if [[ -f "$D/env" ]]; then
  log "a previous cluster's state exists in $D: stopping it first"
  "$HACK/cluster-down.sh"
fi
# The state directory is wiped: refuse if it holds anything but an earlier
# cluster's state, or if anything is still mounted under it.
if [[ -d "$D" && -n "$(ls -A "$D")" && ! -f "$D/.sluice-cluster" ]] \
  && ! [[ -f "$D/pki/ca.crt" && -d "$D/logs" && -f "$D/admin.kubeconfig" ]]; then
  die "$D is not empty and not a Sluice cluster directory; refusing to wipe it"
fi
if grep -qF " $D/" /proc/self/mounts; then
  die "something is still mounted under $D (see /proc/self/mounts); run hack/cluster-down.sh"
fi
rm -rf "$D"
mkdir -p "$D"/{pki,logs,pids,etcd,cni/net.d,cni/ipam,kubelet,containerd}
touch "$D/.sluice-cluster"
chmod 700 "$D" "$D/pki"

# ---------------------------------------------------------------- network namespace
# A fresh namespace at every start: nothing of an earlier cluster's network
# (links, routes, iptables, conntrack) survives into this one.
if [[ -e "$SLUICE_NETNS_PATH" ]]; then
  [[ -z "$(ip netns pids "$SLUICE_NETNS" 2>/dev/null)" ]] \
    || die "network namespace $SLUICE_NETNS still has processes (ip netns pids $SLUICE_NETNS): run hack/cluster-down.sh"
  ip netns del "$SLUICE_NETNS"
fi
ip netns add "$SLUICE_NETNS"
in_netns ip link set lo up

BRIDGE="${SLUICE_BRIDGE:-sluice0}"
# Locally administered (02:...), so it can be no real card's.
BRIDGE_MAC="${SLUICE_BRIDGE_MAC:-02:5c:00:00:00:01}"
NODE_CIDR="${SLUICE_NODE_CIDR:-10.77.0.0/24}"
SERVICE_CIDR="${SLUICE_SERVICE_CIDR:-10.77.1.0/24}"
NODE_NAME="${SLUICE_NODE_NAME:-sluice-node}"
prefix="${NODE_CIDR%.*}"          # 10.77.0
NODE_IP="$prefix.1"
plen="${NODE_CIDR#*/}"
svc_prefix="${SERVICE_CIDR%.*}"
KUBERNETES_SVC_IP="$svc_prefix.1"
APISERVER_PORT="${SLUICE_APISERVER_PORT:-$(free_port)}"
ETCD_PORT="${SLUICE_ETCD_PORT:-$(free_port)}"
ETCD_PEER_PORT="${SLUICE_ETCD_PEER_PORT:-$(free_port)}"
KUBELET_PORT="${SLUICE_KUBELET_PORT:-$(free_port)}"
KUBELET_HEALTHZ_PORT="$(free_port)"
KCM_PORT="$(free_port)"
SCHED_PORT="$(free_port)"
PROXY_HEALTHZ_PORT="$(free_port)"
PROXY_METRICS_PORT="$(free_port)"
DNS_HEALTH_PORT="$(free_port)"
DNS_READY_PORT="$(free_port)"
KUBE_ROUTER_HEALTH_PORT="$(free_port)"
APISERVER_URL="https://$NODE_IP:$APISERVER_PORT"
SOCK="$D/containerd/containerd.sock"
# containerd's content store and snapshots outlive a cluster, so an unchanged
# image is not imported again at the next start. Its containers do not:
# cluster-down deletes them all, and cluster-up drops any left over.
CONTAINERD_ROOT="${SLUICE_CONTAINERD_ROOT:-$SLUICE_CACHE/containerd}"
mkdir -p "$CONTAINERD_ROOT"

cat >"$D/env" <<EOF
# Written by hack/cluster-up.sh; read by hack/cluster-down.sh and the tests.
SLUICE_CLUSTER_DIR=$D
NETNS=$SLUICE_NETNS
NETNS_PATH=$SLUICE_NETNS_PATH
BRIDGE=$BRIDGE
BRIDGE_MAC=$BRIDGE_MAC
NODE_CIDR=$NODE_CIDR
SERVICE_CIDR=$SERVICE_CIDR
NODE_IP=$NODE_IP
NODE_NAME=$NODE_NAME
APISERVER_URL=$APISERVER_URL
APISERVER_PORT=$APISERVER_PORT
ETCD_PORT=$ETCD_PORT
KUBELET_PORT=$KUBELET_PORT
CONTAINERD_SOCK=$SOCK
CONTAINERD_ROOT=$CONTAINERD_ROOT
KUBECONFIG=$D/admin.kubeconfig
KUBECTL=$SLUICE_BIN/kubectl
SLUICE_IMAGE=$SLUICE_IMAGE
EOF

on_failure() {
  local rc=$?
  log "cluster-up FAILED (exit $rc); logs are in $D/logs"
  if [[ "${SLUICE_KEEP_ON_FAILURE:-0}" != 1 ]]; then
    "$HACK/cluster-down.sh" || true
  fi
  exit "$rc"
}
trap on_failure ERR INT TERM

# start NAME COMMAND...: run in its own session, in the cluster's network
# namespace, log to logs/NAME.log. (setsid and nsenter --net exec without
# forking, so the recorded pid is the component's own.)
start() {
  local name="$1"
  shift
  : >"$D/logs/$name.log"
  setsid nsenter --net="$SLUICE_NETNS_PATH" -- "$@" >>"$D/logs/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$D/pids/$name.pid"
  log "started $name (pid $!)"
}
alive() { kill -0 "$(cat "$D/pids/$1.pid")" 2>/dev/null; }
# wait_up NAME TIMEOUT CHECK...: like wait_for, but fail fast if the process died.
wait_up() {
  local name="$1" timeout="$2"
  shift 2
  local t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      log "$name exited"
      tail_log "$D/logs/$name.log" 60
      return 1
    fi
    if (( SECONDS - t0 >= timeout )); then
      log "timed out after ${timeout}s waiting for $name"
      tail_log "$D/logs/$name.log" 60
      return 1
    fi
    sleep 0.5
  done
  log "$name is ready ($((SECONDS - t0))s)"
}

# ---------------------------------------------------------------- network
# All of it inside the cluster's namespace. The node IP lives on a bridge with
# a private subnet; pods hang off the same bridge and get a route to that
# subnet only (no default route), the service range is blackholed, and nothing
# is masqueraded. The namespace itself has no link to the outside at all (no
# veth to the root namespace), so no cluster traffic can leave it.
# The bridge gets a fixed MAC address. Without one, Linux gives a bridge the
# lowest MAC among its ports, so it changes whenever a pod whose veth has a
# lower one comes or goes, and every other pod's ARP entry for the node IP then
# points at an address nobody answers for until it expires: their connections
# to the task API hung for ~10 s at a time (a heartbeat sidecar missed two
# heartbeats in a row and its try was killed as a zombie; see
# tests/k8s/test_cluster_netns.py).
in_netns ip link add "$BRIDGE" address "$BRIDGE_MAC" type bridge
in_netns ip addr replace "$NODE_IP/$plen" dev "$BRIDGE"
in_netns ip link set "$BRIDGE" up
in_netns ip route replace blackhole "$SERVICE_CIDR"
# Pods reach Services through kube-proxy's DNAT in the namespace, which needs
# forwarding for packets that come in on the bridge only, and a guard that
# nothing is forwarded between the bridge and any other link. The guard is in
# the filter table's FORWARD chain and again in the mangle table's, which
# packets go through first: kube-router's firewall (below) keeps its own jump
# at the head of filter FORWARD and ACCEPTs there what the NetworkPolicies
# allow, before the filter guard; no component writes to mangle's FORWARD.
in_netns sysctl -qw "net.ipv4.conf.$BRIDGE.forwarding=1"
for rule in "-i $BRIDGE ! -o $BRIDGE" "-o $BRIDGE ! -i $BRIDGE"; do
  for table in filter mangle; do
    # shellcheck disable=SC2086
    in_netns iptables -t "$table" -I FORWARD $rule -m comment --comment sluice-local-cluster -j DROP
  done
done
# Fail now if the namespace can reach anything outside it.
"$HACK/netns-check.sh"

cat >"$D/cni/net.d/10-sluice.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "sluice",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$D/cni/ipam",
        "ranges": [[{"subnet": "$NODE_CIDR", "rangeStart": "$prefix.10", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR", "gw": "$NODE_IP"}]
      }
    }
  ]
}
EOF
# The node's resolver for pods with dnsPolicy Default: their own loopback, so
# they resolve nothing (cluster names go to CoreDNS, see below).
printf 'nameserver 127.0.0.1\noptions ndots:1\n' >"$D/resolv.conf"

# ---------------------------------------------------------------- PKI
PKI="$D/pki"
openssl_quiet() { openssl "$@" 2>>"$D/logs/openssl.log"; }
openssl_quiet req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 3650 -subj "/CN=sluice-local-ca" >/dev/null
# cert NAME CN ORG USAGE(clientAuth|serverAuth|both) [SANS]
cert() {
  local name="$1" cn="$2" org="$3" usage="$4" sans="${5:-}"
  local subj="/CN=$cn"
  [[ -n "$org" ]] && subj="/O=$org$subj"
  case "$usage" in
    both) usage="serverAuth,clientAuth" ;;
  esac
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n "$sans" ]] && echo "subjectAltName=$sans"
  } >"$PKI/$name.ext"
  openssl_quiet req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$PKI/$name.key" -out "$PKI/$name.csr" -subj "$subj" >/dev/null
  openssl_quiet x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 365 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" >/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}
cert apiserver kube-apiserver "" serverAuth \
  "IP:$NODE_IP,IP:127.0.0.1,IP:$KUBERNETES_SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin kubernetes-admin system:masters clientAuth
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
cert controller-manager system:kube-controller-manager "" clientAuth
cert scheduler system:kube-scheduler "" clientAuth
cert kubelet-client "system:node:$NODE_NAME" system:nodes clientAuth
cert kube-proxy system:kube-proxy "" clientAuth
cert coredns system:sluice-coredns "" clientAuth
cert kube-router system:sluice-kube-router "" clientAuth
cert kubelet "system:node:$NODE_NAME" system:nodes serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
# Service-account issuer keys, generated locally.
openssl_quiet genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key"
openssl_quiet pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
chmod 600 "$PKI"/*.key

# kubeconfig FILE USER CERTNAME
kubeconfig() {
  local file="$1" user="$2" certname="$3"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sluice
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$certname.crt")
    client-key-data: $(base64 -w0 <"$PKI/$certname.key")
contexts:
- name: sluice
  context:
    cluster: sluice
    user: $user
    namespace: default
current-context: sluice
EOF
  chmod 600 "$file"
}
kubeconfig "$D/admin.kubeconfig" kubernetes-admin admin
kubeconfig "$D/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
kubeconfig "$D/scheduler.kubeconfig" system:kube-scheduler scheduler
kubeconfig "$D/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client
kubeconfig "$D/kube-proxy.kubeconfig" system:kube-proxy kube-proxy
kubeconfig "$D/coredns.kubeconfig" system:sluice-coredns coredns
kubeconfig "$D/kube-router.kubeconfig" system:sluice-kube-router kube-router
KUBECTL=(in_netns "$SLUICE_BIN/kubectl" --kubeconfig "$D/admin.kubeconfig" --request-timeout=10s)

# ---------------------------------------------------------------- etcd
start etcd "$SLUICE_BIN/etcd" --name sluice --data-dir "$D/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "sluice=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
  --unsafe-no-fsync --quota-backend-bytes 2147483648 --log-level warn
wait_up etcd 30 in_netns curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"

# ---------------------------------------------------------------- kube-apiserver
start kube-apiserver "$SLUICE_BIN/kube-apiserver" \
  --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$APISERVER_PORT" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --authorization-mode Node,RBAC --anonymous-auth=false \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$PKI/ca.crt" \
  --kubelet-preferred-address-types InternalIP \
  --allow-privileged=true --profiling=false --endpoint-reconciler-type lease \
  --enable-priority-and-fairness=false --v 1
wait_up kube-apiserver 90 "${KUBECTL[@]}" get --raw /readyz

# ---------------------------------------------------------------- controllers
start kube-controller-manager "$SLUICE_BIN/kube-controller-manager" \
  --kubeconfig "$D/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$D/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$D/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --use-service-account-credentials=true --service-cluster-ip-range "$SERVICE_CIDR" \
  --leader-elect=false --controllers '*' --profiling=false --v 1
start kube-scheduler "$SLUICE_BIN/kube-scheduler" \
  --kubeconfig "$D/scheduler.kubeconfig" \
  --authentication-kubeconfig "$D/scheduler.kubeconfig" \
  --authorization-kubeconfig "$D/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false --v 1

# ---------------------------------------------------------------- cluster DNS
# CoreDNS as a local process on the node IP, serving cluster.local from the
# API server. It has no forwarding plugin: other names fail, nothing leaves.
"${KUBECTL[@]}" apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sluice:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: sluice:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: sluice:coredns
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:sluice-coredns
EOF
cat >"$D/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    ready 127.0.0.1:$DNS_READY_PORT
    health 127.0.0.1:$DNS_HEALTH_PORT
    errors
    cache 30
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $D/coredns.kubeconfig sluice
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
EOF
start coredns "$SLUICE_BIN/coredns" -conf "$D/Corefile"

# ---------------------------------------------------------------- containerd
# Facts of this kind of machine (Firecracker VM, cgroup v1, no CAP_SYS_RESOURCE
# in the bounding set): runc cannot lower oom_score_adj, so containerd must
# clamp it (restrict_oom_score_adj) and kubelet keeps oomScoreAdj 0; no
# AppArmor; cgroupfs rather than systemd.
cat >"$D/containerd/config.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$D/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$D/containerd/certs.d"
EOF
# A registry's hosts.toml goes in certs.d/HOST:PORT/ (containerd reads them at each
# pull): tests/k8s/test_release_install.py's plain-HTTP registry, inside this
# namespace. Empty, nothing changes: the images are imported, nothing is pulled.
mkdir -p "$D/containerd/certs.d"
start containerd containerd --config "$D/containerd/config.toml"
CTR=(ctr --address "$SOCK" -n k8s.io)
wait_up containerd 30 "${CTR[@]}" version
# `ctr version` answers before the CRI service has recovered its state (leftover
# containers take a second or so); a kubelet started then fails with "server is
# not initialized yet". containerd (1.6, 1.7) marks the CRI service initialized right
# after it logs "Start streaming server".
wait_up containerd 60 grep -q "Start streaming server" "$D/logs/containerd.log"
for c in $("${CTR[@]}" containers ls -q); do
  log "deleting container $c left over from an earlier run"
  "${CTR[@]}" tasks delete -f "$c" >/dev/null 2>&1 || true
  "${CTR[@]}" containers delete "$c" >/dev/null 2>&1 || true
done
import_images "$SOCK" "$CONTAINERD_ROOT" "$D/logs/ctr-import.log" pause sluice postgres

# ---------------------------------------------------------------- kubelet
cat >"$D/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
oomScoreAdj: 0
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
resolvConf: $D/resolv.conf
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
serializeImagePulls: false
registerNode: true
maxPods: 110
EOF
# The kubelet sets these (protectKernelDefaults: false). They are not network
# settings: no namespace has its own, so they change machine-wide, and
# cluster-down puts the values found here back.
for key in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes; do
  echo "$key=$(sysctl -n "$key")" >>"$D/sysctl.saved"
done
start kubelet "$SLUICE_BIN/kubelet" \
  --config "$D/kubelet-config.yaml" --kubeconfig "$D/kubelet.kubeconfig" \
  --root-dir "$D/kubelet" --cert-dir "$D/kubelet/pki" \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 1

wait_up kubelet 90 "${KUBECTL[@]}" get node "$NODE_NAME"

# ---------------------------------------------------------------- kube-proxy
# iptables mode; NodePorts only on the bridge address; conntrack sysctls left
# as they are.
cat >"$D/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $D/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
mode: iptables
clusterCIDR: $NODE_CIDR
nodePortAddresses: ["$NODE_CIDR"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
start kube-proxy "$SLUICE_BIN/kube-proxy" --config "$D/kube-proxy-config.yaml" --v 1
wait_up kube-proxy 60 in_netns curl -fsS --max-time 2 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"

# ---------------------------------------------------------------- kube-router (NetworkPolicy)
# The bridge plugin enforces no NetworkPolicy: kube-router's network-policy
# controller does, alone (no routing, no service proxy: the bridge and
# kube-proxy do those). iptables filter rules and ipsets in this namespace, per
# local pod, from the API server's pods, namespaces and NetworkPolicies; a
# denied connection is rejected (the client sees "connection refused"). Its
# health endpoint listens on every address of the namespace; no metrics, no
# pprof. Read-only access to what its informers watch.
# SLUICE_NETWORK_POLICY=0 leaves it out: under a churn of task pods it rewrites
# its rules as each pod comes and goes (0.28 cores in a 1,000-task bench-k8s
# trial), which node-bound benchmarks would share the node with.
if [[ "${SLUICE_NETWORK_POLICY:-1}" != 0 ]]; then
  kube_router_rbac "{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:sluice-kube-router}" \
    | "${KUBECTL[@]}" apply -f - >/dev/null
  start kube-router "$SLUICE_BIN/kube-router" \
    --run-firewall=true --run-router=false --run-service-proxy=false \
    --kubeconfig "$D/kube-router.kubeconfig" --hostname-override "$NODE_NAME" \
    --service-cluster-ip-range "$SERVICE_CIDR" --health-port "$KUBE_ROUTER_HEALTH_PORT" --v 1
  wait_up kube-router 60 in_netns curl -fsS --max-time 2 "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz"
  # Its controller runs (and its first full sync follows) once its chains exist.
  wait_up kube-router 60 in_netns iptables -w 5 -S KUBE-ROUTER-FORWARD
else
  log "kube-router: not started (SLUICE_NETWORK_POLICY=0): no NetworkPolicy is enforced"
fi
wait_up kubelet 120 "${KUBECTL[@]}" wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
wait_up kube-controller-manager 60 "${KUBECTL[@]}" -n default get serviceaccount default
wait_up coredns 60 in_netns curl -fsS --max-time 2 "http://127.0.0.1:$DNS_READY_PORT/ready"
T_UP=$SECONDS

log "cluster is up: build/check $(fmt_duration $((T_BUILT - T_START))), start $(fmt_duration $((T_UP - T_BUILT)))"

"$HACK/netns-check.sh"   # again, with every component and kube-proxy's rules in place
if [[ "${SLUICE_SKIP_CHECK:-0}" != 1 ]]; then
  trap on_failure ERR INT TERM
  in_netns env KUBECONFIG="$D/admin.kubeconfig" "$HACK/cluster-check.sh"
fi
trap - ERR INT TERM

cat <<EOF

Sluice local cluster is running ($(fmt_duration $((SECONDS - T_START))) in all),
in the network namespace '$SLUICE_NETNS'. Talk to it from inside that namespace:
  hack/in-cluster.sh kubectl get nodes    # one command (KUBECONFIG and PATH set)
  hack/in-cluster.sh                      # a shell (or: make sh-cluster)
Stop it with: hack/cluster-down.sh   (logs: $D/logs)
EOF
