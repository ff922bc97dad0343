#!/usr/bin/env bash
# Build versitygw, an S3-compatible server over a directory, for the log-archive
# tests (tests/s3server.py), from source through the Go module proxy into
# $SLUICE_BIN (~/.cache/sluice/bin, outside the repo).
#
#   hack/build-versitygw.sh          # build it if it is missing (otherwise a no-op)
#   FORCE=1 hack/build-versitygw.sh  # build it again
#
# A binary that is there is kept, whatever version it is, and its version is
# reported (read from the module information Go embeds, when go is installed);
# an old one is rebuilt with FORCE=1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE=github.com/versity/versitygw
BINARY="$SLUICE_BIN/versitygw"

built_version() { go_module_version "$BINARY" "$MODULE"; }

if [[ -x "$BINARY" && "${FORCE:-0}" != 1 ]]; then
  have="$(built_version)"
  log "versitygw $have: already built in $SLUICE_BIN (pinned: $VERSITYGW_VERSION; FORCE=1 rebuilds)"
  exit 0
fi

command -v go >/dev/null || die "go is required to build versitygw (Go >= 1.24)"
mkdir -p "$SLUICE_BIN"
# Through the module proxy (Go's default), never a clone of the repository.
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
export CGO_ENABLED=0
log "versitygw $VERSITYGW_VERSION: building into $SLUICE_BIN (a few minutes, more on a busy machine)"
start=$SECONDS
GOBIN="$SLUICE_BIN" nice -n 19 go install "$MODULE/cmd/versitygw@$VERSITYGW_VERSION"
log "versitygw $(built_version): built in $((SECONDS - start)) s: $BINARY"
