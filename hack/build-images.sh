#!/usr/bin/env bash
# Build the images the local cluster runs, without any registry:
#
#   localhost/sluice-pause:3.10   the pod sandbox image: hack/pause/pause.c,
#                                 compiled static, alone in a scratch image
#   localhost/sluice-base:bookworm a Debian bookworm root filesystem made with
#                                 debootstrap (python3 + venv), made once
#   localhost/sluice:dev          the project's own Dockerfile, built with
#                                 buildah over sluice-base, installing from
#                                 wheels built on this host with `pip wheel`
#   localhost/sluice-postgres:15  the chart's bundled database for this
#                                 cluster: Debian's postgresql-15 over
#                                 sluice-base, uid 999, with
#                                 hack/postgres/docker-entrypoint.sh (the
#                                 official image's interface: POSTGRES_USER,
#                                 POSTGRES_PASSWORD, POSTGRES_DB, PGDATA)
#
# Each image is saved as a docker-archive under $SLUICE_CACHE/images/ for
# `ctr images import`. A warm run with unchanged inputs is a no-op.
# Needs root, and the Debian packages buildah, debootstrap and gcc (libc6-dev).
#
#   hack/build-images.sh                 # all of them
#   hack/build-images.sh sluice          # only some (pause, sluice, postgres; the base
#                                        # comes with sluice and postgres): `make release`
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMG_DIR="$SLUICE_CACHE/images"
BASE_IMAGE_NAME="${SLUICE_BASE_IMAGE:-localhost/sluice-base:bookworm}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-$( [[ -x "$SLUICE_ROOT/.venv/bin/python" ]] && echo "$SLUICE_ROOT/.venv/bin/python" || echo python3)}"
mkdir -p "$IMG_DIR"

for tool in buildah debootstrap gcc; do
  command -v "$tool" >/dev/null || die "$tool not found: apt-get install -y buildah debootstrap gcc libc6-dev"
done

image_id() { "${BUILDAH[@]}" images --noheading --format '{{.ID}}' "$1" 2>/dev/null | head -n1; }

# save IMAGE FILE: write a docker-archive that `ctr images import` reads.
save_image() {
  local image="$1" file="$2"
  rm -f "$file.tmp"
  "${BUILDAH[@]}" push --quiet "$image" "docker-archive:$file.tmp:$image" >/dev/null
  mv "$file.tmp" "$file"
}

build_pause() {
  local src="$SLUICE_ROOT/hack/pause/pause.c"
  local key
  key="pause $(sha256sum "$src" | cut -c1-16) recipe=1"
  if [[ -f "$IMG_DIR/pause.tar" && "$(cat "$IMG_DIR/.stamp-pause" 2>/dev/null)" == "$key" ]] \
    && [[ -n "$(image_id "$PAUSE_IMAGE")" ]]; then
    log "pause image: up to date"
    return
  fi
  log "pause image: compiling $src (static)"
  local work="$IMG_DIR/pause-build"
  rm -rf "$work" && mkdir -p "$work"
  gcc -Os -static -Wall -Werror -o "$work/pause" "$src"
  strip "$work/pause"
  local ctr
  ctr="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" copy --quiet "$ctr" "$work/pause" /pause >/dev/null
  "${BUILDAH[@]}" config --entrypoint '["/pause"]' --user 65535:65535 \
    --label org.opencontainers.image.title=sluice-pause "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$PAUSE_IMAGE" >/dev/null
  save_image "$PAUSE_IMAGE" "$IMG_DIR/pause.tar"
  echo "$key" >"$IMG_DIR/.stamp-pause"
  rm -rf "$work"
  log "pause image: built $PAUSE_IMAGE"
}

