#!/usr/bin/env bash
# The UI's vendored JavaScript (ADR 0039), fetched from the npm registry at a pinned
# version and checked against its sha256; written under operator/sluice/ui/static/vendor/
# (git-ignored), so `pip install` and the image carry it. A no-op when it is there.
# With --optional (make install, the image build), a machine without npm goes on
# without it: the UI then says, on its graph page, how to get it.
set -euo pipefail
optional=false
[[ "${1:-}" == "--optional" ]] && optional=true
cd "$(dirname "$0")/.."
DEST=operator/sluice/ui/static/vendor
PACKAGE=@dagrejs/dagre VERSION=3.1.3
SHA256=54a503e346f93ca0bb10abe7999587e037262935687aca45eb4e4b0f64bbb578
if [ -f "$DEST/dagre.min.js" ] && echo "$SHA256  $DEST/dagre.min.js" | sha256sum -c --status; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  if $optional; then
    echo "ui-assets: no npm here; the UI's graph page will say how to add its layout library" >&2
    exit 0
  fi
  echo "ui-assets: npm is needed to fetch $PACKAGE@$VERSION from the npm registry" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null && tar xzf ./*.tgz)
echo "$SHA256  $tmp/package/dist/dagre.min.js" | sha256sum -c --status || {
  echo "ui-assets: $PACKAGE@$VERSION's dist/dagre.min.js does not have the pinned sha256" >&2
  exit 1
}
mkdir -p "$DEST"
cp "$tmp/package/dist/dagre.min.js" "$DEST/dagre.min.js"
cp "$tmp/package/LICENSE" "$DEST/dagre.LICENSE" 2>/dev/null || true
echo "ui-assets: $PACKAGE@$VERSION -> $DEST/dagre.min.js"
