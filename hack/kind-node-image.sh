#!/usr/bin/env bash
# kind's node image, built here without a registry (issue 33; in progress).
#
#   hack/kind-node-image.sh base    # the base: Debian + systemd + containerd + runc + CNI
#                                   # plugins + kind's own files, as sluice-kind-base:bookworm
#   hack/kind-node-image.sh check   # base, then boot it as kind boots a node (privileged,
#                                   # private cgroupns, systemd as PID 1) and run a container
#                                   # in its containerd
#   hack/kind-node-image.sh node    # the node image, sluice-kind-node:KUBE_VERSION: the base
#                                   # with kubeadm, kubelet, kubectl and the component images
#                                   # (built here) in its containerd
#
# In the kind engine (hack/kind-engine.sh, started here if it is not running).
# kind's `build node-image` cannot run offline (it pulls kube-cross images and its base
# image from registries); its base image's steps are simple, so this takes them
# from kind's Go module (`go mod download sigs.k8s.io/kind@KIND_VERSION`:
# images/base/files, its entrypoint, systemd units and containerd config) and
# Debian's packages (debootstrap; containerd 1.6 and runc 1.1 from bookworm, not
# the versions kind builds from source: the local cluster runs the same ones).
# `kind create cluster --image sluice-kind-node:v1.34.4` has made a cluster with it here
# (hack/README.md, "kind here"); a script for that, a CNI and the demo are next.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib.sh"

KIND_VERSION="${KIND_VERSION:-v0.30.0}"
KIND_DIR="${SLUICE_KIND_DIR:-$SLUICE_CACHE/kind}"
BASE_IMAGE_TAG="${SLUICE_KIND_BASE_IMAGE:-sluice-kind-base:bookworm}"
ROOTFS="$KIND_DIR/node-rootfs"
LOGF="$KIND_DIR/node-image.log"
# kind's base image's packages (images/base/Dockerfile), from Debian's archive; plus
# containerd, runc and the CNI plugins it builds from source.
# ipset is for kube-router's firewall, which enforces NetworkPolicies on this node (the
# bridge CNI enforces none; kind's own kindnetd does).
PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,ipset
# The base's recipe: a change rebuilds its rootfs and image.
BASE_KEY="kind $KIND_VERSION packages $PACKAGES recipe=2"

engine() { "$ROOT/hack/kind-engine.sh" exec "$@"; }

# kind's Go module's directory (its source, downloaded once into Go's module cache).
kind_module() {
  go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' \
    || die "go mod download sigs.k8s.io/kind@$KIND_VERSION failed (the Go module proxy serves it)"
}
kind_files() { echo "$(kind_module)/images/base/files"; }

