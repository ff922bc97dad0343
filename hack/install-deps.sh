#!/usr/bin/env bash
# Install the Debian packages the local cluster needs (a no-op when they are
# all present). Everything else is built from source by hack/build-k8s.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(
  containerd runc containernetworking-plugins   # container runtime + CNI plugins
  iptables iproute2 conntrack                   # kubelet's host networking needs
  ipset                                         # kube-router's network-policy firewall
  buildah debootstrap                           # local images, no registry
  gcc libc6-dev                                 # the static pause binary
  openssl curl ca-certificates git              # PKI, health checks, sources
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || die "need root to install: ${missing[*]}"
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || die "Go >= 1.26 is required on PATH (Debian's golang is too old)"
gov="$(go env GOVERSION)"; gov="${gov#go}"
if [[ "$(printf '%s\n1.26\n' "$gov" | sort -V | head -n1)" != 1.26 ]]; then
  die "Go $gov is too old: etcd $ETCD_VERSION and helm $HELM_VERSION need Go >= 1.26"
fi
log "dependencies present (Go $gov, $(containerd --version | awk '{print $3}') containerd, runc $(runc --version | awk 'NR==1{print $3}'))"