build_base() {
  local key="base $DEBIAN_SUITE python3 python3-venv recipe=1"
  if [[ "$(cat "$IMG_DIR/.stamp-base" 2>/dev/null)" == "$key" && -n "$(image_id "$BASE_IMAGE_NAME")" ]]; then
    log "base image: up to date ($BASE_IMAGE_NAME)"
    return
  fi
  local rootfs="$IMG_DIR/rootfs-$DEBIAN_SUITE"
  log "base image: debootstrap $DEBIAN_SUITE (minbase + python3, python3-venv) into $rootfs"
  rm -rf "$rootfs"
  local t0=$SECONDS
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$IMG_DIR/debootstrap.log" 2>&1 \
    || { tail_log "$IMG_DIR/debootstrap.log"; die "debootstrap failed"; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
  log "base image: debootstrap took $(fmt_duration $((SECONDS - t0)))"
  local ctr mnt
  ctr="$("${BUILDAH[@]}" from scratch)"
  mnt="$("${BUILDAH[@]}" mount "$ctr")"
  tar -C "$rootfs" -cf - . | tar -C "$mnt" -xpf -
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/sh --label org.opencontainers.image.title=sluice-base "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE_IMAGE_NAME" >/dev/null
  rm -rf "$rootfs"
  echo "$key" >"$IMG_DIR/.stamp-base"
  log "base image: built $BASE_IMAGE_NAME"
}

build_sluice() {
  local ctx="$IMG_DIR/context"
  rm -rf "$ctx" && mkdir -p "$ctx"
  # The build context: the repository's files (tracked or not, minus what git
  # ignores); the Dockerfile's .dockerignore narrows it further.
  if git -C "$SLUICE_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$SLUICE_ROOT" && git ls-files -z --cached --others --exclude-standard \
      | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh \
      | tar --null -T - -cf -) | tar -C "$ctx" -xf -
  else
    # Not a git checkout (an unpacked archive): everything but the usual litter.
    tar -C "$SLUICE_ROOT" --exclude=.git --exclude=.venv --exclude=__pycache__ \
      --exclude='*.egg-info' --exclude=.mypy_cache --exclude=.ruff_cache \
      --exclude=.pytest_cache -cf - . | tar -C "$ctx" -xf -
  fi
  # The UI's vendored JavaScript is git-ignored (fetched by `make ui-assets`): added here.
  bash "$SLUICE_ROOT/hack/ui-assets.sh" --optional >/dev/null
  if [[ -d "$SLUICE_ROOT/operator/sluice/ui/static/vendor" ]]; then
    mkdir -p "$ctx/operator/sluice/ui/static/vendor"
    cp -a "$SLUICE_ROOT/operator/sluice/ui/static/vendor/." "$ctx/operator/sluice/ui/static/vendor/"
  fi
  if [[ ! -f "$ctx/README.md" ]]; then
    log "sluice image: README.md missing in the repository; using a placeholder in the build context"
    echo "# Sluice" >"$ctx/README.md"
  fi
  local key
  # The inputs the Dockerfile uses (its .dockerignore lets only these in).
  local inputs=() f
  for f in Dockerfile .dockerignore pyproject.toml README.md LICENSE operator; do
    [[ -e "$ctx/$f" ]] && inputs+=("$f")
  done
  key="sluice $(cd "$ctx" && find "${inputs[@]}" -type f -print0 | sort -z | xargs -0 sha256sum \
    | sha256sum | cut -c1-16)"
  # What the image's OCI labels say (part of the key, so a label never lies).
  local version revision source
  version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ctx/pyproject.toml" | head -n1)"
  revision="$(git -C "$SLUICE_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  source="$(git -C "$SLUICE_ROOT" remote get-url origin 2>/dev/null || echo unknown)"
  key+=" base=$(image_id "$BASE_IMAGE_NAME") version=$version revision=$revision recipe=2"
  if [[ -f "$IMG_DIR/sluice.tar" && "$(cat "$IMG_DIR/.stamp-sluice" 2>/dev/null)" == "$key" ]] \
    && [[ -n "$(image_id "$SLUICE_IMAGE")" ]]; then
    log "sluice image: up to date ($SLUICE_IMAGE)"
    rm -rf "$ctx"
    return
  fi
  # Wheels for the project and all its dependencies, built on this host with
  # the same Python minor version as the base image (Debian's python3).
  local wheels="$IMG_DIR/wheelhouse"
  mkdir -p "$wheels"
  log "sluice image: pip wheel (host $($PYTHON --version 2>&1)) into $wheels"
  "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --find-links "$wheels" \
    -w "$wheels" "$ctx" "setuptools>=69" wheel >"$IMG_DIR/pip-wheel.log" 2>&1 \
    || { tail_log "$IMG_DIR/pip-wheel.log"; die "pip wheel failed"; }
  cp -a "$wheels" "$ctx/wheelhouse"
  log "sluice image: buildah build -f Dockerfile --build-arg BASE_IMAGE=$BASE_IMAGE_NAME"
  "${BUILDAH[@]}" build --quiet --isolation chroot --layers=false --pull=never \
    --build-arg "BASE_IMAGE=$BASE_IMAGE_NAME" --build-arg WHEELHOUSE=wheelhouse \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source" \
    -f "$ctx/Dockerfile" -t "$SLUICE_IMAGE" "$ctx" >"$IMG_DIR/buildah-build.log" 2>&1 \
    || { tail_log "$IMG_DIR/buildah-build.log" 60; die "buildah build failed"; }
  save_image "$SLUICE_IMAGE" "$IMG_DIR/sluice.tar"
  echo "$key" >"$IMG_DIR/.stamp-sluice"
  rm -rf "$ctx"
  # Drop dangling images from earlier builds so the storage does not grow.
  "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
  log "sluice image: built $SLUICE_IMAGE"
}