base() {
  mkdir -p "$KIND_DIR"
  "$ROOT/hack/kind-engine.sh" up
  local stamp="$KIND_DIR/.stamp-base"
  if [[ "$(cat "$stamp" 2>/dev/null)" == "$BASE_KEY" ]] \
    && engine docker image inspect "$BASE_IMAGE_TAG" >/dev/null 2>&1; then
    log "$BASE_IMAGE_TAG: up to date in the kind engine"
    return
  fi
  local files t0=$SECONDS
  files="$(kind_files)"
  if [[ "$(cat "$stamp" 2>/dev/null)" != "$BASE_KEY" ]]; then
    rm -rf "$ROOTFS" "$stamp"
  fi
  if [[ ! -x "$ROOTFS/sbin/init" ]]; then
    log "node base: debootstrap bookworm with kind's packages (about 30 s; log $LOGF)"
    rm -rf "$ROOTFS"
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOTFS" >>"$LOGF" 2>&1 \
      || { tail_log "$LOGF"; die "debootstrap failed"; }
  fi
  log "node base: kind $KIND_VERSION's files ($files)"
  install -m 0755 "$files"/usr/local/bin/* "$ROOTFS/usr/local/bin/"
  mkdir -p "$ROOTFS/kind"
  cp -r "$files/kind/." "$ROOTFS/kind/"
  chmod -R u+w "$ROOTFS/kind"
  chmod 0755 "$ROOTFS/kind/bin" "$ROOTFS"/kind/bin/*
  install -m 0644 "$files/etc/crictl.yaml" "$ROOTFS/etc/"
  install -m 0644 "$files/etc/containerd/config.toml" "$ROOTFS/etc/containerd/config.toml"
  # No CAP_SYS_RESOURCE here (hack/kind-runc): a pod's oom_score_adj below the node's own
  # is refused, so containerd must not ask for it (as the local cluster's containerd).
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
    "$ROOTFS/etc/containerd/config.toml"
  grep -q 'restrict_oom_score_adj = true' "$ROOTFS/etc/containerd/config.toml" \
    || die "kind $KIND_VERSION's containerd config has no restrict_oom_score_adj to set"
  install -m 0644 "$files"/etc/default/* "$ROOTFS/etc/default/"
  install -m 0644 "$files"/etc/sysctl.d/* "$ROOTFS/etc/sysctl.d/"
  install -m 0644 "$files"/etc/systemd/system/*.service "$files"/etc/systemd/system/*.slice \
    "$ROOTFS/etc/systemd/system/"
  mkdir -p "$ROOTFS/etc/systemd/system/kubelet.service.d"
  install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* \
    "$ROOTFS/etc/systemd/system/kubelet.service.d/"
  # Where kind's units and config look for what Debian installs elsewhere.
  ln -sf /usr/bin/containerd "$ROOTFS/usr/local/bin/containerd"
  mkdir -p "$ROOTFS/opt/cni"
  ln -sfn /usr/lib/cni "$ROOTFS/opt/cni/bin"
  # kind's base image's own steps (images/base/Dockerfile): no units but its own, the
  # runtime spec its containerd config names, the manifests directory.
  chroot "$ROOTFS" sh -ec '
    find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
    grep -q "^ReadKMsg=no" /etc/systemd/journald.conf || echo ReadKMsg=no >>/etc/systemd/journald.conf
    systemctl enable containerd.service undo-mount-hacks.service
    systemctl mask systemd-binfmt.service
    ctr oci spec \
      | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" \
      | jq "del(.process.rlimits)" >/etc/containerd/cri-base.json
    mkdir -p /etc/kubernetes/manifests
  ' >>"$LOGF" 2>&1 || { tail_log "$LOGF"; die "the node base's setup in its rootfs failed"; }
  tar -C "$ROOTFS" -c . | engine docker import \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    --change 'ENV container=docker' - "$BASE_IMAGE_TAG" >/dev/null
  echo "$BASE_KEY" >"$stamp"
  log "node base: $BASE_IMAGE_TAG built ($((SECONDS - t0))s)"
}

check() {
  base
  local node=sluice-kind-check-node
  engine docker rm -f "$node" >/dev/null 2>&1 || true
  # As kind runs a node (pkg/cluster/internal/providers/docker/provision.go).
  engine docker run -d --name "$node" --hostname "$node" --stop-signal SIGRTMIN+3 \
    --privileged --cgroupns=private --security-opt seccomp=unconfined \
    --security-opt apparmor=unconfined --tmpfs /tmp --tmpfs /run -v /var \
    -v /lib/modules:/lib/modules:ro "$BASE_IMAGE_TAG" >/dev/null
  wait_for "systemd running in the node" 60 "" \
    engine docker exec "$node" sh -c 'test "$(systemctl is-system-running)" = running'
  engine docker exec "$node" systemctl is-active containerd >/dev/null \
    || die "containerd is not active in the node: $(engine docker logs "$node" 2>&1 | tail -5)"
  engine docker cp "$SLUICE_CACHE/images/pause.tar" "$node:/pause.tar"
  engine docker exec "$node" ctr -n k8s.io images import /pause.tar >/dev/null
  engine docker exec "$node" ctr -n k8s.io run -d "$PAUSE_IMAGE" check >/dev/null
  engine docker exec "$node" ctr -n k8s.io tasks ls | grep -q 'check.*RUNNING' \
    || die "a container did not run in the node's containerd"
  log "check: the node booted systemd ($(engine docker logs "$node" 2>&1 | grep -m1 'detected cgroup' || true)), containerd is active, and ran $PAUSE_IMAGE"
  engine docker rm -f "$node" >/dev/null
}

# buildah keeps its storage in the cache (as hack/build-images.sh's).
BUILDAH=(buildah --root "$SLUICE_CACHE/containers/storage" --runroot "$SLUICE_CACHE/containers/run"
  --storage-driver "${SLUICE_STORAGE_DRIVER:-overlay}")
NODE_IMAGE_TAG="${SLUICE_KIND_NODE_IMAGE:-sluice-kind-node:$KUBE_VERSION}"
IMAGES_DIR="$KIND_DIR/node-images"

# component_image NAME BINARY PATH: image NAME, BINARY at PATH as its entrypoint, on
# nothing (scratch), on the image FROM names (its layers shared), or with ROOTFS_COPY
# set, on that directory's files; saved as a docker-archive for `ctr images import`.
component_image() {
  local name="$1" file="$2" entrypoint="$3" ctr
  ctr="$("${BUILDAH[@]}" from --pull=never "${FROM:-scratch}")"
  if [[ -n "${ROOTFS_COPY:-}" ]]; then
    "${BUILDAH[@]}" copy --quiet "$ctr" "$ROOTFS_COPY" / >/dev/null
  fi
  "${BUILDAH[@]}" copy --quiet "$ctr" "$file" "$entrypoint" >/dev/null
  "${BUILDAH[@]}" config --entrypoint "[\"$entrypoint\"]" \
    --env PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$name" >/dev/null
  local tar="$IMAGES_DIR/$(basename "${name%%:*}").tar"
  rm -f "$tar"
  "${BUILDAH[@]}" push --quiet "$name" "docker-archive:$tar:$name" >/dev/null
  log "node image: $name"
}

# kind's default StorageClass: its manifest (kind's own, from its Go module, with the
# images built here in place of kindest/'s) and its two images: the provisioner, and the
# helper its pods make and remove volume directories with (sh, mkdir, rm: Debian's
# busybox-static). kind's create installs /kind/manifests/default-storage.yaml.
STORAGE_IMAGE="localhost/sluice-local-path-provisioner:${LOCAL_PATH_PROVISIONER_VERSION:-v0.0.30}"
HELPER_IMAGE="localhost/sluice-local-path-helper:busybox"
storage_images() {
  component_image "$STORAGE_IMAGE" "$SLUICE_BIN/local-path-provisioner" \
    /usr/local/bin/local-path-provisioner
  local helper="$KIND_DIR/local-path-helper"
  if [[ ! -x "$helper/rootfs/bin/busybox" ]]; then
    rm -rf "$helper" && mkdir -p "$helper/rootfs/bin"
    (cd "$helper" && apt-get download busybox-static >>"$LOGF" 2>&1) \
      || { tail_log "$LOGF"; die "apt-get download busybox-static failed"; }
    dpkg-deb -x "$helper"/busybox-static_*.deb "$helper/deb"
    install -m 0755 "$helper/deb/bin/busybox" "$helper/rootfs/bin/busybox"
    local applet
    for applet in sh mkdir rm; do ln -s busybox "$helper/rootfs/bin/$applet"; done
  fi
  ROOTFS_COPY="$helper/rootfs" component_image "$HELPER_IMAGE" "$helper/rootfs/bin/busybox" \
    /bin/busybox
  python3 "$ROOT/hack/kind-storage-manifest.py" \
    "$(kind_module)/pkg/build/nodeimage/const_storage.go" \
    "$STORAGE_IMAGE" "$HELPER_IMAGE" >"$IMAGES_DIR/default-storage.yaml"
}

# What the node image is made of: this script and its helper, the binaries' build stamps,
# the base image and the pause image. The image is rebuilt only when that changes.
node_key() {
  cat "$ROOT/hack/kind-node-image.sh" "$ROOT/hack/kind-storage-manifest.py" \
    "$SLUICE_BIN"/.stamp-{k8s,etcd,kubeadm,coredns-kubeadm,local-path-provisioner,kube-router}
  engine docker image inspect -f '{{.Id}}' "$BASE_IMAGE_TAG"
  sha256sum <"$SLUICE_CACHE/images/pause.tar"
  echo "$KUBE_VERSION $ETCD_VERSION $COREDNS_VERSION $NODE_IMAGE_TAG"
}

node() {
  base
  "$ROOT/hack/build-k8s.sh" k8s etcd kubeadm coredns-kubeadm local-path-provisioner kube-router
  local key stamp="$KIND_DIR/.stamp-node-image"
  key="$(node_key | sha256sum | cut -d' ' -f1)"
  if [[ "${FORCE:-0}" != 1 && "$(cat "$stamp" 2>/dev/null)" == "$key" ]] \
    && engine docker image inspect "$NODE_IMAGE_TAG" >/dev/null 2>&1; then
    log "node image: $NODE_IMAGE_TAG up to date"
    return
  fi
  rm -f "$stamp"
  mkdir -p "$IMAGES_DIR"
  rm -f "$IMAGES_DIR"/*.tar
  local v="$KUBE_VERSION" c
  # The control plane's static pods and kube-proxy, as kubeadm names them; etcd and
  # CoreDNS at the versions built here (the cluster's kubeadm config names their tags).
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    component_image "registry.k8s.io/$c:$v" "$SLUICE_BIN/$c" "/usr/local/bin/$c"
  done
  component_image "registry.k8s.io/etcd:${ETCD_VERSION#v}-0" "$SLUICE_BIN/etcd" /usr/local/bin/etcd
  # CoreDNS with every plugin of the Corefile kubeadm writes (the local cluster's has fewer).
  component_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" \
    "$SLUICE_BIN/coredns-kubeadm" /coredns
  # kube-proxy programs iptables: on the node's own Debian userland.
  ROOTFS_COPY="$ROOTFS" component_image "registry.k8s.io/kube-proxy:$v" \
    "$SLUICE_BIN/kube-proxy" /usr/local/bin/kube-proxy
  # kube-router's firewall (NetworkPolicies; hack/kind-cluster.sh runs it): iptables and
  # ipset from the node's own Debian userland too, kube-proxy's layer shared.
  FROM="registry.k8s.io/kube-proxy:$v" component_image "$KIND_KUBE_ROUTER_IMAGE" \
    "$SLUICE_BIN/kube-router" /usr/local/bin/kube-router
  cp "$SLUICE_CACHE/images/pause.tar" "$IMAGES_DIR/pause.tar"
  storage_images

  local node=sluice-kind-build-node
  engine docker rm -f "$node" >/dev/null 2>&1 || true
  # No volume on /var here (kind's nodes have one): what is imported into containerd
  # (content only, --no-unpack) must be in the container's layer, which the commit keeps.
  engine docker run -d --name "$node" --hostname "$node" --stop-signal SIGRTMIN+3 \
    --privileged --cgroupns=private --security-opt seccomp=unconfined \
    --security-opt apparmor=unconfined --tmpfs /tmp --tmpfs /run \
    -v /lib/modules:/lib/modules:ro "$BASE_IMAGE_TAG" >/dev/null
  wait_for "containerd in the build node" 60 "" engine docker exec "$node" systemctl is-active containerd
  for c in kubeadm kubelet kubectl; do engine docker cp "$SLUICE_BIN/$c" "$node:/usr/bin/$c"; done
  engine docker exec "$node" mkdir -p /kind/images
  local tar
  for tar in "$IMAGES_DIR"/*.tar; do
    engine docker cp "$tar" "$node:/kind/images/"
    engine docker exec "$node" ctr -n k8s.io images import --no-unpack "/kind/images/$(basename "$tar")" >/dev/null
  done
  # The sandbox image kind's containerd config names.
  local sandbox
  sandbox="$(engine docker exec "$node" sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' /etc/containerd/config.toml)"
  engine docker exec "$node" ctr -n k8s.io images tag "$PAUSE_IMAGE" "$sandbox" >/dev/null
  engine docker exec "$node" mkdir -p /kind/manifests
  engine docker cp "$IMAGES_DIR/default-storage.yaml" "$node:/kind/manifests/default-storage.yaml"
  engine docker exec "$node" sh -c "rm -rf /kind/images && echo $v >/kind/version && systemctl enable kubelet.service"
  engine docker stop "$node" >/dev/null
  engine docker commit \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    --change 'ENV container=docker' "$node" "$NODE_IMAGE_TAG" >/dev/null
  engine docker rm -f "$node" >/dev/null
  echo "$key" >"$stamp"
  log "node image: $NODE_IMAGE_TAG (kubeadm, kubelet, kubectl $v; sandbox image $sandbox)"
}

case "${1:-}" in
  base) base ;;
  check) check ;;
  node) node ;;
  *) die "usage: hack/kind-node-image.sh base|check|node" ;;
esac
