#!/usr/bin/env bash
# Publish a Sluice release to an OCI registry: the image and the Helm chart.
#
#   make release REGISTRY=ghcr.io/sluice-project                 # what .github/workflows does
#   make release REGISTRY=127.0.0.1:5000/sluice-project PLAIN_HTTP=1   # hack/registry.sh's
#
# One version, from one place: pyproject.toml's. VERSION (default: that one) must
# equal it, and charts/sluice/Chart.yaml's version and appVersion must too
# (tests/unit/test_release.py checks them); a release of any other version is
# refused, before anything is built. Then, in this order, so that the chart is never
# published before the image it names:
#
#   1. the image: hack/build-images.sh sluice (localhost/sluice:dev from this
#      checkout, a no-op when it is up to date), pushed as REGISTRY/sluice:VERSION;
#   2. the chart: charts/sluice with its default image.repository set to
#      REGISTRY/sluice (so the chart pulls the image pushed with it), packaged with
#      version and appVersion VERSION into dist/sluice-VERSION.tgz, rendered once
#      (`helm template`) to check the image it names, and pushed to
#      oci://REGISTRY/charts: `helm install oci://REGISTRY/charts/sluice --version VERSION`.
#
# A chart version that the registry already has is refused (a published version
# is never replaced; bump pyproject.toml's). Credentials: REGISTRY_USERNAME and
# REGISTRY_PASSWORD (environment) log in for this run only, into temporary files;
# without them buildah and helm use the logins they already have. PLAIN_HTTP=1
# talks plain HTTP to the registry (a local test registry; never for a real one).
# Needs root, buildah and helm (hack/build-k8s.sh helm); ADR 0046.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REGISTRY="${REGISTRY:-}"
PLAIN_HTTP="${PLAIN_HTTP:-0}"
HELM="${HELM:-$SLUICE_BIN/helm}"
PYTHON="${PYTHON:-$( [[ -x "$SLUICE_ROOT/.venv/bin/python" ]] && echo "$SLUICE_ROOT/.venv/bin/python" || echo python3)}"
CHART_DIR="$SLUICE_ROOT/charts/sluice"
DIST="${DIST:-$SLUICE_ROOT/dist}"
# The chart's default image.repository, as committed: the line release rewrites.
DEFAULT_REPOSITORY="ghcr.io/sluice-project/sluice"