build_postgres() {
  local entry="$SLUICE_ROOT/hack/postgres/docker-entrypoint.sh"
  local key
  key="postgres-15 $(sha256sum "$entry" | cut -c1-16) base=$(image_id "$BASE_IMAGE_NAME") recipe=1"
  if [[ -f "$IMG_DIR/postgres.tar" && "$(cat "$IMG_DIR/.stamp-postgres" 2>/dev/null)" == "$key" ]] \
    && [[ -n "$(image_id "$POSTGRES_IMAGE")" ]]; then
    log "postgres image: up to date ($POSTGRES_IMAGE)"
    return
  fi
  log "postgres image: apt-get install postgresql-15 over $BASE_IMAGE_NAME"
  local ctr t0=$SECONDS
  ctr="$("${BUILDAH[@]}" from --pull=never "$BASE_IMAGE_NAME")"
  # The official image's uid and gid (999), made before the package makes its own.
  "${BUILDAH[@]}" run --isolation chroot "$ctr" -- sh -euc '
    groupadd -r -g 999 postgres
    useradd -r -u 999 -g 999 -d /var/lib/postgresql -s /bin/sh postgres
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/no-main.conf
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
    mkdir -p /var/run/postgresql /var/lib/postgresql/data
    chown -R 999:999 /var/run/postgresql /var/lib/postgresql
    chmod 3777 /var/run/postgresql' >"$IMG_DIR/postgres-build.log" 2>&1 \
    || { tail_log "$IMG_DIR/postgres-build.log"; die "building the postgres image failed"; }
  "${BUILDAH[@]}" copy --quiet --chmod 0755 "$ctr" "$entry" /usr/local/bin/docker-entrypoint.sh >/dev/null
  "${BUILDAH[@]}" config \
    --env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PGDATA=/var/lib/postgresql/data --user 999:999 \
    --entrypoint '["docker-entrypoint.sh"]' --cmd postgres --port 5432 \
    --label org.opencontainers.image.title=sluice-postgres "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$POSTGRES_IMAGE" >/dev/null
  save_image "$POSTGRES_IMAGE" "$IMG_DIR/postgres.tar"
  echo "$key" >"$IMG_DIR/.stamp-postgres"
  log "postgres image: built $POSTGRES_IMAGE ($(fmt_duration $((SECONDS - t0))))"
}

start=$SECONDS
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(pause sluice postgres)
base_done=""
for part in "${parts[@]}"; do
  case "$part" in
    pause) build_pause ;;
    sluice | postgres)
      [[ -n "$base_done" ]] || { build_base; base_done=1; }
      "build_$part"
      ;;
    *) die "unknown image: $part (pause, sluice, postgres)" ;;
  esac
done
log "build-images: ${parts[*]} done in $(fmt_duration $((SECONDS - start))) (archives in $IMG_DIR)"
