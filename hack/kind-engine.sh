#!/usr/bin/env bash
# A Docker engine for kind, on this machine, offline (issue 33): Debian's dockerd
# in a network namespace of its own, so kind's bridge, its iptables rules and every
# container's traffic stay inside it and nothing appears in the root namespace.
#
#   hack/kind-engine.sh up      # install docker.io if dockerd is missing; start it
#   hack/kind-engine.sh check   # up, then run a container (and say what it saw)
#   hack/kind-engine.sh down    # stop it: its containers, dockerd, its mounts, the namespace
#   hack/kind-engine.sh env     # print the export line for DOCKER_HOST
#   hack/kind-engine.sh exec CMD...   # CMD in the namespace, DOCKER_HOST set
#
# dockerd gets its own socket, data root and exec root under $SLUICE_CACHE/kind
# (never /var/lib/docker, never the machine's docker.sock) and starts with
# `nsenter --net` (not `ip netns exec`, which remounts /sys and hides the cgroup
# hierarchies). Its OCI runtime is hack/kind-runc: Debian's runc, without
# CAP_SYS_RESOURCE and rlimits, which this machine cannot grant (kind's nodes are
# privileged containers, and `--privileged` asks for every capability).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib.sh"

KIND_NETNS="${SLUICE_KIND_NETNS:-sluice-kind}"
KIND_NETNS_PATH="/run/netns/$KIND_NETNS"
KIND_DIR="${SLUICE_KIND_DIR:-$SLUICE_CACHE/kind}"
ENGINE_DIR="$KIND_DIR/engine"
DOCKER_SOCK="$ENGINE_DIR/docker.sock"
DOCKER_HOST_URL="unix://$DOCKER_SOCK"
DAEMON_JSON="$ENGINE_DIR/daemon.json"
PIDFILE="$ENGINE_DIR/dockerd.pid"
LOGF="$ENGINE_DIR/dockerd.log"

in_kind_netns() { nsenter --net="$KIND_NETNS_PATH" -- "$@"; }
docker_() { in_kind_netns env DOCKER_HOST="$DOCKER_HOST_URL" docker "$@"; }
# Alive, not a zombie waiting for a parent that does not reap (setsid's).
running() {
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null)" || return 1
  [[ -n "$pid" && -r "/proc/$pid/status" ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status"
}

install_engine() {
  command -v dockerd >/dev/null && return
  log "dockerd missing: apt-get install docker.io (Debian's engine; it is not started as a service)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >&2 \
    || die "apt-get install docker.io failed"
  # The package's service must not run: this engine is started here, in its namespace.
  systemctl disable --now docker.service docker.socket >/dev/null 2>&1 || true
}

up() {
  install_engine
  if running; then
    log "kind engine: already running (pid $(cat "$PIDFILE")), $DOCKER_HOST_URL in netns $KIND_NETNS"
    return
  fi
  mkdir -p "$ENGINE_DIR/data" "$ENGINE_DIR/exec"
  if [[ ! -e "$KIND_NETNS_PATH" ]]; then
    ip netns add "$KIND_NETNS"
    in_kind_netns ip link set lo up
  fi
  python3 - "$DAEMON_JSON" "$ENGINE_DIR" "$DOCKER_SOCK" "$PIDFILE" "$ROOT/hack/kind-runc" <<'PY'
import json, sys
path, engine, sock, pidfile, runtime = sys.argv[1:]
json.dump({
    "data-root": f"{engine}/data",
    "exec-root": f"{engine}/exec",
    "pidfile": pidfile,
    "hosts": [f"unix://{sock}"],
    "runtimes": {"sluice-runc": {"path": runtime}},
    "default-runtime": "sluice-runc",
    "storage-driver": "overlay2",
    "log-driver": "json-file",
    "features": {"buildkit": False},
}, open(path, "w"), indent=2)
PY
  log "kind engine: starting dockerd in netns $KIND_NETNS ($DOCKER_HOST_URL; log $LOGF)"
  setsid nsenter --net="$KIND_NETNS_PATH" -- dockerd --config-file "$DAEMON_JSON" \
    >>"$LOGF" 2>&1 </dev/null 9>&- &
  wait_for "dockerd answering on $DOCKER_SOCK" 60 "$LOGF" docker_ info
}

down() {
  if running; then
    local ids
    ids="$(docker_ ps -aq 2>/dev/null || true)"
    if [[ -n "$ids" ]]; then
      log "kind engine: removing its containers"
      # shellcheck disable=SC2086  # one id per word
      docker_ rm -f $ids >/dev/null 2>&1 || true
    fi
    log "kind engine: stopping dockerd (pid $(cat "$PIDFILE"))"
    kill "$(cat "$PIDFILE")" 2>/dev/null || true
    local waited=0
    while running && (( waited < 30 )); do sleep 1; waited=$((waited + 1)); done
    running && kill -9 "$(cat "$PIDFILE")" 2>/dev/null || true
  fi
  # Mounts dockerd leaves behind (overlays, netns bind mounts) under its roots.
  local m
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v d="$ENGINE_DIR" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
  if [[ -e "$KIND_NETNS_PATH" ]]; then
    [[ -z "$(ip netns pids "$KIND_NETNS" 2>/dev/null)" ]] \
      || die "network namespace $KIND_NETNS still has processes: ip netns pids $KIND_NETNS"
    ip netns del "$KIND_NETNS"
  fi
  rm -f "$PIDFILE" "$DOCKER_SOCK"
  log "kind engine: down (nothing left running; data kept in $ENGINE_DIR/data)"
}

check() {
  up
  local image="sluice-kind-check:bookworm"
  if ! docker_ image inspect "$image" >/dev/null 2>&1; then
    local rootfs="$KIND_DIR/check-rootfs"
    if [[ ! -x "$rootfs/bin/sh" ]]; then
      log "check: a minimal Debian rootfs (debootstrap --variant=minbase bookworm)"
      rm -rf "$rootfs"
      debootstrap --variant=minbase bookworm "$rootfs" >>"$ENGINE_DIR/debootstrap.log" 2>&1 \
        || { tail_log "$ENGINE_DIR/debootstrap.log"; die "debootstrap failed"; }
    fi
    tar -C "$rootfs" -c . | docker_ import - "$image" >/dev/null
  fi
  log "check: docker run --privileged (as kind runs its nodes)"
  local out
  out="$(docker_ run --rm --privileged --cgroupns=private "$image" \
    sh -c 'echo "uid $(id -u), $(grep ^CapEff /proc/self/status)"')" \
    || die "docker run --privileged failed (see $LOGF)"
  log "check: the container ran: $out"
  if ip link show docker0 >/dev/null 2>&1; then
    die "docker0 appeared in the root network namespace"
  fi
  log "check: nothing in the root network namespace (no docker0 there)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  check) check ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST_URL  # inside netns $KIND_NETNS: hack/kind-engine.sh exec ..." ;;
  exec) shift; in_kind_netns env DOCKER_HOST="$DOCKER_HOST_URL" "$@" ;;
  *) die "usage: hack/kind-engine.sh up|check|down|env|exec CMD..." ;;
esac