# ---------------------------------------------------------------- what to publish
[[ -n "$REGISTRY" ]] || die "REGISTRY is required: make release REGISTRY=HOST[:PORT]/PATH (e.g. ghcr.io/sluice-project; a local one: hack/registry.sh up)"
REGISTRY="${REGISTRY%/}"
[[ "$REGISTRY" != *://* ]] || die "REGISTRY is HOST[:PORT]/PATH, without a scheme (PLAIN_HTTP=1 for http): not '$REGISTRY'"
[[ "$REGISTRY" =~ ^[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$ ]] \
  || die "REGISTRY must be HOST[:PORT]/PATH in lower case (an OCI repository prefix), not '$REGISTRY'"
REGISTRY_HOST="${REGISTRY%%/*}"
[[ "$PLAIN_HTTP" == 0 || "$PLAIN_HTTP" == 1 ]] || die "PLAIN_HTTP must be 0 or 1, not '$PLAIN_HTTP'"

PYPROJECT_VERSION="$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$SLUICE_ROOT/pyproject.toml")"
VERSION="${VERSION:-$PYPROJECT_VERSION}"
if [[ "$VERSION" != "$PYPROJECT_VERSION" ]]; then
  die "VERSION=$VERSION differs from pyproject.toml's version ($PYPROJECT_VERSION): a release is \
pyproject's version, for the package, the chart and the image alike. Set version = \"$VERSION\" in \
pyproject.toml, and version and appVersion in charts/sluice/Chart.yaml, commit, and release that \
(or leave VERSION unset)."
fi
# SemVer 2 without build metadata: Helm's chart versions are SemVer, and '+' is not
# allowed in an image tag.
[[ "$VERSION" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] \
  || die "version $VERSION is not MAJOR.MINOR.PATCH[-PRERELEASE] (SemVer without build metadata)"
chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" "$CHART_DIR/Chart.yaml"; }
for field in version appVersion; do
  [[ "$(chart_field "$field")" == "$VERSION" ]] \
    || die "charts/sluice/Chart.yaml's $field is '$(chart_field "$field")', not pyproject's $VERSION: set it to $VERSION"
done
[[ -x "$HELM" ]] || die "helm not found at $HELM: make helm builds it"
command -v buildah >/dev/null || die "buildah not found: apt-get install -y buildah (hack/install-deps.sh)"
[[ $(id -u) == 0 ]] || die "make release builds the image as hack/build-images.sh does: run it as root"

IMAGE="$REGISTRY/sluice:$VERSION"
CHART_REPO="oci://$REGISTRY/charts"
CHART_REF="$CHART_REPO/sluice"
TLS=() PLAIN=()
if [[ "$PLAIN_HTTP" == 1 ]]; then
  TLS=(--tls-verify=false)
  PLAIN=(--plain-http)
fi
revision="$(git -C "$SLUICE_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
log "release $VERSION (revision $revision) to $REGISTRY: image $IMAGE, chart $CHART_REF"
[[ "$revision" != *-dirty ]] || log "WARNING: the tree has uncommitted changes: the image's revision label says $revision"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
AUTH=() HELM_AUTH=()
if [[ -n "${REGISTRY_USERNAME:-}" ]]; then
  [[ -n "${REGISTRY_PASSWORD:-}" ]] || die "REGISTRY_USERNAME is set but REGISTRY_PASSWORD is not"
  AUTH=(--authfile "$WORK/auth.json")
  HELM_AUTH=(--registry-config "$WORK/helm-registry.json")
  printf '%s\n' "$REGISTRY_PASSWORD" | "${BUILDAH[@]}" login "${AUTH[@]}" "${TLS[@]}" \
    --username "$REGISTRY_USERNAME" --password-stdin "$REGISTRY_HOST" >&2
  printf '%s\n' "$REGISTRY_PASSWORD" | "$HELM" registry login "${HELM_AUTH[@]}" "${PLAIN[@]}" \
    --username "$REGISTRY_USERNAME" --password-stdin "$REGISTRY_HOST" >&2
fi

# A published version is never replaced.
if "$HELM" show chart "${HELM_AUTH[@]}" "${PLAIN[@]}" "$CHART_REF" --version "$VERSION" >/dev/null 2>&1; then
  die "$CHART_REF $VERSION is already published: a release is never replaced; bump the version in pyproject.toml and charts/sluice/Chart.yaml"
fi

# ---------------------------------------------------------------- 1. the image
t0=$SECONDS
"$SLUICE_ROOT/hack/build-images.sh" sluice
log "release: pushing $SLUICE_IMAGE as $IMAGE"
"${BUILDAH[@]}" push --quiet "${AUTH[@]}" "${TLS[@]}" --format oci --digestfile "$WORK/digest" \
  "$SLUICE_IMAGE" "docker://$IMAGE" >&2
DIGEST="$(cat "$WORK/digest")"
log "release: image $IMAGE@$DIGEST ($(fmt_duration $((SECONDS - t0))))"

# ---------------------------------------------------------------- 2. the chart
t0=$SECONDS
STAGE="$WORK/chart/sluice"
mkdir -p "$STAGE"
cp -a "$CHART_DIR/." "$STAGE/"
line="  repository: $DEFAULT_REPOSITORY"
[[ "$(grep -cxF "$line" "$STAGE/values.yaml")" == 1 ]] \
  || die "charts/sluice/values.yaml has no single line '$line' (image.repository) to point at $REGISTRY/sluice"
sed -i "s|^  repository: $DEFAULT_REPOSITORY\$|  repository: $REGISTRY/sluice|" "$STAGE/values.yaml"
mkdir -p "$DIST"
rm -f "$DIST/sluice-$VERSION.tgz"
"$HELM" package "$STAGE" --version "$VERSION" --app-version "$VERSION" --destination "$DIST" >&2
PACKAGE="$DIST/sluice-$VERSION.tgz"
# What the package installs by default: every Sluice container on the image just pushed.
images="$("$HELM" template sluice "$PACKAGE" | sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' | sort -u)"
grep -qxF "$IMAGE" <<<"$images" \
  || die "the packaged chart does not render the image $IMAGE; it renders: $(tr '\n' ' ' <<<"$images")"
"$HELM" push "${HELM_AUTH[@]}" "${PLAIN[@]}" "$PACKAGE" "$CHART_REPO" >&2
log "release: chart $CHART_REF $VERSION ($PACKAGE; $(fmt_duration $((SECONDS - t0))))"

cat <<EOF
released $VERSION
  image  $IMAGE@$DIGEST
  chart  $CHART_REF --version $VERSION
  helm install sluice $CHART_REF --version $VERSION${PLAIN[*]:+ ${PLAIN[*]}} -n sluice --create-namespace
EOF
