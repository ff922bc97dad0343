#!/usr/bin/env bash
# A local OCI registry for `make release` and its tests: CNCF distribution's
# `registry serve` (hack/build-registry.sh), plain HTTP, on loopback unless told
# otherwise, its storage under the cache. Nothing is exposed beyond the address it
# listens on.
#
#   hack/registry.sh up      # build it if missing, start it (a no-op while it runs),
#                            # print its address (host:port) on stdout
#   hack/registry.sh url     # its address; exit 1, saying so, if it does not run
#   hack/registry.sh down    # stop it; what was pushed stays in $SLUICE_REGISTRY_DIR/data
#   hack/registry.sh purge   # stop it and delete what was pushed
#   hack/registry.sh htpasswd USER   # USER's htpasswd line for the password on stdin
#
#   make release REGISTRY=$(hack/registry.sh up)/sluice-project PLAIN_HTTP=1
#
# Settings (environment):
#   SLUICE_REGISTRY_DIR       its state, log and storage (default $SLUICE_CACHE/registry)
#   SLUICE_REGISTRY_ADDR      host:port to listen on (default: the address it had last
#                             time in this directory, else 127.0.0.1 and a free port)
#   SLUICE_REGISTRY_HTPASSWD  an htpasswd file (bcrypt, `hack/registry.sh htpasswd`):
#                             every request must then carry one of its users (basic auth)
#
# It runs in the caller's network namespace: the k8s tests start it inside the
# cluster's, on the address the node reaches (tests/k8s/test_release_install.py).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="${SLUICE_REGISTRY_DIR:-$SLUICE_CACHE/registry}"
BINARY="$SLUICE_BIN/registry"
PIDFILE="$DIR/registry.pid"
ADDRFILE="$DIR/addr"
LOGFILE="$DIR/registry.log"

# The pid of the registry this directory's state names, if that process is still it.
running_pid() {
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  # The pid may have been reused by another program since: check what it runs.
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$(readlink -f "$BINARY")" ]] || return 1
  echo "$pid"
}

# 200 (no auth) or 401 (htpasswd) from the API's base endpoint: it serves.
answers() {
  local code
  code="$(curl -s --noproxy '*' -o /dev/null --max-time 2 -w '%{http_code}' "http://$1/v2/")" || return 1
  [[ "$code" == 200 || "$code" == 401 ]]
}

free_loopback_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

up() {
  if running_pid >/dev/null; then
    log "registry: already running on $(cat "$ADDRFILE") (pid $(running_pid); $DIR)"
    cat "$ADDRFILE"
    return
  fi
  "$SLUICE_ROOT/hack/build-registry.sh"
  mkdir -p "$DIR/data"
  local addr="${SLUICE_REGISTRY_ADDR:-}"
  [[ -n "$addr" ]] || addr="$(cat "$ADDRFILE" 2>/dev/null || true)"
  [[ -n "$addr" ]] || addr="127.0.0.1:$(free_loopback_port)"
  [[ "$addr" == *:* ]] || die "SLUICE_REGISTRY_ADDR must be host:port, not '$addr'"
  {
    echo "# Written by hack/registry.sh; rewritten at every start."
    echo "version: 0.1"
    echo "log: {level: info, formatter: text}"
    echo "storage:"
    echo "  filesystem: {rootdirectory: \"$DIR/data\"}"
    echo "  delete: {enabled: true}"
    echo "http:"
    echo "  addr: \"$addr\""
    echo "  headers: {X-Content-Type-Options: [nosniff]}"
    if [[ -n "${SLUICE_REGISTRY_HTPASSWD:-}" ]]; then
      [[ -f "$SLUICE_REGISTRY_HTPASSWD" ]] || die "SLUICE_REGISTRY_HTPASSWD: no file $SLUICE_REGISTRY_HTPASSWD"
      echo "auth:"
      echo "  htpasswd: {realm: sluice-registry, path: \"$SLUICE_REGISTRY_HTPASSWD\"}"
    fi
  } >"$DIR/config.yml"
  # Its traces go nowhere (by default it would send them to an OTLP collector on
  # localhost, and log each failure to).
  OTEL_TRACES_EXPORTER=none setsid "$BINARY" serve "$DIR/config.yml" \
    >>"$LOGFILE" 2>&1 </dev/null 9>&- &
  local pid=$!
  echo "$pid" >"$PIDFILE"
  echo "$addr" >"$ADDRFILE"
  local t0=$SECONDS
  until answers "$addr"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail_log "$LOGFILE"
      rm -f "$PIDFILE"
      die "registry exited at start (log: $LOGFILE)"
    fi
    if (( SECONDS - t0 >= 30 )); then
      tail_log "$LOGFILE"
      kill "$pid" 2>/dev/null || true
      rm -f "$PIDFILE"
      die "registry did not answer on http://$addr/v2/ within 30 s"
    fi
    sleep 0.2
  done
  log "registry: serving http://$addr (pid $pid; storage $DIR/data; log $LOGFILE)"
  echo "$addr"
}

url() {
  running_pid >/dev/null || die "no registry runs for $DIR: hack/registry.sh up starts one"
  cat "$ADDRFILE"
}

down() {
  local pid
  if ! pid="$(running_pid)"; then
    log "registry: not running ($DIR)"
    rm -f "$PIDFILE"
    return
  fi
  kill -TERM "$pid"
  local waited=0
  while kill -0 "$pid" 2>/dev/null && (( waited < 100 )); do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$PIDFILE"
  log "registry: stopped (pid $pid); what was pushed stays in $DIR/data"
}

case "${1:-}" in
  up) up ;;
  url) url ;;
  down) down ;;
  purge)
    down
    rm -rf "$DIR/data" "$ADDRFILE" "$DIR/config.yml"
    log "registry: storage deleted ($DIR/data)"
    ;;
  htpasswd)
    [[ $# == 2 ]] || die "usage: hack/registry.sh htpasswd USER (the password on stdin)"
    "$SLUICE_ROOT/hack/build-registry.sh"
    "$BINARY" htpasswd "$2"
    ;;
  *) die "usage: hack/registry.sh up|url|down|purge|htpasswd USER" ;;
esac
